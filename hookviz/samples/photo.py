"""The photo: one image file is one sample, one (C, H, W) tensor named ``image`` (the
built-in sample kind, and every model's unless it declares another)."""

from __future__ import annotations

from pathlib import Path

from hookviz.inputs.images import LoadedImage, PreparedImage, Preprocessing, load_image, prepare
from hookviz.samples.base import SampleKindBase, register_sample_kind

__all__ = ["Photo", "PHOTO"]

#: The photo kind's name, every model's sample kind unless it declares another.
PHOTO = "photo"


@register_sample_kind
class Photo(SampleKindBase):
    """A photo: PIL decodes it (``images.load_image``), the weights' ``Preprocessing`` makes
    it the model's input, and its overlays are drawn over the preprocessed pixels."""

    name = PHOTO
    words = "a photo"

    def load(self, path: Path, max_pixels: int) -> LoadedImage:
        return load_image(path, max_pixels)

    def prepare(self, loaded: LoadedImage, preprocessing: Preprocessing, max_pixels: int) -> PreparedImage:
        return prepare(loaded, preprocessing, max_pixels)

    def blank(self, preprocessing: Preprocessing) -> tuple:
        import torch

        return (torch.zeros(1, preprocessing.channels, *preprocessing.trace_size),)
