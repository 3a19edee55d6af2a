"""Detection: the model returns, per image, a dict of ``boxes``, ``labels`` and ``scores``
(torchvision's detectors in eval mode). It is handed the photo at its own size, in [0, 1]:
the detector resizes and normalises it itself.

Every detection with a score of at least ``score_threshold`` (at most ``max_detections``,
best first; only one class's with a target other than ``top1``) is explained on its own, and
gets its own CAM. Its objective (the ``box_objective`` option, computed by the function of that
name) is by default the matched box's score alone: the score of the output box of its label that overlaps it most
(IoU at least 0.5), which in the pass that found it is the detection itself. ``score+iou`` is
pytorch-grad-cam's ``FasterRCNNBoxScoreTarget``: that box's IoU with the detection plus its
score. In the pass that found the detection the IoU is 1 and adds no gradient (torch splits
the gradient of a min or max between equal inputs, so the overlap and the union move
together), so both give the same CAMs; they part where the boxes move (a re-scored input, or
a box given to the nearest pixel, as pytorch-grad-cam's tutorial passes them). The recorded
gradients are those of all the explained detections' objectives together. An image with no
detection above the threshold is done, with nothing to explain.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import UsageError, arg
from ..hooks import HookSet
from .base import ClassScore, Detection, ImagePrediction, Plan, focus_of, model_dtype, register_task
from .targets import parse_target

__all__ = ["Detect", "DetectorOutput", "MATCH_IOU", "box_objective"]

#: A detection's objective is that of the output box that overlaps it most, if at least this much
#: (``score+iou``: more than this, as pytorch-grad-cam's ``iou_threshold``).
MATCH_IOU = 0.5
#: What report.json says each ``box_objective`` is.
_OBJECTIVE_TEXT = {
    "score": f"the matched box's score alone (the output box of the detection's label that overlaps it most, IoU at "
             f"least {MATCH_IOU}: the detection itself); one CAM per detection",
    "score+iou": "pytorch-grad-cam's FasterRCNNBoxScoreTarget: the IoU with the detection of the output box that "
                 f"overlaps it most, plus that box's score (0 unless the IoU is above {MATCH_IOU} and the label the "
                 "detection's); one CAM per detection",
}
_THRESHOLDS = ("score_thresh", "roi_heads.score_thresh")  # where torchvision's detectors keep theirs


@dataclass
class DetectorOutput:
    """A detector's output, and where each photo lies in the padded batch it ran on.

    Attributes:
        detections: per image, the model's dict of ``boxes``, ``labels``, ``scores``.
        windows: per image, the fraction (height, width) of the padded input the photo covers,
            or ``None`` when the model says nothing of its internal resizing.
    """

    detections: list
    windows: list = field(default_factory=list)


def _is_detections(output) -> bool:
    return (
        isinstance(output, (list, tuple)) and len(output) > 0
        and all(isinstance(o, dict) and {"boxes", "labels", "scores"} <= set(o) for o in output)
    )


@contextlib.contextmanager
def _score_thresholds(module, threshold: float) -> Iterator[None]:
    """Let the detector keep boxes down to ``threshold`` (its own cut, 0.05 for Faster R-CNN,
    would hide lower ones), and restore its thresholds after."""
    saved = []
    for path in _THRESHOLDS:
        owner_path, _, name = path.rpartition(".")
        owner = getattr(module, owner_path, None) if owner_path else module  # RetinaNet, FCOS, SSD have no roi_heads
        if owner is not None and isinstance(getattr(owner, name, None), float):
            saved.append((owner, name, getattr(owner, name)))
    try:
        for owner, name, value in saved:
            setattr(owner, name, min(value, threshold))
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


@register_task
class Detect:
    name = "detect"
    probability = None  # a box's score, of a box that deleting pixels moves or removes
    class_targets = False

    def recognises(self, output) -> bool:
        return _is_detections(output)

    def preprocessing(self, base, inputs):
        given = [name for name in ("resize", "crop", "mean", "std") if getattr(inputs, name) is not None]
        given += ["whole_image"] if inputs.whole_image else []
        if given:
            raise UsageError(
                f"{arg(given[0])}: a detector resizes and normalises photos itself (hookviz hands it each "
                f"photo at its own size); drop {arg(given[0])}"
            )
        return replace(base, mode="original", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))

    def check(self, options) -> None:
        if options.objective != "logit":
            raise UsageError(
                f"{arg('objective', options.objective)}: a detection is explained by its score; drop {arg('objective')}"
            )
        if options.topk > 1:
            raise UsageError(
                f"{arg('topk', options.topk)}: a detector gets one CAM per detection; use {arg('max_detections')} instead"
            )

    def default_root(self, module) -> str | None:
        for root in ("backbone.body", "backbone"):
            with contextlib.suppress(AttributeError):
                module.get_submodule(root)
                return root
        return None

    def forward(self, module, tensors: Sequence, device: str, options=None):
        images = [tensor.to(device=device, dtype=model_dtype(module)) for tensor in tensors]
        sizes: dict = {}
        transform = getattr(module, "transform", None)
        with HookSet() as hooks, _score_thresholds(module, options.score_threshold if options else 0.5):
            if transform is not None:
                hooks.add(transform.register_forward_hook(lambda _m, _i, out: sizes.update(batch=out[0])))
            detections = module(images)
        if not _is_detections(detections):
            raise UsageError(
                "the model's output is not a list of dicts with boxes, labels and scores; "
                f"for a classifier or segmenter, pass {arg('task')}"
            )
        return DetectorOutput(detections, _windows(sizes.get("batch"), len(images)))

    def plan(self, output, options, categories: Sequence[str] | None, count: int) -> Plan:
        import torch

        fixed = parse_target(options.target, categories)
        chosen = [_chosen(result, options, fixed) for result in output.detections]
        scores = [[box_objective(result, result["boxes"][k], int(result["labels"][k]), options.box_objective)
                   for k in keep] for result, keep in zip(output.detections, chosen)]
        most = max((len(s) for s in scores), default=0)
        objective = sum((s for image in scores for s in image), torch.zeros(()))
        cams: list[tuple[str, object]] = []
        if options.cam != "none" and most:
            if most == 1:
                cams = [("det1", None)]  # one detection per image: the objective is its score
            else:
                cams = [(f"det{j + 1}", sum(image[j] for image in scores if j < len(image))) for j in range(most)]
        predictions = [
            _prediction(result, keep, output.windows[i] if output.windows else None, categories, options, fixed, most)
            for i, (result, keep) in enumerate(zip(output.detections, chosen))
        ]
        logits = [np.asarray([float(s.detach()) for s in image], dtype=np.float32) for image in scores]
        return Plan(objective, cams, predictions, logits)

    def scorer(self, plan: Plan, key: str, options):
        """The objective (``options.box_objective``) of the detection the CAM ``key`` explains
        in each image, as the plan scores it (0 when no output box matches); boxes under ``score_threshold`` are not in the output, so they score 0
        (see ``Task.scorer``)."""
        focus = focus_of(plan, key)

        def score(output, images):
            import torch

            values = []
            for result, image in zip(output.detections, images.tolist()):
                detection = focus[image]
                if detection is None:
                    values.append(result["scores"].new_zeros(()))
                    continue
                box = torch.tensor(detection.box, dtype=result["boxes"].dtype, device=result["boxes"].device)
                values.append(box_objective(result, box, detection.index, options.box_objective))
            return torch.stack(values)

        return score


def _windows(batch, count: int) -> list:
    """Where each photo lies in the padded batch (torchvision's ``ImageList``)."""
    if batch is None or not hasattr(batch, "image_sizes"):
        return [None] * count
    height, width = batch.tensors.shape[-2:]
    return [(h / height, w / width) for h, w in batch.image_sizes]


def _chosen(result, options, fixed: int | None) -> list[int]:
    """The indices of the detections to explain: above the threshold, of the target class if
    one was named, best first, at most ``max_detections``."""
    scores = result["scores"].detach()
    order = [int(k) for k in scores.argsort(descending=True, stable=True)]
    keep = [k for k in order if float(scores[k]) >= options.score_threshold
            and (fixed is None or int(result["labels"][k]) == fixed)]
    return keep[: options.max_detections]


def box_objective(result, box, label: int, objective: str = "score"):
    """The scalar that explains one detection (``box``, ``label``) in a detector's output.

    Args:
        result: one image's output, a dict of ``boxes``, ``labels`` and ``scores``.
        box: the detection's box (x0, y0, x1, y1), a tensor; its own gradient is not followed.
        label: the detection's class.
        objective: ``score``: the score of the output box of ``label`` that overlaps ``box``
            most, if by at least ``MATCH_IOU``. ``score+iou``: pytorch-grad-cam's
            ``FasterRCNNBoxScoreTarget``: of all output boxes, the one that overlaps ``box``
            most; its IoU plus its score if the IoU is above ``MATCH_IOU`` and its label is
            ``label``.

    Returns:
        A scalar tensor in the output's graph (0 when nothing matches).
    """
    from torchvision.ops import box_iou

    boxes, labels, scores = result["boxes"], result["labels"], result["scores"]
    box = box.detach().to(boxes.dtype)[None]
    if objective == "score+iou":
        overlaps = box_iou(box, boxes)[0]  # the output boxes keep their gradient: the IoU is explained too
        best = int(overlaps.argmax()) if len(boxes) else None
        if best is None or not (float(overlaps[best].detach()) > MATCH_IOU and int(labels[best]) == label):
            return scores.sum() * 0
        return overlaps[best] + scores[best]
    same = (labels == label).nonzero().flatten()
    if not len(same):
        return scores.sum() * 0
    overlaps = box_iou(box, boxes.detach()[same])[0]
    best = int(overlaps.argmax())
    return scores[same[best]] if float(overlaps[best]) >= MATCH_IOU else scores[same[best]] * 0


def _prediction(result, keep: list[int], window, categories, options, fixed, most: int) -> ImagePrediction:
    names = list(categories) if categories is not None else None
    detections = tuple(
        Detection(
            box=tuple(float(v) for v in result["boxes"][k].detach().cpu()),
            index=int(result["labels"][k]),
            name=names[int(result["labels"][k])] if names and int(result["labels"][k]) < len(names) else None,
            score=float(result["scores"][k].detach()),
        )
        for k in keep
    )
    scores = tuple(ClassScore(d.index, d.name, d.score, d.score) for d in detections)
    focus = {f"det{j + 1}": (detections[j] if j < len(detections) else None) for j in range(max(most, 1))}
    what = "" if fixed is None else f" of class {names[fixed] if names and fixed < len(names) else fixed}"
    notes = () if detections else (f"no detections{what} with a score of at least {options.score_threshold}",)
    details = {
        "target": None if fixed is None else (names[fixed] if names and fixed < len(names) else fixed),
        "score_threshold": options.score_threshold,
        "max_detections": options.max_detections,
        "detections": [d.to_json() for d in detections],
        "objective": _OBJECTIVE_TEXT[options.box_objective],
        "window": list(window) if window else None,
    }
    return ImagePrediction(scores[0] if scores else None, scores[:5], focus, notes, detections=detections, details=details)
