"""Samples: what one input of the model is (a photo; later a clip, several named files), and the
one place a batch of samples becomes the model's inputs (``batch``)."""

from hookviz.samples.base import (
    SAMPLE_KINDS,
    Sample,
    SampleKind,
    SampleKindBase,
    counted_noun,
    get_sample_kind,
    kind_settings,
    register_sample_kind,
    sample_keys,
    settings_for_model,
)
from hookviz.samples.batch import ModelInputs, SampleBatch
from hookviz.samples.multi import MultiOptions
from hookviz.samples.video import VideoOptions

__all__ = [
    "SAMPLE_KINDS",
    "ModelInputs",
    "MultiOptions",
    "Sample",
    "SampleBatch",
    "SampleKind",
    "SampleKindBase",
    "VideoOptions",
    "get_sample_kind",
    "counted_noun",
    "kind_settings",
    "register_sample_kind",
    "sample_keys",
    "settings_for_model",
]
