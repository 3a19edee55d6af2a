"""Tasks: what a model's output means and what to explain in it, one module per task
(see ``base`` for the interface)."""

from .base import TASKS, ClassScore, ImagePrediction, Plan, Task, get_task, register_task
from . import classify  # noqa: F401  (registers itself)

__all__ = ["TASKS", "ClassScore", "ImagePrediction", "Plan", "Task", "get_task", "register_task"]
