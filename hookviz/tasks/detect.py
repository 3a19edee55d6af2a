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

``score_threshold``, ``max_detections`` and ``box_objective`` are the task's own options
(``DetectOptions``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from hookviz.errors import UsageError, arg
from hookviz.hooks import HookSet
from hookviz.modelstate import model_dtype
from hookviz.options import BOX_OBJECTIVES
from hookviz.options.declared import check_values, option
from hookviz.tasks.base import ClassScore, Detection, ImagePrediction, Plan, Window, targets_of_cam
from hookviz.tasks.computation import TaskBase, register_task
from hookviz.tasks.targets import parse_target

__all__ = [
    "Detect",
    "DetectOptions",
    "DetectPlan",
    "DetectPrediction",
    "DetectorOutput",
    "MATCH_IOU",
    "MAX_DETECTIONS",
    "box_objective",
]

#: A detection's objective is that of the output box that overlaps it most, if at least this much
#: (``score+iou``: more than this, as pytorch-grad-cam's ``iou_threshold``).
MATCH_IOU = 0.5
#: At most this many detections per image get a CAM of their own (``max_detections``).
MAX_DETECTIONS = 20
#: What report.json says each ``box_objective`` is.
_OBJECTIVE_TEXT = {
    "score": f"the matched box's score alone (the output box of the detection's label that overlaps it most, IoU at "
    f"least {MATCH_IOU}: the detection itself); one CAM per detection",
    "score+iou": "pytorch-grad-cam's FasterRCNNBoxScoreTarget: the IoU with the detection of the output box that "
    f"overlaps it most, plus that box's score (0 unless the IoU is above {MATCH_IOU} and the label the "
    "detection's); one CAM per detection",
}
_THRESHOLDS = ("score_thresh", "roi_heads.score_thresh")  # where torchvision's detectors keep theirs


@dataclass(frozen=True)
class DetectOptions:
    """Which of a detector's detections are explained, and what explains each (the detection
    task's own options).

    Attributes:
        score_threshold: detections with at least this score.
        max_detections: at most this many per image, best first.
        box_objective: what explains a detection: ``score`` (its matched box's score alone) or
            ``score+iou`` (pytorch-grad-cam's ``FasterRCNNBoxScoreTarget``: that box's IoU
            with the detection plus its score).
    """

    score_threshold: float = option(0.5, help="Detection: explain detections with at least this score.")
    max_detections: int = option(5, help="Detection: explain at most this many detections per image, best first.")
    box_objective: str = option(
        "score",
        help="Detection: score (the matched box's score alone) or score+iou (plus the box's IoU with the detection, "
        "as pytorch-grad-cam's FasterRCNNBoxScoreTarget).",
        choices=BOX_OBJECTIVES,
    )

    def __post_init__(self):
        threshold = self.score_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise UsageError(f"{arg('score_threshold', threshold)}: a score threshold is between 0 and 1")
        if (
            isinstance(self.max_detections, bool)
            or not isinstance(self.max_detections, int)
            or not 1 <= self.max_detections <= MAX_DETECTIONS
        ):
            raise UsageError(f"{arg('max_detections', self.max_detections)}: must be from 1 to {MAX_DETECTIONS}")
        if self.box_objective not in BOX_OBJECTIVES:
            raise UsageError(f"{arg('box_objective', self.box_objective)}: choose {' or '.join(BOX_OBJECTIVES)}")
        check_values(self)


@dataclass(frozen=True, kw_only=True)
class DetectPrediction(ImagePrediction):
    """A detector's prediction for one image (its ``top5`` is its best detections, as scores).

    Attributes:
        detections: the detections explained, best first.
        of_class: the class ``target`` named (its name, or its index without names), or ``None``
            for every class.
        score_threshold, max_detections: the ``DetectOptions`` that chose them.
        objective: what was back-propagated, in words.
    """

    detections: tuple[Detection, ...]
    of_class: str | int | None
    score_threshold: float
    max_detections: int
    objective: str

    def to_json(self) -> dict:
        return {
            "target": self.of_class,
            "score_threshold": self.score_threshold,
            "max_detections": self.max_detections,
            "detections": [d.to_json() for d in self.detections],
            "objective": self.objective,
            "window": [self.window.height, self.window.width] if self.window else None,
            "window_origin": [self.window.top, self.window.left] if self.window else None,
        }

    @property
    def found(self) -> str:
        """``3 detections of class person with score ≥ 0.5`` (``no detections ...`` when none)."""
        count = len(self.detections)
        of = f" of class {self.of_class}" if self.of_class is not None else ""
        number = "no" if not count else str(count)
        return f"{number} detection{'s' if count != 1 else ''}{of} with score ≥ {self.score_threshold}"


@dataclass
class DetectPlan(Plan):
    """A plan that keeps what explains its detections (``box_objective``), for ``Detect.scorer``."""

    box_objective: str = "score"


@dataclass
class DetectorOutput:
    """A detector's output, and where each photo lies in the padded batch it ran on.

    Attributes:
        detections: per image, the model's dict of ``boxes``, ``labels``, ``scores``.
        windows: per image, where the photo lies in the padded input (a ``Window``), or
            ``None`` when the model says nothing of its internal resizing.
        scores_are: what the detector's ``scores`` are, when it says (its ``scores_are``
            attribute: a YOLO's are its class scores at each box's anchor before NMS).
    """

    detections: list
    windows: list = field(default_factory=list)
    scores_are: str | None = None


def _called_with_a_list(module, images: list):
    """``module(images)``, as a detector takes photos: a list of tensors. A model that takes one
    tensor (a classifier's, a segmenter's) fails on the list itself (conv2d's TypeError got
    ``(list, ...)``, ``'list' object has no attribute ...``): refused in one line, not a failure
    of each photo with the model's words.

    Raises:
        UsageError: the model cannot take a list of photos.
    """
    try:
        return module(images)
    except (TypeError, AttributeError) as error:
        if "(list," not in str(error) and "'list' object" not in str(error):
            raise
        raise UsageError(
            f"{arg('task', 'detect')}: the model does not take a list of photos, as a detector does; "
            f"for a classifier or segmenter, pass {arg('task')} classify or segment, or leave it out"
        ) from None


def _is_detections(output) -> bool:
    return (
        isinstance(output, (list, tuple))
        and len(output) > 0
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
class Detect(TaskBase):
    name = "detect"
    probability = None  # a box's score, of a box that deleting pixels moves or removes
    class_targets = False
    target_words = "one of its detections"
    words = "detection"
    priority = 20  # its output is the most particular: tried first
    options_type = DetectOptions
    torchvision_module = "torchvision.models.detection"
    cams_as_panels = True

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

    def torchvision_preprocessing(self, transform, pretrained: bool):
        """The photo as it is, in [0, 1]: the model resizes and normalises it itself."""
        from hookviz.inputs.images import Preprocessing

        return Preprocessing(mode="original", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))

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

    def forward(self, module, inputs, device: str, options=None, task_options=None):
        detect_options = task_options or DetectOptions()
        images = [tensor.to(device=device, dtype=model_dtype(module)) for tensor in inputs.tensors()]
        sizes: dict = {}
        transform = getattr(module, "transform", None)
        with HookSet() as hooks, _score_thresholds(module, detect_options.score_threshold):
            if transform is not None:
                hooks.add(transform.register_forward_hook(lambda _m, _i, out: sizes.update(batch=out[0])))
            detections = _called_with_a_list(module, images)
        if not _is_detections(detections):
            raise UsageError(
                "the model's output is not a list of dicts with boxes, labels and scores; "
                f"for a classifier or segmenter, pass {arg('task')}"
            )
        return DetectorOutput(detections, _windows(sizes.get("batch"), len(images)), getattr(module, "scores_are", None))

    def plan(self, output, options, categories: Sequence[str] | None, count: int, task_options=None) -> Plan:
        import numpy as np
        import torch

        detect_options = task_options or DetectOptions()
        fixed = parse_target(options.target, categories)
        chosen = [_chosen(result, detect_options, fixed) for result in output.detections]
        scores = [
            [box_objective(result, result["boxes"][k], int(result["labels"][k]), detect_options.box_objective) for k in keep]
            for result, keep in zip(output.detections, chosen)
        ]
        most = max((len(s) for s in scores), default=0)
        objective = sum((s for image in scores for s in image), torch.zeros(()))
        cams: list[tuple[str, object]] = []
        if options.cam != "none" and most:
            if most == 1:
                cams = [("det1", None)]  # one detection per image: the objective is its score
            else:
                cams = [(f"det{j + 1}", sum(image[j] for image in scores if j < len(image))) for j in range(most)]
        said = _OBJECTIVE_TEXT[detect_options.box_objective] + (f"; {output.scores_are}" if output.scores_are else "")
        predictions = [
            _prediction(
                result, keep, output.windows[i] if output.windows else None, categories, detect_options, fixed, most, said
            )
            for i, (result, keep) in enumerate(zip(output.detections, chosen))
        ]
        logits = [np.asarray([float(s.detach()) for s in image], dtype=np.float32) for image in scores]
        return DetectPlan(objective, cams, predictions, logits, detect_options.box_objective)

    def scorer(self, plan: Plan, key: str, options):
        """The objective (``DetectOptions.box_objective``) of the detection the CAM ``key`` explains
        in each image, as the plan scores it (0 when no output box matches); boxes under ``score_threshold`` are not in the output, so they score 0
        (see ``Task.scorer``)."""
        explained = targets_of_cam(plan, key)
        objective = plan.box_objective  # type: ignore[attr-defined]  # Detect.plan makes a DetectPlan

        def score(output, images):
            import torch

            values = []
            for result, image in zip(output.detections, images.tolist()):
                detection = explained[image]
                if detection is None:
                    values.append(result["scores"].new_zeros(()))
                    continue
                box = torch.tensor(detection.box, dtype=result["boxes"].dtype, device=result["boxes"].device)
                values.append(box_objective(result, box, detection.index, objective))
            return torch.stack(values)

        return score

    def objective_name(self, options, task_options=None) -> str:
        return (task_options or DetectOptions()).box_objective

    def objective_words(self, options, task_options=None) -> str:
        plus_iou = (task_options or DetectOptions()).box_objective == "score+iou"
        return "the box's score and IoU" if plus_iou else "the box's score"


def _windows(batch, count: int) -> list[Window | None]:
    """Where each photo lies in the padded batch: torchvision's ``ImageList`` says each photo's
    size, and its ``offsets`` (top, left) where a detector does not put it top-left (a YOLO's
    ``PlacedImages``)."""
    if batch is None or not hasattr(batch, "image_sizes"):
        return [None] * count
    height, width = batch.tensors.shape[-2:]
    offsets = getattr(batch, "offsets", None) or [(0, 0)] * len(batch.image_sizes)
    return [Window(top / height, left / width, h / height, w / width) for (h, w), (top, left) in zip(batch.image_sizes, offsets)]


def _chosen(result, options: DetectOptions, fixed: int | None) -> list[int]:
    """The indices of the detections to explain: above the threshold, of the target class if
    one was named, best first, at most ``max_detections``."""
    scores = result["scores"].detach()
    order = [int(k) for k in scores.argsort(descending=True, stable=True)]
    keep = [
        k for k in order if float(scores[k]) >= options.score_threshold and (fixed is None or int(result["labels"][k]) == fixed)
    ]
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


def _none_found(what: str, threshold: float) -> str:
    """The note of an image without detections, with the way to see weaker ones (a model with
    random weights scores far below the default threshold)."""
    return f"no detections{what} with a score of at least {threshold}; lower {arg('score_threshold')} to explain weaker boxes"


def _prediction(
    result, keep: list[int], window, categories, options: DetectOptions, fixed, most: int, objective: str
) -> DetectPrediction:
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
    cam_targets = {f"det{j + 1}": (detections[j] if j < len(detections) else None) for j in range(max(most, 1))}
    what = "" if fixed is None else f" of class {names[fixed] if names and fixed < len(names) else fixed}"
    notes: tuple[str, ...] = () if detections else (_none_found(what, options.score_threshold),)
    if "anchors" in result and "strides" in result:  # a detector that says where each score was read (a YOLO)
        notes += tuple(
            f"detection {j + 1}: its score is read at anchor {int(result['anchors'][k])}, on the "
            f"stride-{int(result['strides'][k])} map"
            for j, k in enumerate(keep)
        )
    return DetectPrediction(
        target=scores[0] if scores else None,
        top5=scores[:5],
        cam_targets=cam_targets,
        notes=notes,
        window=window,
        detections=detections,
        of_class=None if fixed is None else (names[fixed] if names and fixed < len(names) else fixed),
        score_threshold=options.score_threshold,
        max_detections=options.max_detections,
        objective=objective,
    )
