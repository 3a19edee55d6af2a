"""Tasks: what a model's output means and what to explain in it, one module per task
(see ``base`` for the interface): ``classify``, ``segment``, ``detect``."""

from .base import (TASKS, ClassScore, Detection, ImagePrediction, Plan, Task, get_task, recognise_task,
                   register_task, task_names)
from . import classify, detect, segment  # noqa: F401  (each registers itself)

__all__ = ["TASKS", "ClassScore", "Detection", "ImagePrediction", "Plan", "Task", "get_task", "recognise_task",
           "register_task", "task_names"]
