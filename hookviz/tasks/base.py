"""What passes between a task and the rest of hookviz: the records a task makes and reads.

A *task* (``classify``, ``segment``, ``detect``, ``embed``: ``hookviz.tasks.computation``)
runs the model on a batch and turns its output into a ``Plan``: the objective whose gradients
are recorded, the scalars whose gradients make CAMs, and per image what was predicted
(``ImagePrediction``) and what each CAM explains (a ``ClassScore`` or a ``Detection``). A
method that re-scores altered inputs finds the task's ``scorer`` wrapped in a ``Rescoring``;
a contrast score is set up by a ``Contrast``. How a prediction is shown and told is no part
of this: that is the task's presentation (``hookviz.render.presentation``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from hookviz.modelstate import model_dtype
from hookviz.workload import passed

__all__ = [
    "CONTRAST_WEIGHTINGS",
    "ClassScore",
    "Contrast",
    "Detection",
    "ImagePrediction",
    "Plan",
    "Rescoring",
    "Window",
    "targets_of_cam",
    "shown_name",
    "stacked",
]


def _finite(value: float):
    return value if math.isfinite(value) else None


SHOWN_NAME = 48


def shown_name(name: str | None) -> str | None:
    """A class's name as pictures and progress lines show it: a long text prompt (300 words)
    cut to its start, which otherwise wraps over a picture's panels; JSON keeps it whole."""
    return name if name is None or len(name) <= SHOWN_NAME else name[: SHOWN_NAME - 1].rstrip() + "…"


@dataclass(frozen=True)
class ClassScore:
    """One class of one image: its index, name, logit and probability (a segmentation's:
    the means over the class's pixels, and ``fraction``, the share of pixels it is predicted on)."""

    index: int
    name: str | None
    logit: float
    probability: float
    fraction: float | None = None

    def to_json(self) -> dict:
        """As JSON; a non-finite score (NaN weights) becomes null."""
        found = {"index": self.index, "name": self.name, "score": _finite(self.logit), "probability": _finite(self.probability)}
        return found if self.fraction is None else {**found, "fraction": round(self.fraction, 6)}

    @property
    def label(self) -> str:
        return f"{shown_name(self.name) or 'class'} ({self.index})"


#: How a contrast score weights its comparison classes (``Contrast.weighting``).
CONTRAST_WEIGHTINGS = ("softmax", "mean")


@dataclass(frozen=True)
class Contrast:
    """What a contrast score (``Task.contrast``) sets a target against, per image:

        softmax: sum_k p_k (y_t - alpha y_k) / sum_k p_k  (= y_t - alpha sum_k p_k y_k / sum_k p_k)
        mean:    y_t - alpha mean_k y_k

    over the ``comparisons`` classes k whose logits y_k are nearest the target's y_t (the
    target left out; fewer where the model has fewer), p_k their softmax probabilities, through
    which the gradient flows too (pytorch-grad-cam's ``FinerWeightedTarget``); ``mean`` is
    torch-cam's ``FinerCAM`` objective (its ``gamma`` is ``alpha``).
    """

    comparisons: int = 3
    alpha: float = 1.0
    weighting: str = "softmax"


@dataclass(frozen=True)
class Detection:
    """One detected object: its box in the photo's pixels (x0, y0, x1, y1), class and score."""

    box: tuple[float, float, float, float]
    index: int
    name: str | None
    score: float

    def to_json(self) -> dict:
        return {"box": [round(v, 2) for v in self.box], "index": self.index, "name": self.name, "score": _finite(self.score)}

    @property
    def label(self) -> str:
        return f"{self.name or 'class'} ({self.index}) {self.score:.2f}"


@dataclass(frozen=True)
class Window:
    """Where a photo lies in the model's input (a detector's padded batch), as fractions of
    the input's height and width: its top and left edges, its height and width. torchvision's
    detectors put the photo top-left (``top = left = 0``); a YOLO centres it in its padding.
    """

    top: float
    left: float
    height: float
    width: float


@dataclass(frozen=True)
class ImagePrediction:
    """What the model predicted for one image, and what each CAM of it explains. Each task
    has its own kind (``ClassPrediction``, ``SegmentPrediction``, ``DetectPrediction``),
    whose ``to_json`` is the ``prediction`` of report.json.

    Attributes:
        target: what the main CAM explains (``None``: nothing to explain, such as an image
            with no detection above the threshold).
        top5: the best classes (or detections), best first, as class scores.
        cam_targets: per CAM key of the plan, what that CAM explains for this image: a
            ``ClassScore`` or a ``Detection`` (``None``: nothing, its CAM is left out).
        notes: what the report should say about the choice.
        window: where the photo lies in the model's input, when the model padded it (a
            detector's batch); ``None``: it is all of it.
    """

    target: ClassScore | None
    top5: tuple[ClassScore, ...]
    cam_targets: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    window: Window | None = None

    def to_json(self) -> dict:
        return {}


@dataclass
class Plan:
    """What one forward pass is asked to explain.

    Attributes:
        objective: the scalar back-propagated; the recorded ``grad_input`` and ``grad_output``
            are its gradients.
        cams: ``(key, scalar)`` pairs, one CAM per image each; a scalar of ``None`` means
            ``objective`` itself (no second backward pass). The first key is the image's
            main CAM.
        predictions: one per image.
        logits: per image, the scores reports keep (float32 numpy, one row per image).
    """

    objective: "object"
    cams: list[tuple[str, "object"]]
    predictions: list[ImagePrediction]
    logits: "object"


def stacked(module, inputs, device: str):
    """The output of a model of one input for a batch's ``inputs`` (``hookviz.samples.ModelInputs``)
    of same-sized rows, stacked into one tensor (each input of a sample of several, by position or keyword)."""
    if getattr(inputs, "positional", None) is None:
        return module(inputs.stacked(device=device, dtype=model_dtype(module)))
    args, keywords = inputs.arguments(device, model_dtype(module))
    return module(*args, **keywords)


def targets_of_cam(plan: Plan, key: str) -> list:
    """Per image of the plan, what CAM ``key`` explains (``None``: nothing)."""
    return [prediction.cam_targets.get(key) for prediction in plan.predictions]


@dataclass(frozen=True)
class Rescoring:
    """``score(batch, images=None)``: the model run on new main inputs (M, C, *spatial) under
    ``torch.inference_mode``, ``chunk`` rows a pass (within the memory budget, ``hookviz.budget``),
    each row scored by ``scorer`` for the image ``images[row]`` stands for (default: row ``i`` is
    image ``i``). Returns (M,) float32. Each pass feeds the work it is part of (``hookviz.workload``).

    The rows replace the main input of the samples they stand for; a sample's other inputs
    go with them (``samples.SampleBatch``, which runs the task's forward with its options).
    It runs the bare model (no hookviz hook is on it while it does) in the mode the pass put
    it in; like every forward of the pass, it changes nothing in the model. ``formats``
    (``hookviz.input_format.InputFormats``), when given, picks the input's memory format.
    """

    samples: object
    scorer: Callable
    chunk: int
    formats: object = None

    def __call__(self, batch, images=None):
        import torch

        rows = torch.arange(len(batch)) if images is None else torch.as_tensor(images, dtype=torch.long).flatten()
        if len(rows) != len(batch):
            raise ValueError(f"score: {len(batch)} inputs but {len(rows)} image indices")
        scores = []
        for start in range(0, len(batch), self.chunk):
            scores.append(self.scored(batch[start : start + self.chunk], rows[start : start + self.chunk]))
            passed(len(scores[-1]))
        return torch.cat(scores) if scores else torch.zeros(0)

    def scored(self, part, rows):
        """One pass over ``part``; the output's row ``i`` scored for image ``rows[i]``. The
        output may have more rows than ``part`` (a layer's output replaced by more rows)."""
        import torch

        def run():
            with torch.inference_mode():
                return self.scorer(self.samples.forward(rows, part), rows).detach().float()

        if self.formats is None:
            return run()
        return self.formats.run(self.samples.module, tuple(part.shape), run)
