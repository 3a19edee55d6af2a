"""Tasks: what a model's output means and what to explain in it, one module per task
(``computation`` is the interface, ``base`` the records it makes): ``classify``, ``segment``,
``detect``, ``embed``; ``TASKS`` imports them on first use. How a task's prediction is shown
is its presentation, ``hookviz.render.presentation``'s part. Every list of tasks hookviz shows (the ``task`` choices,
their order, their words, the order in which a model's output is recognised, both by
``priority``) is read from ``TASKS``. Importing it is cheap: no task imports torch or numpy before it runs.
"""

from hookviz.options.base import answers
from hookviz.tasks.base import ClassScore, Detection, ImagePrediction, Plan
from hookviz.tasks.classify import ClassPrediction
from hookviz.tasks.computation import TASKS, Task, TaskBase, register_task
from hookviz.tasks.detect import DetectOptions, DetectPrediction
from hookviz.tasks.embed import EmbedOptions, EmbedPrediction
from hookviz.tasks.segment import ClassShare, SegmentPrediction

__all__ = [
    "TASKS",
    "ClassPrediction",
    "ClassScore",
    "ClassShare",
    "DEFAULT_TASK",
    "DetectOptions",
    "DetectPrediction",
    "Detection",
    "EmbedOptions",
    "EmbedPrediction",
    "ImagePrediction",
    "Plan",
    "SegmentPrediction",
    "Task",
    "TaskBase",
    "get_task",
    "recognise_task",
    "register_task",
    "task_names",
    "task_words",
]


def get_task(name: str) -> Task:
    return TASKS[name]


def _by_priority() -> list[Task]:
    return TASKS.values()  # by priority


@answers("tasks")
def task_names() -> list[str]:
    """Every task's name, in listing order: the lowest ``priority`` first (the most general,
    classification, to the most particular, detection)."""
    return [task.name for task in _by_priority()]


#: The task of a model that nothing says otherwise of: the one that claims every output.
DEFAULT_TASK = _by_priority()[0].name


def recognise_task(output) -> str:
    """The task whose output ``output`` looks like: each task is asked, the highest
    ``priority`` first (a detector's and a segmenter's outputs have their own shapes); the
    last claims anything."""
    return next((task.name for task in reversed(_by_priority()) if task.recognises(output)), DEFAULT_TASK)


def task_words(name: str) -> str:
    """What a task is, in a word (``classification``); an unknown name as it is."""
    task = TASKS.find(name)
    return task.words if task is not None else name
