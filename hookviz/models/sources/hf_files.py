"""What every ``hf:`` loader (``huggingface`` and its ``hf_*`` kinds) reads alike from a
transformers model: a state_dict file's weights, and the class names of its config."""

from __future__ import annotations

import re

from hookviz.errors import WeightsError, arg
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import load_weights_file

__all__ = ["state_dict_file", "config_categories"]


def state_dict_file(model, weights: str) -> LoadedWeights:
    """``weights`` (a state_dict file) loaded into ``model``.

    Raises:
        WeightsError: it does not fit; the message says how a save_pretrained folder loads.
    """
    try:
        return load_weights_file(model, weights)
    except WeightsError as error:
        # transformers renames a checkpoint's keys as it loads: its own files load through their folder.
        raise WeightsError(
            f"{error}; a checkpoint written by save_pretrained loads with {arg('model', 'hf:FOLDER')} and "
            f"{arg('weights', 'DEFAULT')}"
        ) from None


def config_categories(config) -> tuple[str, ...] | None:
    """The class names of a transformers config's ``id2label``; ``None`` for its placeholders."""
    labels = getattr(config, "id2label", None) or {}
    names = [str(labels.get(i, labels.get(str(i), ""))) for i in range(len(labels))]
    if not names or all(re.fullmatch(r"LABEL_\d+", n) for n in names):
        return None  # transformers' placeholders: no names at all
    return tuple(names)
