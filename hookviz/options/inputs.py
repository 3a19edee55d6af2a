"""How photos become the model's input (``InputOptions``): overrides of its preprocessing."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.options.base import set_field

__all__ = ["MAX_SIDE", "DEFAULT_MAX_PIXELS", "parse_triple", "InputOptions"]

#: Longest side hookviz resizes or crops a photo to. Models take 224 to ~1333 pixels; 4096 is
#: generous, and one 4096x4096 image with its recorded layers already needs gigabytes.
MAX_SIDE = 4096
#: Above this many pixels a photo is refused as a likely decompression bomb (``--max-pixels``).
DEFAULT_MAX_PIXELS = 100_000_000


def parse_triple(text: str, name: str) -> tuple[float, float, float]:
    """``"0.5,0.5,0.5"`` -> (0.5, 0.5, 0.5); one number means all three.

    Raises:
        UsageError: not one or three numbers.
    """
    try:
        values = tuple(float(v) for v in str(text).replace(" ", "").split(","))
    except ValueError:
        raise UsageError(f"{arg(name, text)}: expected three numbers such as 0.485,0.456,0.406") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise UsageError(f"{arg(name, text)}: expected three comma-separated numbers, got {len(values)}")
    return values  # type: ignore[return-value]


def _triple(value, name: str) -> tuple[float, float, float] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_triple(value, name)
    values = tuple(float(v) for v in value)
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise UsageError(f"{arg(name, value)}: expected three numbers (r, g, b)")
    return values  # type: ignore[return-value]


def _side(value, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SIDE:
        raise UsageError(f"{arg(name, value)}: must be a whole number of pixels from 1 to {MAX_SIDE}")
    return value


@dataclass(frozen=True)
class InputOptions:
    """How photos become the model's input. ``None`` keeps what the model's weights expect.

    Attributes:
        resize: the shorter side before the centre crop.
        crop: the side of the square the model sees; given alone, ``resize`` keeps the model's
            own ratio to it (``--crop 112`` with a 256/224 transform resizes to 128).
        mean, std: per-channel normalisation (r, g, b); one number means all three.
        whole_image: resize the whole photo to ``crop`` x ``crop`` instead of cropping.
        max_pixels: refuse photos with more pixels than this (decompression bombs).
    """

    resize: int | None = None
    crop: int | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    whole_image: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self):
        set_field(self, "resize", _side(self.resize, "resize"))
        set_field(self, "crop", _side(self.crop, "crop"))
        for name in ("mean", "std"):
            values = _triple(getattr(self, name), name)
            if values is not None and not all(math.isfinite(v) for v in values):
                raise UsageError(f"{arg(name, ','.join(map(str, values)))}: every value must be a finite number")
            set_field(self, name, values)
        if self.std is not None and any(v <= 0 for v in self.std):
            raise UsageError(f"{arg('std', ','.join(map(str, self.std)))}: standard deviations must be positive")
        if self.whole_image and self.resize is not None:
            raise UsageError(
                f"{arg('resize')} has no effect with {arg('whole_image')}, which resizes the whole photo "
                f"to the {arg('crop')} size; drop one"
            )
        if not isinstance(self.max_pixels, int) or self.max_pixels < 1:
            raise UsageError(f"{arg('max_pixels', self.max_pixels)}: must be 1 or more")

    def apply(self, preprocessing):
        """``preprocessing`` (a model's own ``images.Preprocessing``) with these overrides; the
        weights' transform object it holds is dropped once they change it, as it no longer
        describes the input.

        Raises:
            UsageError: an override of a transform object hookviz applies as it is (a factory's
                callable: hookviz cannot resize, crop or normalise inside it), or a crop that
                does not fit.
        """
        from dataclasses import replace

        if getattr(preprocessing, "applies_transform", False):
            self._refuse_overrides(preprocessing.transform.origin)
            return preprocessing
        changes: dict = {}
        if self.resize is not None:
            changes["resize"] = self.resize
            if self.crop is None and preprocessing.crop and preprocessing.size > self.resize:
                # The resize alone, below the weights' crop: the crop shrinks to fit, as the user
                # named no crop (a segmentation model probed with ImageNet's 224 at --resize 64).
                changes["size"] = self.resize
        if self.crop is not None:
            changes["size"] = self.crop
            if self.resize is None and preprocessing.crop and preprocessing.size:
                # The crop alone keeps the model's own ratio of crop to resize (224 of 256; a timm
                # model's crop_pct), so the same share of the photo is seen, at the new size.
                changes["resize"] = max(self.crop, round(self.crop * preprocessing.resize / preprocessing.size))
        if self.mean is not None:
            changes["mean"] = self.mean
        if self.std is not None:
            changes["std"] = self.std
        if self.whole_image:
            changes["mode"] = "whole"
        result = replace(preprocessing, **changes)
        if result != preprocessing:  # the weights' transform object (not compared) no longer describes it
            result = replace(result, transform=None)
        if preprocessing.mode == "whole" and not self.whole_image and self.resize not in (None, result.size):
            # a Hugging Face image processor's resize: there is no shorter side to set
            raise UsageError(
                f"{arg('resize', self.resize)}: the model's preprocessing resizes the whole photo to "
                f"{result.size}x{result.size}, so a shorter side has no effect; change that size with {arg('crop')}, "
                f"or drop {arg('resize')}"
            )
        if result.crop and result.size > result.resize:
            raise UsageError(f"{arg('crop', result.size)} is larger than {arg('resize', result.resize)}; the crop must fit")
        return result

    def _refuse_overrides(self, origin: str) -> None:
        given = [name for name in ("resize", "crop", "mean", "std") if getattr(self, name) is not None]
        given += ["whole_image"] if self.whole_image else []
        if given:
            raise UsageError(
                f"{arg(given[0])}: photos are preprocessed by {origin}, which hookviz applies as it is and cannot "
                f"resize, crop or normalise otherwise; drop {arg(given[0])}, or change the transform"
            )
