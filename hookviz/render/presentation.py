"""How a task's prediction is shown and told: the words of the pictures' titles and CAM
panels, its ``prediction.png``, what a notebook lists, the line ``hookviz run`` prints per
image and what index.html lists beside a photo.

A task (``hookviz.tasks.computation``) says what to explain; its presentation, registered
under the task's name, says how the result reads. A task without one is shown as classes are
(``ClassPresentation``: the target, its probability and the top-5), so a task that only
changes what is explained (a multi-label classifier, a classification variant) writes no
presentation. Every member has a default in ``ClassPresentation``; a presentation overrides
what differs. Pictures, the progress display, the gallery and the notebook ask for it by the
task's name (``presentation_of``) and read nothing else of the task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hookviz.registry import Registry, built_in
from hookviz.tasks.base import shown_name

__all__ = [
    "CLASSES",
    "ClassPresentation",
    "PRESENTATIONS",
    "Presentation",
    "PredictionPanel",
    "class_colour",
    "presentation_of",
    "probability_text",
    "register_presentation",
]


@dataclass(frozen=True)
class PredictionPanel:
    """How a task's ``prediction.png`` is laid out: its heading, and the room its legend
    takes to the right of the photo (inches)."""

    heading: str
    legend: float = 0.0


class Presentation(Protocol):
    """How one task's explanations read. ``explanation`` is a ``hookviz.explaining.passes.Explanation``
    (its ``prediction`` is the task's ``ImagePrediction``); ``status`` a ``store.run_records.ImageStatus``;
    ``report`` a ``store.records.Report`` read back from report.json."""

    def headline(self, explanation) -> str:
        """What the pictures' titles say of the target: ``target tabby (281), p=0.874``."""

    def objective_text(self, explanation) -> str:
        """What the summary's gradient panels are the gradients of, in words."""

    def cam_panel(self, explanation, target) -> tuple[str, tuple | None]:
        """The title of the CAM panel of ``target`` (a value of the prediction's ``cam_targets``), and
        the box drawn over it (``None``: none)."""

    def panels_text(self, count: int) -> str:
        """What ``count`` CAM panels show: ``the top 3 classes``."""

    def prediction_panel(self, explanation) -> PredictionPanel | None:
        """How ``prediction.png`` is laid out, or ``None``: the task draws none."""

    def draw_prediction(self, ax, explanation) -> None:
        """Draw what the model predicted over the photo already shown in ``ax``."""

    def prediction_lines(self, explanation) -> list[str]:
        """What the model predicted, in lines of text (a notebook shows them): ``top-5: ...``."""

    def status_line(self, status) -> str:
        """The line ``hookviz run`` prints for an image done."""

    def gallery_list(self, report) -> tuple[str, list[str]]:
        """What index.html lists beside an image's photo, from its report.json (its
        ``prediction`` is the JSON the task wrote): a heading and the items (plain text)."""


def class_colour(index: int):
    """The colour of a class in a task's masks and boxes (tab20, by index)."""
    import matplotlib

    return matplotlib.colormaps["tab20"](index % 20)


def probability_text(value) -> str:
    """A probability as the progress lines print it (``nan`` for a non-finite one)."""
    return "nan" if value is None else format(value, ".3f")


class ClassPresentation:
    """How a task that explains classes (a classifier's) is shown: the target with its
    probability, the top-5, no ``prediction.png``. A presentation overrides what differs."""

    #: How a target's probability is measured, as the titles say it.
    measure = "p"

    def headline(self, explanation) -> str:
        target = explanation.target
        if target is None:
            return "no target"
        return f"target {target.label}, {self.measure}={target.probability:.3f}"

    def objective_text(self, explanation) -> str:
        return f"objective {explanation.objective}"

    def cam_panel(self, explanation, target) -> tuple[str, tuple | None]:
        return f"{target.label}\np={target.probability:.3f}", None

    def panels_text(self, count: int) -> str:
        return f"the top {count} class{'es' if count != 1 else ''}"

    def prediction_panel(self, explanation) -> PredictionPanel | None:
        return None  # the top-5 is in every title and in the gallery

    def draw_prediction(self, ax, explanation) -> None:
        pass

    def prediction_lines(self, explanation) -> list[str]:
        if not explanation.top5:
            return []
        return ["top-5: " + " · ".join(f"{c.label} {c.probability:.3f}" for c in explanation.top5)]

    def status_line(self, status) -> str:
        if status.target is None:
            return f"{status.image}: nothing to explain (see its report.json)"
        top = " · ".join(f"{shown_name(s['name']) or s['index']} {probability_text(s['probability'])}" for s in status.top5)
        target = shown_name(status.target.get("name")) or status.target.get("index")
        return f"{status.image}: target {target}; top-5: {top}"

    def gallery_list(self, report) -> tuple[str, list[str]]:
        heading = f"target: {report.target.label}" if report.target is not None else ""
        items = [f"{score.label} ({probability_text(score.probability)})" for score in report.top5]
        return heading, items


#: The presentation of every task that registers none (``classify``'s, a plug-in's).
CLASSES = ClassPresentation()

#: Each task's presentation, by the task's name; a task missing here is shown as classes are.
PRESENTATIONS: Registry[Presentation] = Registry(
    "task", "task's presentation", modules=built_in("hookviz.render.presentations", "segment detect embed")
)


def register_presentation(task: str):
    """Class decorator: shows the task named ``task`` as an instance of the class says.

    Raises:
        UsageError: that task has a presentation already.
    """

    def wrap(presentation_class):
        PRESENTATIONS.add(task, presentation_class())
        return presentation_class

    return wrap


def presentation_of(task: str | None) -> Presentation:
    """How the task named ``task`` is shown: its registered presentation, else as classes are
    (a report of another hookviz's task, or of none, too)."""
    return (PRESENTATIONS.find(task) if task is not None else None) or CLASSES
