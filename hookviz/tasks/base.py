"""The interface every task meets: what a model's output means, and what to explain in it.

A *task* (classify today; segment and detect are shaped to fit) turns a model's output
into a ``Plan``: the objective whose gradients are recorded, the scalars whose gradients
make CAMs, and per image what was predicted and what each CAM explains. The forward and
backward pass (``hookviz.explaining``) is the same for every task; like pytorch-grad-cam's
target callables, a new task is a new module here, not a new pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["ClassScore", "ImagePrediction", "Plan", "Task", "TASKS", "register_task", "get_task"]


@dataclass(frozen=True)
class ClassScore:
    """One class of one image: its index, name, logit and probability."""

    index: int
    name: str | None
    logit: float
    probability: float

    def to_json(self) -> dict:
        """As JSON; a non-finite score (NaN weights) becomes null."""
        finite = lambda v: v if math.isfinite(v) else None  # noqa: E731
        return {"index": self.index, "name": self.name, "score": finite(self.logit), "probability": finite(self.probability)}

    @property
    def label(self) -> str:
        return f"{self.name or 'class'} ({self.index})"


@dataclass(frozen=True)
class ImagePrediction:
    """What the model predicted for one image, and what each CAM of it explains.

    Attributes:
        target: what the objective explains.
        top5: the best classes, best first.
        focus: per CAM key of the plan, what that CAM explains for this image (``None``:
            nothing, its CAM is left out).
        notes: what the report should say about the choice.
    """

    target: ClassScore
    top5: tuple[ClassScore, ...]
    focus: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()


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
        logits: the (N, classes) scores reports keep, as float32 numpy.
    """

    objective: "object"
    cams: list[tuple[str, "object"]]
    predictions: list[ImagePrediction]
    logits: "object"


class Task(Protocol):
    """Attributes:
        name: ``classify``.
    """

    name: str

    def model_input(self, tensors: Sequence, device: str):
        """The model's input for a batch of preprocessed image tensors."""

    def plan(self, output, options, categories: Sequence[str] | None, count: int) -> Plan:
        """Read the model's ``output`` for ``count`` images and say what to explain.

        Raises:
            UsageError (TargetError): the output or the target does not fit the task.
        """


TASKS: dict[str, Task] = {}


def register_task(task_class):
    TASKS[task_class.name] = task_class()
    return task_class


def get_task(name: str) -> Task:
    from . import classify  # noqa: F401  (registers itself)

    return TASKS[name]
