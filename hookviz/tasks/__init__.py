"""Tasks: what a model's output means and what to explain in it, one module per task
(see ``base`` for the interface): ``classify``, ``segment``, ``detect``. Importing this
package registers each of them."""

from . import classify, detect, segment  # noqa: F401  (each registers itself)
from .base import TASKS, ClassScore, Detection, ImagePrediction, Plan, Task, register_task

__all__ = ["TASKS", "ClassScore", "Detection", "ImagePrediction", "Plan", "Task", "get_task", "recognise_task",
           "register_task", "task_names"]


def get_task(name: str) -> Task:
    return TASKS[name]


def task_names() -> list[str]:
    return list(TASKS)


def recognise_task(output) -> str:
    """The task whose output ``output`` looks like: detection and segmentation outputs have
    their own shapes; anything else is taken for a classifier's."""
    for name in ("detect", "segment"):
        if TASKS[name].recognises(output):
            return name
    return "classify"
