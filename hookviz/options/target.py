"""What to explain (``TargetOptions``): the target, the objective, the CAM methods (with their
own settings), the top-K."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.options.base import ask, set_field

__all__ = ["MAX_TOPK", "OBJECTIVES", "BOX_OBJECTIVES", "TargetOptions"]

#: At most this many classes get a CAM of their own (``--topk``): each is a panel of one picture.
MAX_TOPK = 20
#: ``logprob``: a vision-language model's token's log-probability (other tasks refuse it).
OBJECTIVES = ("logit", "ce", "logprob")
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
        target = str(self.target).strip()
        if re.fullmatch(r"-\d+", target):
            raise UsageError(f"{arg('target', target)}: a class index must be 0 or more")
        if not target:
            raise UsageError(f"{arg('target', self.target)}: give top1, a class index or a class name")
        set_field(self, "target", target)
        if self.objective not in OBJECTIVES:
            raise UsageError(f"{arg('objective', self.objective)}: choose {' or '.join(OBJECTIVES)}")
        set_field(self, "cam", ",".join(_method_names(self.cam)))
        methods = ask("methods", self.methods)
        if not isinstance(self.topk, int) or not 1 <= self.topk <= MAX_TOPK:
            raise UsageError(f"{arg('topk', self.topk)}: must be from 1 to {MAX_TOPK} (one panel per class)")
        set_field(self, "settings", ask("method_settings", self.methods, methods, self.topk, self.settings))
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
            (",".join(ask("owners", type(g), self.methods)) or "smooth"): {
                s.name: getattr(g, s.name) for s in settings_of(type(g))
            }
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
