"""What a task computes: what a model's output means, and what to explain in it.

A *task* (``classify``, ``segment``, ``detect``, ``embed``) runs the model on a batch and
turns its output into a ``Plan`` (``hookviz.tasks.base``): the objective whose gradients are
recorded, the scalars whose gradients make CAMs, and per image what was predicted and what
each CAM explains. The forward and backward pass (``hookviz.explaining.passes``) is the same
for every task; like pytorch-grad-cam's target callables (``ClassifierOutputTarget``,
``SemanticSegmentationTarget``, ``FasterRCNNBoxScoreTarget``), a new task is a new module
that registers itself, not a new pipeline. It also says what a target's *score* is on a new
input (``scorer``: such a callable), so that a method re-scoring altered inputs (Score-CAM's
masked photos) works for every task.

That is all a task is: how its prediction is drawn and told (titles, ``prediction.png``, the
progress line, the gallery's list) is its *presentation* (``hookviz.render.presentation``),
registered apart and found by the task's name; a task without one is shown as classes are.
A new classification variant writes ``name``, ``words``, ``plan`` and ``scorer``; ``TaskBase``
gives the rest, as a classifier's.

A task whose targets are classes among others may also say what a *contrast* score is
(``contrast``, with ``contrasts = True``): a target's score set against the classes the model
finds nearest to it (``Contrast``), whose gradient Finer-CAM maps. A task without comparison
classes (an embedding's, a detector's) leaves ``contrasts`` false, and such a method is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from hookviz.errors import UsageError
from hookviz.registry import Registry, built_in
from hookviz.tasks.base import ClassScore, Contrast, Plan, stacked

__all__ = ["Task", "TaskBase", "TASKS", "SHOWN_MEMBERS", "register_task"]


class Task(Protocol):
    """What to explain in a model's output. Members in four groups: the task's name and where
    it applies (``name`` .. ``torchvision_module``, ``recognises``, ``preprocessing``,
    ``torchvision_preprocessing``, ``default_root``, ``forward``); what to explain (``plan``,
    ``cams_as_panels``, ``scorer``, ``objective_name``, ``objective_words``); what else it can score
    (``probability`` and ``probability_scorer``, ``contrasts`` and ``contrast``,
    ``class_targets``, ``target_words``); and what it accepts (``options_type``, ``check``,
    ``check_output``, ``chosen_by``, ``bind``).

    Attributes:
        name: its ``task`` choice (``classify``, ``embed``, ``segment``, ``detect``, or a plug-in's).
        words: what it is, in a word for listings (``classification``).
        priority: which task a model's output is tried for first when the task is
            recognised (``task="auto"``): the highest first; the lowest claims the rest.
            Listings go the other way: the lowest (the most general task) first.
        options_type: the option group of its own (``DetectOptions``), or ``None``.
        torchvision_module: where torchvision keeps its models, or ``None``.
        cams_as_panels: the plan's CAMs are peers, none of them the main one (a detector's, one
            per detection): each image keeps them all as its panels (``Explanation.cams_as_panels``),
            instead of the main CAM and the top-K beside it. It decides what an explanation records
            (``LayerResult.topk_cams``: report.json's ``cam_topk``, tensors.npz's ``cam_1`` ...),
            before anything is drawn, so it is the task's, not its presentation's.
    """

    name: str
    words: str
    priority: int
    options_type: type | None
    torchvision_module: str | None
    cams_as_panels: bool

    #: What ``faithfulness`` (``hookviz.trust``) follows as pixels go, in words, or ``None``
    #: where the task's target has no probability (then it has no ``probability_scorer``).
    probability: str | None
    #: Whether a target given as a class index means the same on another model of the task:
    #: ``sanity`` re-explains each image's class on randomised copies of the model. A
    #: detector's target is one of its detections, which a randomised copy does not make.
    class_targets: bool
    #: what the task's target is, where it is not a class (``class_targets`` false): ``--sanity`` names it.
    target_words: str
    #: Whether the task has ``contrast``: its targets are classes among other classes (a classifier's).
    contrasts: bool

    def recognises(self, output) -> bool:
        """Whether a model's output (of a dry pass) is this task's kind (``task="auto"``)."""

    def preprocessing(self, base, inputs):
        """The model's ``images.Preprocessing`` with the caller's ``InputOptions``, as this task
        allows them. Raises UsageError for an option the task cannot honour."""

    def torchvision_preprocessing(self, transform, pretrained: bool):
        """The ``images.Preprocessing`` that a torchvision weights entry's ``transform`` means
        for this task's models, loaded with those weights or not (``pretrained``)."""

    def check(self, options) -> None:
        """Raise UsageError for ``TargetOptions`` this task cannot honour."""

    def chosen_by(self, task_options) -> bool:
        """Whether the caller's option group of this task (``task_options``) makes a model of no stated
        task (or the default task's) this task's: an embedding's ``target_image``."""

    def bind(self, task_options, model, prepare, device: str, options):
        """The task's own options made ready for ``model`` (a ``LoadedModel`` on ``device``):
        what they name computed once (an embedding task's reference embeddings); ``prepare``
        reads and preprocesses a photo as the explained ones are.

        Raises:
            UsageError: options the model cannot take.
        """

    def default_root(self, module) -> str | None:
        """Where the default layer is looked for (``backbone.body``), or ``None`` for anywhere."""

    def forward(self, module, inputs, device: str, options=None, task_options=None):
        """Run the model on a batch's ``inputs`` (a ``hookviz.samples.ModelInputs``: per input
        name, one tensor per row; ``inputs.stacked()`` is the main one as an (N, C, *spatial) batch)
        with the ``TargetOptions`` and the task's own options; return its output."""

    def plan(self, output, options, categories: Sequence[str] | None, count: int, task_options=None) -> Plan:
        """Read the model's ``output`` for ``count`` images and say what to explain.

        Raises:
            UsageError (TargetError): the output or the target does not fit the task.
        """

    def scorer(self, plan: Plan, key: str, options) -> Callable:
        """How the target of CAM ``key`` (what ``plan.predictions[i].cam_targets[key]`` is) scores on
        a new input: a callable ``scorer(output, images)`` that takes the model's output (as
        ``forward`` returns it) on a batch of M inputs and, for each row, the image of the plan
        it stands for (a (M,) long tensor), and returns (M,) scores: a classifier's class logit,
        a segmentation class's mean logit over the pixels first predicted as it, the score of a
        detector's box that matches the detection; 0 where the image has nothing to explain.
        On the plan's own inputs it gives the target's own score (``ClassScore.logit``,
        ``Detection.score``)."""

    def contrast(self, output, plan: Plan, key: str, options, spec: Contrast):
        """Only where ``contrasts``: the contrast score (``Contrast``) of the target of CAM ``key``
        in each image, summed over the images (0 for an image with nothing to explain), a scalar
        of the graph of ``output`` (the model's output, as ``forward`` returns it); ``None`` where
        the model has fewer than 2 classes, so nothing to compare its target with."""

    def probability_scorer(self, targets: Sequence[ClassScore | None], options, task_options=None) -> Callable:
        """``scorer(output, images)`` -> (M,): per row, the probability of the target of
        image ``images[row]`` (``targets``: per image, ``None`` scores 0), as
        ``ClassScore.probability`` reports it on the image itself. Called only where
        ``probability`` is not None (``--faithfulness`` is refused elsewhere)."""

    def check_output(self, output, options, categories: Sequence[str] | None) -> None:
        """Raise UsageError for ``TargetOptions`` that the model's raw ``output`` (of a dry
        pass) cannot honour: a class index past its classes, an ``output_key`` it lacks."""

    def objective_name(self, options, task_options=None) -> str:
        """What report.json calls the objective (``logit``, ``ce``, ``score``), from the
        ``TargetOptions`` and the task's own options."""

    def objective_words(self, options, task_options=None) -> str:
        """What is back-propagated, as the notes on a layer it does not reach name it:
        ``the target's logit``, ``the box's score``, ``the cosine similarity``."""


class TaskBase:
    """What a task that explains classes (a classifier's) computes, but its plan and scorer; a
    task overrides what differs."""

    priority = 0
    options_type: type | None = None
    torchvision_module: str | None = None
    cams_as_panels = False
    #: No probability that ``--faithfulness`` could follow, unless the task says which (and
    #: then has a ``probability_scorer``): a plug-in task is refused that option in one line.
    probability: str | None = None
    #: The target is the same on a randomised copy of the model, as a class is: ``--sanity`` runs.
    class_targets = True
    target_words = "its own target"
    #: No ``contrast`` score, unless the task defines one (a classifier's).
    contrasts = False

    def recognises(self, output) -> bool:
        """Chosen by ``--task`` (or its model's source) only: no output is recognised as its."""
        return False

    def preprocessing(self, base, inputs):
        """The model's preprocessing with every input option the caller gave."""
        return inputs.apply(base)

    def forward(self, module, inputs, device: str, options=None, task_options=None):
        """The model of one input (or of several, by position or keyword) on the batch."""
        return stacked(module, inputs, device)

    def default_root(self, module) -> str | None:
        return None

    def chosen_by(self, task_options) -> bool:
        return False

    def check(self, options) -> None:
        """Raise UsageError for ``TargetOptions`` this task cannot honour (a classifier takes them all)."""

    def check_output(self, output, options, categories: Sequence[str] | None) -> None:
        """Raise UsageError for ``TargetOptions`` that the model's raw ``output`` (of a dry pass)
        cannot honour: a class index past its classes, an ``output_key`` it lacks."""

    def bind(self, task_options, model, prepare, device: str, options):
        return task_options

    def objective_name(self, options, task_options=None) -> str:
        return options.objective

    def objective_words(self, options, task_options=None) -> str:
        return "the cross-entropy against the target" if options.objective == "ce" else "the target's logit"


#: Every task, by name; ``auto`` (read the task from the model's output) is no task's name.
TASKS: Registry[Task] = Registry(
    "task",
    "task",
    extra_choices=("auto",),
    order=lambda task: task.priority,
    modules=built_in("hookviz.tasks", "classify detect embed segment"),
)

#: What a presentation says (``hookviz.render.presentation.Presentation``), which a task does not:
#: a task class defining one of these is refused, rather than drawn without it.
SHOWN_MEMBERS = (
    "headline",
    "objective_text",
    "cam_panel",
    "panels_text",
    "prediction_panel",
    "draw_prediction",
    "prediction_lines",
    "status_line",
    "gallery_list",
)


def register_task(task_class):
    """Class decorator: adds an instance of ``task_class`` to ``TASKS`` under its name.

    Raises:
        UsageError: another task has that name, or it cannot be typed after ``--task``; an
            ``options_type`` that is not a frozen dataclass with defaults, or whose setting
            another owner's group (or the run's own options) names too; a member that says how
            the task is shown (``SHOWN_MEMBERS``), which its presentation says.
    """
    TASKS.check_free(task_class.name)
    shown = [name for name in SHOWN_MEMBERS if hasattr(task_class, name)]
    if shown:
        raise UsageError(
            f"task {task_class.name!r}: {', '.join(shown)} say how it is shown, which is its presentation's part; "
            f"move them to a class registered with hookviz.render.presentation.register_presentation({task_class.name!r})"
        )
    if getattr(task_class, "options_type", None) is not None:
        from hookviz.options.declared import check_group

        check_group(task_class.options_type, f"task {task_class.name!r}")
    TASKS.add(task_class.name, task_class())
    return task_class
