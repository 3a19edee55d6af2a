"""The weights' own transform as an object (``WeightsTransform``), and applying one that
hookviz's resize, crop and normalisation cannot express (a factory's callable).

Every source hands over the object its weights define: torchvision's ``weights.transforms()``,
timm's ``create_transform(**data_config)``, a Hugging Face image processor, a factory's own
callable. Where hookviz's PIL path (``images.prepare``) reproduces the object, the path runs and
the object is kept beside it (the tests prove the two agree); where it cannot, the photo kind
applies the object itself: a PIL image in, a (C, H, W) float tensor out.

What an applied transform's overlay shows: its output, denormalised with the mean and std
found on the object (its own ``mean``/``std`` or ``image_mean``/``image_std``, or those of a
step in its ``transforms`` list, as a ``Normalize`` has them), else read as pixels in 0..1;
clipped to 0..255. So the overlay is exactly what the model sees, at its size.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hookviz.errors import ImageError, UnknownModelError, arg, describe
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing, prepare

__all__ = ["WeightsTransform", "TRANSFORM_MODE", "applied_preprocessing", "apply_transform", "normalisation_of"]

#: ``Preprocessing.mode`` of a photo that the weights' transform object makes the model's input.
TRANSFORM_MODE = "transform"

#: The probe photo an applied transform is tried on when the model loads: mid-grey and not
#: square, so a transform that forgets to crop shows it in the shape it returns.
_PROBE_SIZE = (320, 240)


@dataclass(frozen=True)
class WeightsTransform:
    """The transform a model's weights define, as the object its library gives.

    Attributes:
        function: the object: a PIL image in, the (C, H, W) float tensor out (an image
            processor's batch, ``pixel_values`` of one photo, is read as its one tensor).
        origin: whose transform it is, in words for notes and errors (``the transform of
            --model pkg.mod:build``).
        applied: ``True`` when the photo kind applies the object itself; ``False`` when
            hookviz's own path reproduces it (``Preprocessing``'s fields say it all).
        shape: the (C, H, W) it made of the probe photo, when applied.
    """

    function: Any = field(repr=False)
    origin: str
    applied: bool = False
    shape: tuple[int, int, int] | None = None

    def __repr__(self) -> str:
        return f"WeightsTransform({self.origin!r}, applied={self.applied})"

    def prepare(self, image: LoadedSample, preprocessing: Preprocessing) -> PreparedSample:
        """The photo made the model's input by this object, its overlay the output
        denormalised with ``preprocessing``'s mean and std (see the module's docstring).

        Raises:
            ImageError: it failed on the photo or returned no (C, H, W) float tensor, in one
                line naming the photo and the transform.
        """
        tensor = _output(self, image.rgb, lambda what: ImageError(f"{image.label}: {self.origin} {what}"))
        channels = tensor.shape[0]
        mean = np.asarray(preprocessing.mean[:channels], dtype=np.float32)[:, None, None]
        std = np.asarray(preprocessing.std[:channels], dtype=np.float32)[:, None, None]
        values = np.nan_to_num(tensor.numpy() * std + mean)  # NaN shown black, as a tensor input's
        pixels = (np.clip(values, 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 0)
        shown = np.repeat(pixels, 3, axis=2) if channels == 1 else np.ascontiguousarray(pixels)
        return PreparedSample(source=image, tensor=tensor, shown=shown)


def applied_preprocessing(function, origin: str, model_name: str) -> tuple[Preprocessing, tuple[str, ...]]:
    """A ``Preprocessing`` that applies ``function`` itself, tried on a probe photo now, and a
    note on how its overlays are shown.

    Raises:
        UnknownModelError: it is not callable, fails on the probe photo or returns no (C, H, W)
            float tensor, in one line naming the model and what it returned.
    """
    from PIL import Image

    if not callable(function):
        raise UnknownModelError(
            f"{arg('model', model_name)}: its transform is a {type(function).__name__}, not a callable that takes a PIL image"
        )
    probe = Image.new("RGB", _PROBE_SIZE, (128, 128, 128))
    size = "x".join(map(str, _PROBE_SIZE))

    def blame(what: str) -> UnknownModelError:
        return UnknownModelError(f"{arg('model', model_name)}: {origin} {what}, tried on a grey {size} photo as it loaded")

    tensor = _output(WeightsTransform(function, origin, applied=True), probe, blame)
    channels, height, width = (int(n) for n in tensor.shape)
    found = normalisation_of(function)
    mean, std = found or ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    how = "denormalised with the mean and std found on it" if found else "read as pixels in 0..1 (no mean or std found on it)"
    transform = WeightsTransform(function, origin, applied=True, shape=(channels, height, width))
    processing = Preprocessing(
        resize=height, size=height, mean=mean, std=std, mode=TRANSFORM_MODE, channels=channels, transform=transform
    )
    return processing, (f"photos are preprocessed by {origin}; overlays show its output {how}",)


def apply_transform(image: LoadedSample, preprocessing: Preprocessing) -> PreparedSample:
    """The photo made the model's input by the weights' transform object itself, its overlay
    the output denormalised with ``preprocessing``'s mean and std (see the module's docstring).

    Raises:
        ImageError: the transform failed on the photo or returned no (C, H, W) float tensor,
            in one line naming the photo and the transform.
    """
    transform = preprocessing.transform
    if transform is None:  # nothing to apply: hookviz's own resize, crop and normalisation
        return prepare(image, preprocessing)
    return transform.prepare(image, preprocessing)


def _output(transform: WeightsTransform, rgb, blame):
    """What ``transform`` makes of the photo ``rgb``: a contiguous float32 (C, H, W) tensor of 1
    or 3 channels; else ``blame(what went wrong)``, the one-line error to raise, is raised."""
    import torch

    try:
        with _random_state_kept():  # a transform that draws random numbers leaves the caller's streams alone
            result = transform.function(rgb.copy())  # a copy: the callable may alter what it is given
    except Exception as exc:  # the weights' or the user's code: say whose, and how it failed
        raise blame(f"failed on the photo ({describe(exc)})") from None
    tensor = _pixel_values(result)
    if isinstance(tensor, np.ndarray) and tensor.dtype.kind == "f":
        tensor = torch.from_numpy(np.array(tensor, dtype=np.float32))
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        what = f"a {tensor.dtype} tensor" if isinstance(tensor, torch.Tensor) else f"an object of type {type(result).__name__}"
        raise blame(f"returned {what}, not a (C, H, W) float tensor")
    if tensor.dim() == 4 and tensor.shape[0] == 1:
        tensor = tensor[0]
    if tensor.dim() != 3 or tensor.shape[0] not in (1, 3) or min(tensor.shape[1:]) < 1:
        raise blame(f"returned a tensor of shape {tuple(tensor.shape)}, not (C, H, W) with 1 or 3 channels")
    return tensor.detach().to(device="cpu", dtype=torch.float32).contiguous()


@contextlib.contextmanager
def _random_state_kept() -> Iterator[None]:
    import random

    import torch

    python, legacy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(legacy)


def _pixel_values(result):
    """An image processor's ``BatchFeature`` (or any mapping) as its ``pixel_values``, else ``result``."""
    if hasattr(result, "keys") and "pixel_values" in result.keys():
        values = result["pixel_values"]
        return values[0] if isinstance(values, (list, tuple)) and len(values) == 1 else values
    return result


def normalisation_of(function) -> tuple[tuple[float, float, float], tuple[float, float, float]] | None:
    """The (mean, std) a transform object normalises with: its own attributes (``mean`` and
    ``std``, or an image processor's ``image_mean`` and ``image_std`` unless ``do_normalize`` is
    off), else those of the last step in its ``transforms`` that has them; ``None`` if none."""
    for names in (("mean", "std"), ("image_mean", "image_std")):
        found = [_three(getattr(function, name, None)) for name in names]
        if found[0] is not None and found[1] is not None and getattr(function, "do_normalize", True):
            return found[0], found[1]
    steps = getattr(function, "transforms", None)
    if isinstance(steps, (list, tuple)):
        for step in reversed(steps):
            found_step = normalisation_of(step)
            if found_step is not None:
                return found_step
    return None


def _three(values) -> tuple[float, float, float] | None:
    """One or three numbers as three floats; ``None`` for anything else."""
    if isinstance(values, numbers.Real):
        values = (values,)
    try:
        numbers_ = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        return None
    if len(numbers_) == 1:
        numbers_ = numbers_ * 3
    return numbers_ if len(numbers_) == 3 else None  # type: ignore[return-value]
