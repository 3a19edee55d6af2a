"""The interface every model source meets, and the tools they share.

A *source* is where a model named by ``--model`` (or ``hookviz.load_model``) comes from:
torchvision's registry, hookviz's built-in models, a user's ``package.module:callable``.
Each source is one module of this package that defines a class with the interface below
and registers an instance with ``@register_source``; ``hookviz.models.loading.load_model`` asks
the sources, in order of ``priority``, which one claims a name. Adding a source is adding
a file (and one import line in ``sources/__init__.py``), not editing a chain of ``if``s.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hookviz.anatomy.attention import DeclaredAttention
from hookviz.anatomy.featuremaps import DeclaredLayout
from hookviz.errors import UsageError
from hookviz.inputs.images import Preprocessing
from hookviz.registry import Registry, built_in
from hookviz.tasks import DEFAULT_TASK

__all__ = [
    "LoadedModel",
    "ModelSource",
    "SOURCES",
    "register_source",
    "weights_kind",
    "seeded",
    "reset_parameters",
    "load_weights_file",
    "random_or_file",
    "weights_only_loads",
    "prefixes",
    "STAND_IN_PROMPTS",
    "cut_prompts_note",
    "one_prompt_note",
    "prompts_notes",
    "prompt_progress",
    "prompts_encoded",
    "refuse_same_tokens",
    "refuse_torchscript",
]


#: What a model with a text tower is loaded with when only its layers are listed (``hookviz
#: layers`` without prompts): its image tower's layers, the ones ``--layer`` names, do not
#: depend on the prompts. ``prompts=None`` asks a source for it.
STAND_IN_PROMPTS = ("a photo",)


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run, with what hookviz needs to know about it.

    Attributes:
        name: the name it was asked for.
        module: the ``nn.Module``, in eval mode.
        weights: what was loaded, for reports (``"DEFAULT (ResNet50_Weights.IMAGENET1K_V2)"``).
        categories: class names, indexable by logit index, or ``None`` when unknown.
        preprocessing: the input transform the weights expect.
        source: the name of the source that built it.
        task: what the model does: ``classify``, ``segment``, ``detect``, or ``auto`` (a
            factory's model: read from its output when it is first explained).
        input_size: the (height, width) the model requires, when it requires one.
        input_frames: the frames per clip a clip model requires, when it requires a number
            (MViT's forward reads its positional encoding's grid, not the clip's).
        notes: what a report should say about how the model was loaded.
        declared_layout: the model's token and channel layout, when its source knows it
            better than ``hookviz.anatomy.geometry`` reads it from the module (``None``: read it).
        declared_attention: where its attention blocks are and how each is reached, as its
            source declares them (``hookviz.anatomy.attention_blocks``); ``None``: found by
            the modules' types when an attention method asks (a factory's model).
        weights_sha256: the SHA-256 of the weights file named by ``--weights PATH`` (``None``
            for named weights): a file overwritten in place is told apart by it.
        default_layers: the layers to explain when the caller names none, when the source
            knows them better than ``layers.default_layer`` finds them (a YOLO's neck outputs).
        default_layers_reason: why those, in words.
        probabilities: how a classifier's logits become probabilities, as its source declares
            it: ``softmax`` over the classes (a CLIP's, even over one prompt), or ``sigmoid``,
            each class on its own (SigLIP's image-text scores); ``None``: undeclared, the task
            decides (a softmax, or a binary classifier's sigmoid over its one logit).
        prompts: the text prompts a model with a text tower was loaded with (its categories;
            report.json keeps them, ``--skip-existing`` compares them); ``()`` for other models.
        processor: a vision-language model's processor (tokenizer, image processor, chat
            template; ``hookviz.vlm``), with ``task`` ``describe``; ``None`` for other models.
        sample_kind: what one of its samples is (``hookviz.samples.SAMPLE_KINDS``): ``photo``,
            or the kind a factory's module names in its ``hookviz_sample_kind`` attribute.
    """

    name: str
    module: "object"  # torch.nn.Module
    weights: str
    categories: tuple[str, ...] | None
    preprocessing: Preprocessing
    source: str = "module"
    task: str = DEFAULT_TASK
    input_size: tuple[int, int] | None = None
    input_frames: int | None = None
    notes: tuple[str, ...] = field(default=())
    declared_layout: DeclaredLayout | None = None
    declared_attention: DeclaredAttention | None = None
    weights_sha256: str | None = None
    default_layers: tuple[str, ...] = ()
    default_layers_reason: str | None = None
    probabilities: str | None = None
    prompts: tuple[str, ...] = ()
    sample_kind: str = "photo"
    processor: "object" = None

    def __repr__(self) -> str:
        return f"LoadedModel({self.name!r}, weights={self.weights!r}, source={self.source!r}, task={self.task!r})"


class ModelSource(Protocol):
    """What a source provides.

    Attributes:
        name: how ``hookviz models`` titles its names ("torchvision", "built-in").
        priority: sources are asked in ascending order; prefixed names (``timm:``) first.
        prefix: the prefix that marks this source's names (``"timm:"``), or ``None``.
    """

    name: str
    priority: int
    prefix: str | None

    def about(self) -> str:
        """One line for ``hookviz models``: what the source offers, or what to install for it."""

    def claims(self, name: str) -> bool:
        """Whether ``name`` is this source's to load (cheap: no model is built)."""

    def names(self) -> list[str]:
        """The names ``hookviz models`` lists for this source (may be empty)."""

    def describe(self, name: str) -> str:
        """One line about ``name`` for ``hookviz models`` ("" for nothing to add)."""

    def task_of(self, name: str) -> str:
        """What ``name`` does: ``classify``, ``segment``, ``detect`` (``auto``: known only from its output)."""

    def load(self, name: str, weights: str, seed: int, trust_checkpoint: bool = False) -> LoadedModel:
        """Build ``name`` with ``weights`` (``DEFAULT``, ``none``, a file, or the source's own
        weights names), randomly initialised from ``seed`` where weights are ``none``. A file
        that would run code when loaded (a pickled checkpoint) is refused unless
        ``trust_checkpoint``; sources that never unpickle ignore it.

        Raises:
            UnknownModelError, WeightsError: with one line naming the argument.
        """


#: Every model source, by name; ``values()`` in the order they are asked (``priority``).
SOURCES: Registry[ModelSource] = Registry(
    "model",
    "model source",
    order=lambda source: source.priority,
    # equal priorities keep this order, so it is not sorted by name
    modules=built_in(
        "hookviz.models.sources",
        "factory builtin torchvision_models torchvision_video timm_models huggingface yolo_models open_clip_models",
    ),
)


def register_source(source_class):
    """Class decorator: register one instance of a source under its ``name``.

    Raises:
        UsageError: another source has that name.
    """
    SOURCES.add(source_class.name, source_class())
    return source_class


def prefixes() -> tuple[str, ...]:
    """The name prefixes sources own (``timm:``, ``hf:``): no other source may claim such a name."""
    return tuple(source.prefix for source in SOURCES.values() if source.prefix)


def weights_kind(weights: str) -> str:
    """``default``, ``none`` or ``other`` (a file or a source's own weights name)."""
    if weights.lower() == "none":
        return "none"
    if weights.upper() == "DEFAULT":
        return "default"
    return "other"


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed the CPU random stream for the block, then give the caller's stream back as it
    was: building a model never moves the caller's random numbers."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def refuse_torchscript(model, label: str) -> None:
    """Refuse a TorchScript module (``torch.jit.script`` or ``trace``), named ``label``: it takes
    no Python hooks, so none of its layers can be recorded (torch says so only as a RuntimeError)."""
    import torch

    if isinstance(model, torch.jit.ScriptModule):
        raise UsageError(
            f"{label}: a TorchScript module (torch.jit.script or torch.jit.trace) takes no Python hooks, so none of "
            "its layers can be recorded; give the nn.Module it was made from"
        )


def reset_parameters(model) -> None:
    """Random initialisation, as each layer defines it."""
    for sub in model.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()


def load_weights_file(model, path: str):
    """Load a state_dict file into ``model``; return a ``checkpoints.LoadedWeights``: the
    label reports show, the file's SHA-256 and notes on what was undone to fit it."""
    from hookviz.models.checkpoints import load_into

    return load_into(model, Path(path))


_on_prompts: contextvars.ContextVar[Callable[[int, int], None] | None] = contextvars.ContextVar(
    "hookviz_on_prompts", default=None
)


@contextlib.contextmanager
def prompt_progress(callback: Callable[[int, int], None] | None) -> Iterator[None]:
    """While the block runs, a model with a text tower that is loaded calls ``callback(prompts
    encoded, prompts)`` as its prompts go through the text tower, in parts (``(0, total)``
    first): ten thousand prompts take minutes on a CPU. ``None``: nothing is called."""
    token = _on_prompts.set(callback)
    try:
        yield
    finally:
        _on_prompts.reset(token)


def prompts_encoded(done: int, total: int) -> None:
    """Said by a text tower's wrapper (``clip_logits``) as its prompts are encoded (see ``prompt_progress``)."""
    callback = _on_prompts.get()
    if callback is not None:
        callback(done, total)


def cut_prompts_note(prompts: Sequence[str], counts: Sequence[int], limit: int) -> tuple[str, ...]:
    """The note that says which prompts are longer than the ``limit`` tokens a text tower takes
    (``counts``: each prompt's tokens, its start and end tokens included); ``()`` when none is.
    The tokenizer cuts them, as CLIP's own zero-shot classifier does: the run goes on, and says so."""
    cut = [(number, text, count) for number, (text, count) in enumerate(zip(prompts, counts), 1) if count > limit]
    if not cut:
        return ()
    from hookviz.options.model import prompt_place

    number, text, count = cut[0]
    others = {1: "", 2: "; so is 1 other prompt"}.get(len(cut), f"; so are {len(cut) - 1} other prompts")
    return (
        f"{prompt_place(text, number)} is {count} tokens, more than the {limit} the model's text "
        f"tower takes: it is scored on its first {limit} tokens only{others}; shorten it to be scored as written",
    )


def refuse_same_tokens(prompts: Sequence[str], rows: Sequence) -> None:
    """Refuse two prompts the model's own tokenizer makes the same tokens of (``rows``: each
    prompt's token ids, as the text tower takes them): CLIP's lowercases, so ``a cat`` and
    ``A cat`` are two classes that always tie.

    Raises:
        UsageError: naming both prompts (their files and lines, for ones read from files).
    """
    from hookviz.options.model import prompt_place

    seen: dict[tuple, int] = {}
    for number, (text, row) in enumerate(zip(prompts, rows), 1):
        first = seen.setdefault(tuple(row), number)
        if first != number:
            raise UsageError(
                f"{prompt_place(prompts[first - 1], first)} and {prompt_place(text, number)} are one prompt to the "
                "model's tokenizer (the same tokens: it does not tell them apart, by case or past its length), so "
                "their classes would always tie; give it once"
            )


def one_prompt_note(prompts: Sequence[str], probabilities: str) -> tuple[str, ...]:
    """The note that a softmax over one prompt ranks nothing (its probability is 1.0 whatever
    the photo), and what the run explains instead; ``()`` for several prompts, or sigmoids
    (a SigLIP scores each prompt on its own)."""
    from hookviz.options.model import prompt_place

    if len(prompts) != 1 or probabilities != "softmax":
        return ()
    return (
        f"{prompt_place(prompts[0], 1)} is the only prompt: one prompt cannot rank anything (the model's softmax "
        "over it is 1.0 whatever the photo); the CAMs explain the prompt's logit, its image-text similarity; give "
        "two or more prompts to compare them",
    )


def prompts_notes(prompts: Sequence[str], probabilities: str) -> tuple[str, ...]:
    """What a run over ``prompts`` says once: that one prompt ranks nothing (``one_prompt_note``),
    and which prompts hold characters no font here can draw (``fonts.undrawn_note``)."""
    from hookviz.fonts import undrawn_note

    return one_prompt_note(prompts, probabilities) + undrawn_note(prompts)


def random_or_file(model, weights: str, seed: int):
    """``--weights none`` (the model as randomly initialised from ``seed``) or a file loaded
    into it, as a ``checkpoints.LoadedWeights``."""
    from hookviz.models.checkpoints import LoadedWeights

    if weights_kind(weights) == "none":
        return LoadedWeights(f"none (random init, seed {seed})", None)
    return load_weights_file(model, weights)


_FORCE_WEIGHTS_ONLY = threading.Lock()


@contextlib.contextmanager
def weights_only_loads():
    """Make every ``torch.load`` in the block use ``weights_only=True``.

    torchvision's builders load pretrained weights through ``torch.hub.load_state_dict_from_url``,
    which passes ``weights_only=False``, and timm's file loader may too; PyTorch's documented
    ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` overrides that, so hookviz can keep using each library's
    own loading (and its per-model fix-ups) without ever unpickling code. The variable is
    restored when the block ends.
    """
    with _FORCE_WEIGHTS_ONLY:
        previous = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
        os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
        try:
            yield
        finally:
            if previous is None:
                del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
            else:
                os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = previous
