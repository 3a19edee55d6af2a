"""The interface every task meets: what a model's output means, and what to explain in it.

A *task* (``classify``, ``segment``, ``detect``) runs the model on a batch and turns its
output into a ``Plan``: the objective whose gradients are recorded, the scalars whose
gradients make CAMs, and per image what was predicted and what each CAM explains. The
forward and backward pass (``hookviz.explaining.passes``) is the same for every task; like
pytorch-grad-cam's target callables (``ClassifierOutputTarget``,
``SemanticSegmentationTarget``, ``FasterRCNNBoxScoreTarget``), a new task is a new module
here that registers itself, not a new pipeline.

A task also says what a target's *score* is on a new input (``scorer``), so that a CAM
method that re-scores altered inputs (Score-CAM's masked photos) works for every task; the
pass wraps it in a ``Rescoring``, the ``score`` a method finds in its ``MethodContext``.

A task also says what the rest of hookviz shows of it, so nothing outside this package
asks which task it is: the words of the pictures' titles (``headline``,
``objective_text``), its CAM panels, its ``prediction.png`` (``draw_prediction``), what
index.html lists beside a photo, the line ``hookviz run`` prints per image, and its own
option group (``DetectOptions``). ``TaskBase`` says it for tasks that explain classes.

A task whose targets are classes among others may also say what a *contrast* score is
(``contrast``, with ``contrasts = True``): a target's score set against the classes the model
finds nearest to it (``Contrast``), whose gradient Finer-CAM maps. A task without comparison
classes (an embedding's, a detector's) leaves ``contrasts`` false, and such a method is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hookviz.modelstate import model_dtype
from hookviz.registry import Registry, built_in
from hookviz.workload import passed

__all__ = [
    "CONTRAST_WEIGHTINGS",
    "ClassScore",
    "Contrast",
    "Detection",
    "ImagePrediction",
    "Plan",
    "PredictionPanel",
    "Rescoring",
    "Task",
    "TaskBase",
    "TASKS",
    "Window",
    "focus_of",
    "probability_text",
    "class_colour",
    "shown_name",
    "register_task",
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
        focus: per CAM key of the plan, what that CAM explains for this image: a
            ``ClassScore`` or a ``Detection`` (``None``: nothing, its CAM is left out).
        notes: what the report should say about the choice.
        window: where the photo lies in the model's input, when the model padded it (a
            detector's batch); ``None``: it is all of it.
    """

    target: ClassScore | None
    top5: tuple[ClassScore, ...]
    focus: dict = field(default_factory=dict)
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


@dataclass(frozen=True)
class PredictionPanel:
    """How a task's ``prediction.png`` is laid out: its heading, and the room its legend
    takes to the right of the photo (inches)."""

    heading: str
    legend: float = 0.0


class Task(Protocol):
    """Attributes:
    name: its ``task`` choice (``classify``, ``embed``, ``segment``, ``detect``, or a plug-in's).
    words: what it is, in a word for listings (``classification``).
    priority: which task a model's output is tried for first when the task is
        recognised (``task="auto"``): the highest first; the lowest claims the rest.
        Listings go the other way: the lowest (the most general task) first.
    options_type: the option group of its own (``DetectOptions``), or ``None``.
    torchvision_module: where torchvision keeps its models, or ``None``.
    cams_as_panels: every CAM of an image is a panel of ``<layer>.cam.png`` (a
        detector's, one per detection), instead of the main CAM over the photo with the
        top-K beside it in ``<layer>.cam_topk.png``.
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

    def chosen_by(self, own) -> bool:
        """Whether the caller's option group of this task (``own``) makes a model of no stated
        task (or the default task's) this task's: an embedding's ``target_image``."""

    def bind(self, own, model, prepare, device: str, options):
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
        name, one tensor per row; ``inputs.stacked()`` is the main one as an (N, C, H, W) batch)
        with the ``TargetOptions`` and the task's own options; return its output."""

    def plan(self, output, options, categories: Sequence[str] | None, count: int, task_options=None) -> Plan:
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

    def headline(self, explanation) -> str:
        """What the pictures' titles say of the target: ``target tabby (281), p=0.874``."""

    def objective_text(self, explanation) -> str:
        """What the summary's gradient panels are the gradients of, in words."""

    def cam_panel(self, explanation, focus) -> tuple[str, tuple | None]:
        """The title of the CAM panel of ``focus`` (a value of the prediction's ``focus``), and
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
        """The line ``hookviz run`` prints for an image done (a ``runner.ImageStatus``)."""

    def gallery_list(self, report) -> tuple[str, list[str]]:
        """What index.html lists beside an image's photo, from its report.json (a
        ``records.Report``; its ``prediction`` is the JSON this task wrote): a heading and
        the items (plain text)."""


def class_colour(index: int):
    """The colour of a class in a task's masks and boxes (tab20, by index)."""
    import matplotlib

    return matplotlib.colormaps["tab20"](index % 20)


def probability_text(value) -> str:
    """A probability as the progress lines print it (``nan`` for a non-finite one)."""
    return "nan" if value is None else format(value, ".3f")


class TaskBase:
    """What a task that explains classes (a classifier's, a segmenter's) says and draws; a
    task overrides what differs."""

    priority = 0
    options_type: type | None = None
    torchvision_module: str | None = None
    cams_as_panels = False
    #: How a target's probability is measured, as the titles say it.
    measure = "p"
    #: No probability that ``--faithfulness`` could follow, unless the task says which (and
    #: then has a ``probability_scorer``): a plug-in task is refused that option in one line.
    probability: str | None = None
    #: The target is the same on a randomised copy of the model, as a class is: ``--sanity`` runs.
    class_targets = True
    target_words = "its own target"
    #: No ``contrast`` score, unless the task defines one (a classifier's).
    contrasts = False

    def default_root(self, module) -> str | None:
        return None

    def chosen_by(self, own) -> bool:
        return False

    def check(self, options) -> None:
        """Raise UsageError for ``TargetOptions`` this task cannot honour (a classifier takes them all)."""

    def check_output(self, output, options, categories: Sequence[str] | None) -> None:
        """Raise UsageError for ``TargetOptions`` that the model's raw ``output`` (of a dry pass)
        cannot honour: a class index past its classes, an ``output_key`` it lacks."""

    def bind(self, own, model, prepare, device: str, options):
        return own

    def objective_name(self, options, task_options=None) -> str:
        return options.objective

    def objective_words(self, options, task_options=None) -> str:
        return "the cross-entropy against the target" if options.objective == "ce" else "the target's logit"

    def headline(self, explanation) -> str:
        target = explanation.target
        if target is None:
            return "no target"
        return f"target {target.label}, {self.measure}={target.probability:.3f}"

    def objective_text(self, explanation) -> str:
        return f"objective {explanation.objective}"

    def cam_panel(self, explanation, focus) -> tuple[str, tuple | None]:
        return f"{focus.label}\np={focus.probability:.3f}", None

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


def stacked(module, inputs, device: str):
    """The output of a model of one input for a batch's ``inputs`` (``hookviz.samples.ModelInputs``)
    of same-sized rows, stacked into one tensor (each input of a sample of several, by position or keyword)."""
    if getattr(inputs, "positional", None) is None:
        return module(inputs.stacked(device=device, dtype=model_dtype(module)))
    args, keywords = inputs.arguments(device, model_dtype(module))
    return module(*args, **keywords)


def focus_of(plan: Plan, key: str) -> list:
    """Per image of the plan, what CAM ``key`` explains (``None``: nothing)."""
    return [prediction.focus.get(key) for prediction in plan.predictions]


@dataclass(frozen=True)
class Rescoring:
    """``score(batch, images=None)``: the model run on new inputs (M, C, H, W) under
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


#: Every task, by name; ``auto`` (read the task from the model's output) is no task's name.
TASKS: Registry[Task] = Registry(
    "task",
    "task",
    extra_choices=("auto",),
    order=lambda task: task.priority,
    modules=built_in("hookviz.tasks", "classify detect embed segment"),
)


def register_task(task_class):
    """Class decorator: adds an instance of ``task_class`` to ``TASKS`` under its name.

    Raises:
        UsageError: another task has that name, or it cannot be typed after ``--task``; an
            ``options_type`` that is not a frozen dataclass with defaults, or whose setting
            another owner's group (or the run's own options) names too.
    """
    TASKS.check_free(task_class.name)
    if getattr(task_class, "options_type", None) is not None:
        from hookviz.options.declared import check_group

        check_group(task_class.options_type, f"task {task_class.name!r}")
    TASKS.add(task_class.name, task_class())
    return task_class
