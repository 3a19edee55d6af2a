"""Models: load one by name, from whichever source claims the name.

The sources live in ``hookviz.sources``, one module each (torchvision's classifiers,
hookviz's built-in models, ``package.module:callable`` factories); this module asks
them in order and returns a ``LoadedModel``. Loading never changes the caller's process:
random initialisation uses a forked random stream, and ``sys.path`` and environment
variables are put back as they were.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import UnknownModelError, arg, did_you_mean, hint
from .options import ModelOptions
from .sources.base import LoadedModel

__all__ = ["LoadedModel", "load_model", "list_models", "input_channels"]


def _sources():
    from .sources import SOURCES

    return SOURCES


def load_model(model: str | ModelOptions, weights: str = "DEFAULT", seed: int = 0) -> LoadedModel:
    """Build ``model`` and load ``weights`` into it; return it in eval mode.

    Args:
        model: torchvision model name, built-in name, or ``package.module:callable``
            (or a whole ``ModelOptions``, whose weights and seed are then used).
        weights: ``DEFAULT`` (pretrained), ``none`` (random init seeded with ``seed``),
            a torchvision weights name (``IMAGENET1K_V1``), or a path to a state_dict
            (``torch.save`` file or ``.safetensors``).
        seed: seeds the random initialisation; the caller's random stream is left as it was.

    Raises:
        UnknownModelError: the name matches no model, or its factory failed.
        WeightsError: the weights cannot be had or do not fit.
    """
    options = model if isinstance(model, ModelOptions) else ModelOptions(model, weights, seed)
    for source in _sources():
        if source.claims(options.name):
            loaded = source.load(options.name, options.weights, options.seed)
            loaded.module.eval()
            return loaded if options.task == "auto" else replace(loaded, task=options.task)
    known = [n for source in _sources() for n in source.names()]
    raise UnknownModelError(
        f"{arg('model', options.name)}: no such model{did_you_mean(options.name, known)}; "
        f"{hint('list_models')}, or pass package.module:callable"
    )


TASK_ORDER = ("classify", "segment", "detect")


def list_models(filter: str | None = None) -> list[tuple[str, str, str, str]]:
    """Every name a source lists, as ``(task, source, name, description)``: grouped by task
    (classifiers, segmentation, detection), built-in models first within a task."""
    rows = []
    for source in sorted(_sources(), key=lambda s: (s.name != "built-in", s.priority)):
        task_of = getattr(source, "task_of", lambda name: "classify")
        for name in source.names():
            if not filter or filter in name:
                rows.append((task_of(name), source.name, name, source.describe(name)))
    rank = {task: i for i, task in enumerate(TASK_ORDER)}
    return sorted(rows, key=lambda row: rank.get(row[0], len(rank)))  # stable: sources keep their order


def input_channels(module) -> int:
    """How many channels the model's first convolution takes: 1 for a grayscale model,
    else 3 (RGB). Only the first ``Conv2d`` registered is looked at; models whose stem
    comes later in registration order are taken as RGB."""
    import torch.nn as nn

    first = next((m for m in module.modules() if isinstance(m, nn.Conv2d)), None)
    return 1 if first is not None and first.in_channels == 1 and first.groups == 1 else 3
