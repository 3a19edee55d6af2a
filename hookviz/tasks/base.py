"""The interface every task meets: what a model's output means, and what to explain in it.

A *task* (``classify``, ``segment``, ``detect``) runs the model on a batch and turns its
output into a ``Plan``: the objective whose gradients are recorded, the scalars whose
gradients make CAMs, and per image what was predicted and what each CAM explains. The
forward and backward pass (``hookviz.explaining``) is the same for every task; like
pytorch-grad-cam's target callables (``ClassifierOutputTarget``,
``SemanticSegmentationTarget``, ``FasterRCNNBoxScoreTarget``), a new task is a new module
here that registers itself, not a new pipeline.

A task also says what a target's *score* is on a new input (``scorer``), so that a CAM
method that re-scores altered inputs (Score-CAM's masked photos) works for every task; the
pass wraps it in a ``Rescoring``, the ``score`` a method finds in its ``MethodContext``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

__all__ = [
    "ClassScore", "Detection", "ImagePrediction", "Plan", "Rescoring", "Task", "TASKS", "focus_of", "register_task",
    "model_dtype", "stacked",
]


def _finite(value: float):
    return value if math.isfinite(value) else None


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
        return f"{self.name or 'class'} ({self.index})"


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
class ImagePrediction:
    """What the model predicted for one image, and what each CAM of it explains.

    Attributes:
        target: what the main CAM explains (``None``: nothing to explain, such as an image
            with no detection above the threshold).
        top5: the best classes (or detections), best first, as class scores.
        focus: per CAM key of the plan, what that CAM explains for this image: a
            ``ClassScore`` or a ``Detection`` (``None``: nothing, its CAM is left out).
        notes: what the report should say about the choice.
        mask: a segmentation's predicted class per pixel of the model's input.
        detections: a detector's detections above the threshold, best first.
        details: the task's part of report.json (class fractions, detections, objective).
    """

    target: ClassScore | None
    top5: tuple[ClassScore, ...]
    focus: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    mask: np.ndarray | None = field(default=None, repr=False)
    detections: tuple[Detection, ...] = ()
    details: dict = field(default_factory=dict)


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


class Task(Protocol):
    """Attributes:
        name: ``classify``, ``segment`` or ``detect``.
        objective_text: what the objective is, in words, for reports.
    """

    name: str

    def recognises(self, output) -> bool:
        """Whether a model's output (of a dry pass) is this task's kind (``task="auto"``)."""

    def preprocessing(self, base, inputs):
        """The model's ``images.Preprocessing`` with the caller's ``InputOptions``, as this task
        allows them. Raises UsageError for an option the task cannot honour."""

    def check(self, options) -> None:
        """Raise UsageError for ``TargetOptions`` this task cannot honour."""

    def default_root(self, module) -> str | None:
        """Where the default layer is looked for (``backbone.body``), or ``None`` for anywhere."""

    def forward(self, module, tensors: Sequence, device: str, options=None):
        """Run the model on a batch of prepared image tensors (all of one size) with the
        ``TargetOptions``; return its output."""

    def plan(self, output, options, categories: Sequence[str] | None, count: int) -> Plan:
        """Read the model's ``output`` for ``count`` images and say what to explain.

        Raises:
            UsageError (TargetError): the output or the target does not fit the task.
        """

    def scorer(self, plan: Plan, key: str, options) -> Callable:
        """How the target of CAM ``key`` (what ``plan.predictions[i].focus[key]`` is) scores on
        a new input: a callable ``scorer(output, images)`` that takes the model's output (as
        ``forward`` returns it) on a batch of M inputs and, for each row, the image of the plan
        it stands for (a (M,) long tensor), and returns (M,) scores: a classifier's class logit,
        a segmentation class's mean logit over the pixels first predicted as it, the score of a
        detector's box that matches the detection; 0 where the image has nothing to explain.
        On the plan's own inputs it gives the focus's own score (``ClassScore.logit``,
        ``Detection.score``)."""


def model_dtype(module):
    """The floating dtype of the model's parameters (float32 unless it was cast), so that
    photos go in as the model computes: a float64 model gets float64 input."""
    import torch

    return next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)


def stacked(module, tensors: Sequence, device: str):
    """The model's output for a batch of same-sized images, stacked into one tensor."""
    import torch

    return module(torch.stack(list(tensors)).to(device=device, dtype=model_dtype(module)))


def focus_of(plan: Plan, key: str) -> list:
    """Per image of the plan, what CAM ``key`` explains (``None``: nothing)."""
    return [prediction.focus.get(key) for prediction in plan.predictions]


@dataclass(frozen=True)
class Rescoring:
    """``score(batch, images=None)``: the model run on new inputs (M, C, H, W) under
    ``torch.inference_mode``, ``chunk`` rows a pass, each row scored by ``scorer`` for the image
    ``images[row]`` stands for (default: row ``i`` is image ``i``). Returns (M,) float32.

    It runs the bare model (no hookviz hook is on it while it does) in the mode the pass put
    it in; like every forward of the pass, it changes nothing in the model."""

    task: Task
    module: object
    device: str
    options: object
    scorer: Callable
    chunk: int

    def __call__(self, batch, images=None):
        import torch

        rows = torch.arange(len(batch)) if images is None else torch.as_tensor(images, dtype=torch.long).flatten()
        if len(rows) != len(batch):
            raise ValueError(f"score: {len(batch)} inputs but {len(rows)} image indices")
        scores = []
        with torch.inference_mode():
            for start in range(0, len(batch), self.chunk):
                part = batch[start : start + self.chunk]
                output = self.task.forward(self.module, list(part), self.device, self.options)
                scores.append(self.scorer(output, rows[start : start + self.chunk]).detach().float())
        return torch.cat(scores) if scores else torch.zeros(0)


TASKS: dict[str, Task] = {}


def register_task(task_class):
    TASKS[task_class.name] = task_class()
    return task_class
