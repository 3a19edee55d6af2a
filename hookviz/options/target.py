"""What to explain (``TargetOptions``): the target, the objective, the CAM methods, the top-K."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.options.base import set_field

__all__ = ["MAX_TOPK", "OBJECTIVES", "IG_BASELINES", "MAX_STEPS", "BOX_OBJECTIVES", "TargetOptions"]

#: At most this many classes get a CAM of their own (``--topk``): each is a panel of one picture.
MAX_TOPK = 20
OBJECTIVES = ("logit", "ce")
#: What integrated gradients integrate from (``--ig-baseline``): zeros in the model's input
#: space (captum's default), the photo blurred, or the photo's mean colour.
IG_BASELINES = ("zero", "blur", "mean")
#: At most this many steps of integrated gradients (``--steps``): each is a forward and
#: backward pass of every image.
MAX_STEPS = 1024
#: Integrated gradients' steps unless ``steps`` says otherwise.
DEFAULT_STEPS = 32
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
        steps: integrated gradients' steps (Gauss-Legendre nodes, as captum's default rule).
        ig_baseline: what integrated gradients integrate from: ``zero`` (zeros in the model's
            input space, as captum's default), ``blur`` (the input blurred) or ``mean`` (its
            mean per channel).

    A task's own options are a group of its own (``hookviz.tasks.DetectOptions``: which
    detections are explained, and what explains each).
    """

    target: str = "top1"
    objective: str = "logit"
    cam: str = "gradcam"  # a list of names is taken too, and kept as one string
    topk: int = 1
    output_key: str | None = None
    steps: int = DEFAULT_STEPS
    ig_baseline: str = "zero"

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
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 1 <= self.steps <= MAX_STEPS:
            raise UsageError(
                f"{arg('steps', self.steps)}: integrated gradients takes 1 to {MAX_STEPS} steps (each a forward and "
                "backward pass of every image; 32 by default)"
            )
        if self.ig_baseline not in IG_BASELINES:
            raise UsageError(f"{arg('ig_baseline', self.ig_baseline)}: choose {', '.join(IG_BASELINES)}")
        given = {"steps": self.steps} if self.steps != DEFAULT_STEPS else {}
        given |= {"ig_baseline": self.ig_baseline} if self.ig_baseline != IG_BASELINES[0] else {}
        _check_method_settings(given, self.methods, methods)
        if self.output_key is not None:
            key = str(self.output_key).strip()
            if not key:
                raise UsageError(f"{arg('output_key', self.output_key)}: give a key or an index")
            set_field(self, "output_key", key)

    @property
    def methods(self) -> tuple[str, ...]:
        """The CAM methods' names, in the order given; ``()`` for ``none``."""
        return () if self.cam == "none" else tuple(self.cam.split(","))


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


def _check_method_settings(given: dict[str, object], names: tuple[str, ...], methods) -> None:
    """A method's setting (``--steps``, ``--ig-baseline``) given while no method asked takes it
    (``Method.takes``) would change nothing: refused, not ignored, whoever registered the methods."""
    from hookviz.methods import METHODS

    for setting, value in given.items():
        if any(setting in method.takes for method in methods):
            continue
        takers = [method.name for method in METHODS.values() if setting in method.takes]
        where = f"{arg('cam', ','.join(names) or 'none')} does not include it"
        if not takers:
            raise UsageError(f"{arg(setting, value)}: no method takes it; drop the option")
        raise UsageError(
            f"{arg(setting, value)}: only {' or '.join(takers)} takes it, and {where}; "
            f"add {takers[0]} to the methods or drop the option"
        )


def _check_topk(topk: int, cam: str, layer_methods) -> None:
    """``--topk`` draws the main (first layer-resolution) method's map of each top class."""
    if not layer_methods:
        raise UsageError(f"{arg('topk', topk)} needs a method that maps a layer; {arg('cam', cam)} has none")
    main = layer_methods[0]
    if not main.class_specific:
        raise UsageError(
            f"{arg('topk', topk)} with {arg('cam', cam)}: {main.name} makes the same map for every class (it uses "
            f"no target), so its top-{topk} maps would be one map {topk} times; drop {arg('topk')} or put a "
            "class-specific method first"
        )
