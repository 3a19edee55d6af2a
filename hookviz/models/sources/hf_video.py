"""Hugging Face video classifiers (``VideoMAEForVideoClassification``,
``TimesformerForVideoClassification``) through ``hf:``, as clip models (imports torch: loaded on
first use, by ``huggingface``).

transformers' video models take ``pixel_values`` as (N, T, C, H, W); hookviz's clips are
(N, C, T, H, W), as torchvision's video models take them. ``FramesSecond`` swaps the two axes
before the model's own forward, with the model's modules as its own (the layer names are the
checkpoint's: ``videomae.encoder.layer.3``). The frames per clip are ``config.num_frames`` and
the input size ``config.image_size`` (VideoMAE's position embeddings are fixed to both); the
token layout is what ``anatomy.geometry`` reads of the model (VideoMAE: tubelets of
``tubelet_size`` frames, no class token; TimeSformer: a class token, then a token per frame and
patch, position by position with each position's frames in a row).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn as nn

from hookviz.errors import UnknownModelError, arg
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import LoadedModel
from hookviz.tasks import DEFAULT_TASK

__all__ = ["FramesSecond", "is_video", "load_video"]

#: The sample kind of a clip model (``hookviz.samples``' ``video``).
VIDEO_KIND = "video"


def is_video(config) -> bool:
    """Whether transformers builds a video classifier of ``config``."""
    from transformers import AutoModelForVideoClassification

    return type(config) in AutoModelForVideoClassification._model_mapping


class FramesSecond(nn.Module):
    """A transformers video classifier that takes hookviz's (N, C, T, H, W) clip: its
    ``pixel_values`` are the clip with its channel and frame axes swapped. Its modules are the
    model's own, under the same names; the output is the model's (``.logits``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.config = model.config
        for name, child in model.named_children():
            self.add_module(name, child)
        self._forward = model.forward  # the model's own forward, over these same modules

    def forward(self, clip: torch.Tensor):
        return self._forward(pixel_values=clip.transpose(1, 2))


def load_video(where, config, weights: str, seed: int, source: str) -> LoadedModel:
    """``where``'s video classifier (``huggingface._Where``) with ``weights`` (``DEFAULT``,
    ``none`` or a file), as a clip model.

    Raises:
        UnknownModelError: a model transformers has no video classifier for, or one without its head.
    """
    from transformers import AutoModelForVideoClassification

    from hookviz.anatomy.geometry import declared_layout
    from hookviz.models.sources.base import weights_kind
    from hookviz.models.sources.hf_files import config_categories, state_dict_file

    if getattr(config, "model_type", None) not in ("videomae", "timesformer"):
        raise UnknownModelError(
            f"{arg('model', where.name)}: {where.repo} is a {config.model_type!r} video model; hookviz "
            "explains transformers' VideoMAE and TimeSformer video classifiers"
        )
    if getattr(config, "attention_type", None) == "space_only":
        raise UnknownModelError(
            f"{arg('model', where.name)}: {where.repo} is a TimeSformer of attention_type 'space_only', whose frames "
            "are batched apart (no space-time tokens to map); hookviz explains 'divided_space_time' and 'joint_space_time'"
        )
    kind, loading = weights_kind(weights), ()
    if kind == "default":
        model, missing = where.from_pretrained(AutoModelForVideoClassification, seed)
        loading = where._missing(model, missing)
        loaded = LoadedWeights(f"DEFAULT ({where.repo}, {where.origin})", None)
    else:
        model = where.from_config(config, seed, auto=AutoModelForVideoClassification)
        loaded = LoadedWeights(f"none (random init, seed {seed})", None) if kind == "none" else state_dict_file(model, weights)
    preprocessing, notes = where.preprocessing()
    size = int(config.image_size)
    preprocessing = replace(preprocessing, transform=None, frames=int(config.num_frames))
    return LoadedModel(
        where.name,
        FramesSecond(model.eval()).eval(),
        loaded.label,
        config_categories(config),
        preprocessing,
        source=source,
        task=DEFAULT_TASK,
        input_size=(size, size),
        notes=loading + notes + loaded.notes,
        weights_sha256=loaded.sha256,
        declared_layout=declared_layout(model),
        sample_kind=VIDEO_KIND,
    )
