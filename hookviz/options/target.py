"""What to explain (``TargetOptions``): the target, the objective, the CAM methods (with their
own settings), the top-K."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.options.base import set_field

__all__ = ["MAX_TOPK", "OBJECTIVES", "BOX_OBJECTIVES", "TargetOptions"]

#: At most this many classes get a CAM of their own (``--topk``): each is a panel of one picture.
MAX_TOPK = 20
OBJECTIVES = ("logit", "ce")
#: What explains a detection (``--box-objective``): its matched box's score alone, or that
#: score plus the box's IoU with the detection, as pytorch-grad-cam's FasterRCNNBoxScoreTarget.
BOX_OBJECTIVES = ("score", "score+iou")


@dataclass(frozen=True)
class TargetOptions:
    """What to explain.

    Attributes:
        target: ``top1`` (each image's top class), a class index, or a class name.
        objective: ``logit`` (back-propagate the target's logit) or ``ce`` (cross-entropy).
        cam: the names of registered methods (``hookviz.methods``), separated by commas
            (``gradcam,eigencam``), or ``none``; a CAM always explains the target's score (a
            logit), whatever the objective. The first method that makes maps at the layer's
            resolution is the main one: ``LayerResult.cam``, the ``--topk`` maps.
        topk: how many top classes get a CAM of their own (1: the target only), by the main method.
        output_key: which part of a model's output holds the logits, when it returns several
            (a dict key, or an index into a tuple).
        settings: the option groups of the methods asked for (``Method.options``: integrated
            gradients' ``IGOptions(steps=8)``); once made, one per group the methods declare (its
            defaults where none was given), in the methods' order. A group given with a value of
            its own that no method asked declares is refused, naming who takes it.

    A task's own options are a group of its own (``hookviz.tasks.DetectOptions``: which
    detections are explained, and what explains each).
    """

    target: str = "top1"
    objective: str = "logit"
    cam: str = "gradcam"  # a list of names is taken too, and kept as one string
    topk: int = 1
    output_key: str | None = None
    settings: tuple = ()

    def __post_init__(self):
        from hookviz.methods import get_method

        target = str(self.target).strip()
        if re.fullmatch(r"-\d+", target):
            raise UsageError(f"{arg('target', target)}: a class index must be 0 or more")
        if not target:
            raise UsageError(f"{arg('target', self.target)}: give top1, a class index or a class name")
        set_field(self, "target", target)
        if self.objective not in OBJECTIVES:
            raise UsageError(f"{arg('objective', self.objective)}: choose {' or '.join(OBJECTIVES)}")
        set_field(self, "cam", ",".join(_method_names(self.cam)))
        methods = [get_method(name) for name in self.methods]
        if not isinstance(self.topk, int) or not 1 <= self.topk <= MAX_TOPK:
            raise UsageError(f"{arg('topk', self.topk)}: must be from 1 to {MAX_TOPK} (one panel per class)")
        if self.topk > 1:
            _check_topk(self.topk, self.cam, [m for m in methods if m.resolution == "layer"])
        set_field(self, "settings", _method_settings(self.settings, self.methods, methods))
        if self.output_key is not None:
            key = str(self.output_key).strip()
            if not key:
                raise UsageError(f"{arg('output_key', self.output_key)}: give a key or an index")
            set_field(self, "output_key", key)

    @property
    def methods(self) -> tuple[str, ...]:
        """The CAM methods' names, in the order given; ``()`` for ``none``."""
        return () if self.cam == "none" else tuple(self.cam.split(","))

    def asked(self) -> dict:
        """What report.json keeps of them: each option, and each method's settings under its group's owners."""
        from hookviz.options.declared import settings_of

        asked = {name: getattr(self, name) for name in ("target", "objective", "cam", "topk", "output_key")}
        by_group = {
            (",".join(_owners(type(g), self.methods)) or "smooth"): {s.name: getattr(g, s.name) for s in settings_of(type(g))}
            for g in self.settings
        }
        return {**asked, "settings": by_group}


def _method_names(cam) -> list[str]:
    """``cam`` split at its commas, each name stripped, checked to be one list of methods."""
    text = ",".join(map(str, cam)) if isinstance(cam, (list, tuple)) else str(cam)
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError(f"{arg('cam', cam)}: an empty method name; give names separated by commas (gradcam,eigencam)")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"{arg('cam', cam)}: {', '.join(twice)} named twice; give each method once")
    if "none" in names and len(names) > 1:
        raise UsageError(f"{arg('cam', cam)}: none means no CAM at all; drop it or the other names")
    return names


def _method_settings(given, names: tuple[str, ...], methods) -> tuple:
    """One settings group per group the ``methods`` declare, in their order: the one ``given``
    (each checked), else its defaults. A group given that none of them declares would change
    nothing: refused when it holds a value of its own (``--steps`` without integrated
    gradients), whoever registered the methods."""
    from hookviz.options.declared import check_values, groups, refuse_given

    given = (given,) if not isinstance(given, (tuple, list)) else tuple(given)
    declared = groups("method")
    for group in given:
        if type(group) not in declared:
            known = ", ".join(g.__name__ for g in declared)
            raise UsageError(f"{arg('settings', type(group).__name__)}: expected a method's option group ({known})")
        check_values(group)
    used = list(dict.fromkeys(m.options for m in methods if m.options is not None))
    used += _smoothing(given, names, methods, used)
    for group in given:
        if type(group) not in used:
            where = f"{arg('cam', ','.join(names) or 'none')} does not include it"
            refuse_given(group, where, "add {taker} to the methods or drop the option")
    twice = [g for g in used if sum(type(h) is g for h in given) > 1]
    if twice:
        raise UsageError(f"{arg('settings')}: {twice[0].__name__} given twice; give it once")
    return tuple(next((h for h in given if type(h) is g), None) or g() for g in used)


def _smoothing(given: tuple, names: tuple[str, ...], methods, used: list) -> list:
    """``[SmoothOptions]`` when one is given with ``--smooth`` and no asked method declares it:
    it wraps the asked gradient methods; refused when none of them is one (``hookviz.methods.smoothing``)."""
    from hookviz.methods.smoothing import SmoothOptions, smoothable, unsmoothable
    from hookviz.options.declared import given_values

    group = next((g for g in given if type(g) is SmoothOptions), None)
    if group is None or SmoothOptions in used and group.smooth == "none":
        return []
    if group.smooth == "none":
        for name, value, _ in given_values(group):
            raise UsageError(
                f"{arg(name, value)}: it sets smoothing, and neither {arg('smooth')} is given nor smoothgradcam++ asked; "
                f"give {arg('smooth', 'smoothgrad')} (or smoothgrad-sq, vargrad) or drop the option"
            )
        return []
    if not any(smoothable(m) for m in methods):
        which = ", ".join(unsmoothable(methods)) or "none"
        raise UsageError(
            f"{arg('smooth', group.smooth)}: it smooths methods that need a gradient, and {arg('cam', ','.join(names) or 'none')} "
            f"has none to smooth ({which}: no gradient, an attention pass, or smoothing of its own); add one (gradcam, "
            "integrated-gradients) or drop the option"
        )
    return [] if SmoothOptions in used else [SmoothOptions]


def _owners(group: type, names: tuple[str, ...]) -> list[str]:
    """The methods among ``names`` that declare ``group``."""
    from hookviz.methods import get_method

    return [name for name in names if get_method(name).options is group]


def _check_topk(topk: int, cam: str, layer_methods) -> None:
    """``--topk`` draws the main (first layer-resolution) method's map of each top class."""
    if not layer_methods:
        raise UsageError(f"{arg('topk', topk)} needs a method that maps a layer; {arg('cam', cam)} has none")
    main = layer_methods[0]
    if not main.class_specific:
        raise UsageError(
            f"{arg('topk', topk)} with {arg('cam', cam)}: {main.name} makes the same map for every class (it uses "
            f"no target), so its top-{topk} maps would be one map {topk} times; drop {arg('topk')} or put a "
            f"class-specific method that maps a layer (gradcam) before {main.name}"
        )
