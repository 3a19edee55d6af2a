"""Models: load one by name, from whichever source claims the name.

The sources live in ``hookviz.models.sources``, one module each (torchvision's classifiers,
hookviz's built-in models, timm's models as ``timm:NAME``, Hugging Face classifiers as
``hf:ORG/NAME``, ``package.module:callable`` factories); this module asks them in order
and returns a ``LoadedModel``. Loading never changes the caller's process:
random initialisation uses a forked random stream, and ``sys.path`` and environment
variables are put back as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hookviz.errors import UnknownModelError, UsageError, arg, did_you_mean, hint
from hookviz.models.sources.base import LoadedModel, prompt_progress
from hookviz.options import ModelOptions
from hookviz.options.model import prompts_given_as
from hookviz.tasks import DEFAULT_TASK, task_names, task_words

__all__ = ["LoadedModel", "SourceListing", "load_model", "list_models", "list_sources", "prompt_progress"]

#: The order ``hookviz models`` shows the sources in; any other follows.
_LISTING_ORDER = ("built-in", "torchvision", "timm", "hf", "open_clip", "ultralytics", "factory")


def _sources():
    from hookviz.models.sources import SOURCES

    return SOURCES.values()


def load_model(
    model: str | ModelOptions,
    weights: str = "DEFAULT",
    seed: int = 0,
    trust_checkpoint: bool = False,
    prompts: Sequence[str] = (),
    *,
    listing: bool = False,
    on_prompts: Callable[[int, int], None] | None = None,
) -> LoadedModel:
    """Build ``model`` and load ``weights`` into it; return it in eval mode.

    Args:
        model: torchvision model name, built-in name, ``timm:NAME``, ``hf:ORG/NAME``, or
            ``package.module:callable`` (or a whole ``ModelOptions``, whose weights and
            seed are then used).
        weights: ``DEFAULT`` (pretrained), ``none`` (random init seeded with ``seed``),
            a torchvision weights name (``IMAGENET1K_V1``), or a path to a state_dict
            (``torch.save`` file or ``.safetensors``).
        seed: seeds the random initialisation; the caller's random stream is left as it was.
        trust_checkpoint: load a checkpoint that runs code when loaded (``yolo:best.pt``).
        prompts: the text prompts a model with a text tower (``open_clip:ViT-B-32``) is
            explained by: its output is its image-text logits over them, its categories them.
        listing: loaded only to list its layers (``hookviz layers``): a model with a text tower
            then needs no prompts; without them its output scores a stand-in prompt, and means nothing.
        on_prompts: called with (prompts encoded, prompts) as a text tower encodes its prompts,
            in parts (see ``prompt_progress``, which says it for a whole block, a run's included).

    Raises:
        UnknownModelError: the name matches no model, or its factory failed.
        UsageError: prompts for a model without a text tower, or none for one with it.
        WeightsError: the weights cannot be had or do not fit.
    """
    options = (
        model
        if isinstance(model, ModelOptions)
        else ModelOptions(model, weights, seed, trust_checkpoint=trust_checkpoint, prompts=tuple(prompts))
    )
    for source in _sources():
        if source.claims(options.name):
            _check_task(source, options)
            with prompt_progress(on_prompts) if on_prompts is not None else contextlib.nullcontext():
                loaded = source.load(
                    options.name,
                    options.weights,
                    options.seed,
                    trust_checkpoint=options.trust_checkpoint,
                    **_prompts_for(source, options, listing),
                )
            loaded.module.eval()
            if getattr(source, "takes_prompts", False):  # plain texts: a Prompt's place is for messages only
                categories = None if loaded.categories is None else tuple(map(str, loaded.categories))
                loaded = replace(loaded, prompts=tuple(map(str, options.prompts)), categories=categories)
            return loaded if options.task == "auto" else replace(loaded, task=options.task)
    known = [n for source in _sources() for n in source.names()]
    raise UnknownModelError(
        f"{arg('model', options.name)}: no such model{did_you_mean(options.name, known)}; "
        f"{hint('list_models')}, or pass package.module:callable"
    )


@dataclass(frozen=True)
class SourceListing:
    """One source's part of ``hookviz models``.

    Attributes:
        source: the source's name (``timm``).
        about: what it offers, or what to install for it.
        names: ``(name, description)`` of the names that matched.
        total: how many names the source lists before matching.
        task: what these models do: a source with models of several tasks (torchvision's
            classifiers, segmenters, detectors) gives one listing per task.
    """

    source: str
    about: str
    names: tuple[tuple[str, str], ...]
    total: int
    task: str = DEFAULT_TASK


def _matches(name: str, description: str, filter: str | None, search: str | None) -> bool:
    if filter and filter not in name:
        return False
    if search:
        text = f"{name} {description}".lower()
        return all(word in text for word in search.lower().split())
    return True


def list_sources(filter: str | None = None, search: str | None = None) -> list[SourceListing]:
    """Every source, grouped by task in ``hookviz.tasks`` order (classifiers, then
    segmentation, then detection models) and in ``hookviz models`` order within a task, with
    the names that match.

    Args:
        filter: keep names containing this text (case-sensitive).
        search: keep names whose name or description holds every word of this text, in any case.
    """
    listings = []
    order = {name: i for i, name in enumerate(_LISTING_ORDER)}
    for source in sorted(_sources(), key=lambda s: (order.get(s.name, len(order)), s.priority)):
        task_of = getattr(source, "task_of", lambda name: DEFAULT_TASK)
        by_task: dict[str, list[tuple[str, str]]] = {}
        for name in source.names():
            by_task.setdefault(task_of(name), []).append((name, source.describe(name)))
        for task, described in (by_task or {DEFAULT_TASK: []}).items():
            kept = tuple((n, d) for n, d in described if _matches(n, d, filter, search))
            title = source.name if len(by_task) <= 1 else f"{source.name} {task_words(task)}"
            listings.append(SourceListing(title, source.about(), kept, len(described), task))
    rank = {task: i for i, task in enumerate(task_names())}
    return sorted(listings, key=lambda listing: rank.get(listing.task, 0))  # stable: sources keep their order


def _prompts_for(source, options: ModelOptions, listing: bool = False) -> dict:
    """The prompts, as keyword, for a source whose models have a text tower (``takes_prompts``);
    ``None`` when there are none and the model is only listed (the source loads a stand-in).

    Raises:
        UsageError: prompts for a model of another source.
    """
    if getattr(source, "takes_prompts", False):
        return {"prompts": None if listing and not options.prompts else options.prompts}
    if options.prompts:
        named, flags = prompts_given_as(options.prompts)
        raise UsageError(
            f"{named}: {options.name} has no text tower; text prompts explain CLIP and "
            f"SigLIP models ({arg('model', 'open_clip:ARCH')}, or an hf: CLIPModel or SiglipModel); drop {flags}"
        )
    return {}


def _check_task(source, options: ModelOptions) -> None:
    """A source that knows what a model does refuses another ``task``."""
    known = getattr(source, "task_of", lambda name: "auto")(options.name)
    if options.task not in ("auto", known) and known != "auto":
        raise UnknownModelError(
            f"{arg('task', options.task)}: {options.name} is a {task_words(known)} model; "
            f"drop {arg('task')} (or pass {arg('task', known)})"
        )


def list_models(filter: str | None = None, search: str | None = None) -> list[tuple[str, str, str]]:
    """Every name a source lists, as ``(source, name, description)``, sources in order
    (``filter`` and ``search`` as for ``list_sources``)."""
    return [
        (listing.source, name, description) for listing in list_sources(filter, search) for name, description in listing.names
    ]
