"""The photo: one image file is one sample, one (C, H, W) tensor named ``image`` (the
built-in sample kind, and every model's unless it declares another); and a photo given in
memory (a PIL image, an array, a tensor of pixels or the model's own input), as
``Explainer.prepare`` takes it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hookviz.errors import UsageError, arg
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing, load_image, photo_of_array, prepare
from hookviz.samples.base import SampleKindBase, register_sample_kind

__all__ = ["Photo", "PHOTO", "prepared_photo"]

#: The photo kind's name, every model's sample kind unless it declares another.
PHOTO = "photo"


@register_sample_kind
class Photo(SampleKindBase):
    """A photo: PIL decodes it (``images.load_image``), the weights' ``Preprocessing`` makes
    it the model's input, and its overlays are drawn over the preprocessed pixels."""

    name = PHOTO
    words = "a photo"
    noun = "photo"

    def load(self, path: Path, max_pixels: int, settings=None) -> LoadedSample:
        return load_image(path, max_pixels)

    def prepare(self, loaded: LoadedSample, preprocessing: Preprocessing, max_pixels: int, settings=None) -> PreparedSample:
        return prepare(loaded, preprocessing, max_pixels)

    def blank(self, preprocessing: Preprocessing, settings=None) -> tuple:
        import torch

        return (torch.zeros(1, preprocessing.channels, *preprocessing.trace_size),)


def prepared_photo(image, preprocessing: Preprocessing, max_pixels: int) -> PreparedSample:
    """A photo (a path, a PIL image, an H x W x 3 uint8 array or float one in 0..1, a uint8 tensor as
    ``torchvision.io.read_image`` returns it) preprocessed as ``preprocessing`` says, or a float
    (C, H, W) tensor taken as the model's input as it is.

    Raises:
        ImageError: the file cannot be read or used.
        UsageError: an array or tensor of a shape that is neither, or an array of pixels of another dtype.
    """
    import torch
    from PIL import Image

    if isinstance(image, torch.Tensor) and image.numel() == 0:
        raise UsageError(
            f"{arg('image', 'x'.join(map(str, image.shape)))}: the tensor is empty; pass a photo or the model's input"
        )
    if isinstance(image, torch.Tensor) and str(image.dtype) in _PIXEL_DTYPES:
        image = _photo_of(image)  # 0-255 (or 16-bit) pixels are a photo, never a model's input
    elif isinstance(image, torch.Tensor):
        return _from_tensor(image, preprocessing)
    if isinstance(image, np.ndarray):
        image = photo_of_array(image)
    if not isinstance(image, (str, os.PathLike, Image.Image)):
        raise UsageError(
            f"{arg('image', type(image).__name__)}: expected a path, a PIL image, an H x W x 3 array, "
            "a uint8 (C, H, W) tensor or a preprocessed float (C, H, W) tensor"
        )
    return prepare(load_image(image, max_pixels), preprocessing, max_pixels)


#: A uint8 tensor's channels: gray, gray and alpha, RGB, RGBA (``torchvision.io.ImageReadMode``).
_PHOTO_CHANNELS = (1, 2, 3, 4)
#: Tensors of pixels: ``read_image`` returns uint8, and uint16 for a 16-bit PNG.
_PIXEL_DTYPES = ("torch.uint8", "torch.uint16")


def _photo_of(tensor):
    """A uint8 (or uint16) tensor of pixels as a PIL image: (C, H, W) as ``read_image`` returns
    it (or a batch of one), else (H, W) or (H, W, C) as arrays hold photos."""
    import torch
    from PIL import Image

    pixels = tensor.detach().cpu()
    if pixels.dtype != torch.uint8:  # 16-bit: 65535 is white, as 255 is in 8 bits
        pixels = (pixels.to(torch.int32) * 255 + 32767).div(65535, rounding_mode="floor").to(torch.uint8)
    if pixels.dim() == 4 and pixels.shape[0] == 1:
        pixels = pixels[0]
    if pixels.dim() == 3 and pixels.shape[0] in _PHOTO_CHANNELS:
        pixels = pixels.permute(1, 2, 0)
    elif not (pixels.dim() == 2 or (pixels.dim() == 3 and pixels.shape[-1] in _PHOTO_CHANNELS)):
        raise UsageError(
            f"{arg('image', 'x'.join(map(str, tensor.shape)))}: a uint8 tensor is taken as a photo, "
            "(C, H, W) as torchvision.io.read_image returns it, with 1 to 4 channels"
        )
    array = np.ascontiguousarray(pixels.numpy())
    return Image.fromarray(array[..., 0] if array.ndim == 3 and array.shape[-1] == 1 else array)


def _from_tensor(image, preprocessing: Preprocessing) -> PreparedSample:
    from PIL import Image

    tensor = image.detach().float().cpu()
    if tensor.dim() == 4 and tensor.shape[0] == 1:
        tensor = tensor[0]
    if tensor.dim() != 3:
        raise UsageError(
            f"{arg('image')}: a tensor input must be (C, H, W), a signal's (C, L) or a clip's (C, T, H, W), "
            f"not {tuple(tensor.shape)}"
        )
    channels = tensor.shape[0]
    if channels != preprocessing.channels:
        layout = (
            "; it looks like H x W x C, a photo's layout: pass image.permute(2, 0, 1) if it is the model's "
            "input, or a uint8 tensor or the path to have it preprocessed"
            if tensor.shape[-1] == preprocessing.channels
            else ""
        )
        raise UsageError(
            f"{arg('image', 'x'.join(map(str, tensor.shape)))}: a tensor image of {channels} channels; "
            f"the model takes {preprocessing.channels}{layout}"
        )
    mean = np.asarray(preprocessing.mean[:channels], dtype=np.float32)[:, None, None]
    std = np.asarray(preprocessing.std[:channels], dtype=np.float32)[:, None, None]
    # NaN pixels (a model input gone wrong) are shown black rather than cast to garbage
    pixels = (np.clip(np.nan_to_num(tensor.numpy() * std + mean), 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 0)
    shown = np.repeat(pixels, 3, axis=2) if channels == 1 else pixels
    return PreparedSample(LoadedSample(None, Image.fromarray(shown), _raw_pixels_note(tensor, mean, std)), tensor, shown)


def _raw_pixels_note(tensor, mean: np.ndarray, std: np.ndarray) -> tuple[str, ...]:
    """A note when a float tensor, taken as the model's input, holds values its normalisation
    cannot make (half again the value of a white pixel): pixels, not yet preprocessed?"""
    white = float(((1.0 - mean) / std).max())
    largest = float(np.nanmax(tensor.numpy(), initial=-np.inf))
    if not largest > 1.5 * white:
        return ()
    return (
        f"{arg('image')}: a float tensor is taken as the model's input, already preprocessed, but its values "
        f"reach {largest:.4g}, where this normalisation makes at most {white:.3g} (a white pixel): raw pixels? "
        "Pass a uint8 tensor (as torchvision.io.read_image returns) or the path to have it preprocessed",
    )
