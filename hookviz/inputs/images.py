"""Images: find them, decode any file PIL reads into honest RGB, and preprocess it.

Decoding is PIL's; this module only decides what "the RGB picture in this file" means
for the awkward cases (16-bit and float grayscale, transparency, CMYK, EXIF rotation,
animations) and refuses files that would exhaust memory.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from hookviz.errors import ImageError, UsageError, arg, display_path, first_line, hint
from hookviz.inputs.identity import SampleIdentity
from hookviz.options import DEFAULT_MAX_PIXELS

__all__ = [
    "HEIF_SUFFIXES",
    "MODES",
    "Preprocessing",
    "LoadedSample",
    "PreparedSample",
    "load_image",
    "photo_of_array",
    "prepare",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MAX_ASPECT_RATIO",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: A longer side more than this many times the shorter one is refused: "resize the shorter
#: side to 256" would turn a 1x20000 strip into 256x5120000 pixels.
MAX_ASPECT_RATIO = 50

#: The resampling filters a model's transform may name, as PIL names them.
INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}


#: How a photo is resized: ``crop`` (shorter side to ``resize``, then the centre ``size`` square),
#: ``whole`` (the whole photo to ``size`` x ``size``), ``shorter`` (shorter side to ``resize``, nothing
#: cut: segmentation), ``original`` (the photo as it is: a detector resizes it itself), ``transform``
#: (the weights' transform object makes the input: ``hookviz.inputs.transforms``).
MODES = ("crop", "whole", "shorter", "original", "transform")


class InputTransform(Protocol):
    """What ``Preprocessing.transform`` holds: the transform a model's weights define
    (``hookviz.inputs.transforms.WeightsTransform``)."""

    @property
    def origin(self) -> str:
        """Whose transform it is, in words."""
        ...

    @property
    def applied(self) -> bool:
        """Whether it makes the input itself (else hookviz's own path reproduces it)."""
        ...

    @property
    def shape(self) -> tuple[int, int, int] | None:
        """The (C, H, W) it made of the probe photo, when applied."""
        ...

    @property
    def function(self) -> Any:
        """The library's object itself."""
        ...

    def prepare(self, image: LoadedSample, preprocessing: Preprocessing) -> PreparedSample:
        """``image`` made the model's input by the transform itself."""
        ...


@dataclass(frozen=True)
class Preprocessing:
    """How a photo becomes the model's input: resize, maybe crop, normalise.

    The default, ``mode="crop"``, is torchvision's usual ImageNet evaluation transform (see
    ``MODES`` for the others). ``channels=1`` feeds a grayscale model the photo's luminance,
    normalised with the first of ``mean`` and ``std``.
    ``interpolation`` is the resampling filter of every resize (``bilinear``, or ``bicubic``
    as most timm weights expect).

    ``transform`` is the weights' own transform as its library's object (torchvision's
    ``weights.transforms()``, timm's eval transform, a Hugging Face image processor, a factory's
    callable; ``None`` when the weights define none). Where the fields reproduce it, hookviz's
    own path runs and the object is kept beside them; where they cannot (``transform.applied``,
    ``mode="transform"``), the object itself makes the input (``hookviz.inputs.transforms``).
    It is left out of comparisons: the fields say what report.json keeps.

    ``frames`` is a clip model's frames per clip, as its weights were measured with them
    (torchvision's video weights: 16 for r3d_18, 32 for Swin3D); a run's preprocessing (and its
    report.json) holds the frames it used (``--frames 8``); ``None`` for a photo model.
    """

    resize: int = 256
    size: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    mode: str = "crop"
    channels: int = 3
    interpolation: str = "bilinear"
    transform: InputTransform | None = field(default=None, compare=False, repr=False)
    frames: int | None = None

    def __post_init__(self):
        if self.interpolation not in INTERPOLATIONS:
            raise UsageError(f"{arg('interpolation', self.interpolation)}: choose from {', '.join(INTERPOLATIONS)}")

    @property
    def crop(self) -> bool:
        return self.mode == "crop"

    @property
    def square(self) -> bool:
        """Whether every photo becomes the same ``size`` x ``size`` input."""
        return self.mode in ("crop", "whole")

    @property
    def applies_transform(self) -> bool:
        """Whether the weights' transform object itself makes the input (``mode="transform"``)."""
        return self.transform is not None and self.transform.applied

    @property
    def trace_size(self) -> tuple[int, int]:
        """An input size for a dry pass: the square, the resized side (224 for ``original``), or
        what an applied transform made of its probe photo."""
        shape = self.transform.shape if self.transform is not None and self.transform.applied else None
        if shape is not None:
            return shape[1], shape[2]
        side = self.size if self.square else self.resize if self.mode == "shorter" else 224
        return side, side

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "resize": self.resize if self.mode in ("crop", "shorter") else None,
            "crop": self.size if self.mode == "crop" else None,
            "size": [self.size, self.size] if self.square else None,
            "interpolation": "its own" if self.applies_transform else self.interpolation,
            "mean": list(self.mean[: self.channels]),
            "std": list(self.std[: self.channels]),
            "channels": self.channels,
            **({"frames": self.frames} if self.frames is not None else {}),
        }


@dataclass(frozen=True)
class LoadedSample:
    """A decoded sample as its overlays are drawn: a photo (upright, RGB, 8 bits per channel), a
    clip's first frame, a signal's picture. ``identity`` tells a file's sample from another of the
    same name (``None`` for a sample given in memory); ``noun`` names one given in memory in its
    ``label`` (``<in-memory signal>``)."""

    path: Path | None
    rgb: Image.Image
    notes: tuple[str, ...] = ()
    identity: SampleIdentity | None = None
    noun: str = field(default="image", compare=False)

    @property
    def label(self) -> str:
        return display_path(self.path) if self.path is not None else f"<in-memory {self.noun}>"


@dataclass(frozen=True)
class PreparedSample:
    """A sample of one input as the model sees it (``hookviz.samples.Sample``'s members), its input
    named ``image``: a photo's, or a signal's or clip's tensor given in memory.

    Attributes:
        source: the decoded sample (``LoadedSample``).
        tensor: the model's input: a photo's normalised (3, size, size) float32 tensor.
        shown: what overlays are drawn over: a photo's pixels before normalisation, (size, size, 3) uint8.
        whole: the whole photo (uint8), on which a ``mode="whole"`` CAM is drawn.
    """

    source: LoadedSample
    tensor: "object"  # torch.Tensor; annotated loosely so this module imports without torch
    shown: np.ndarray
    whole: np.ndarray | None = field(default=None, repr=False)

    #: The name of its one input, as a sample's (``hookviz.samples.Sample``) inputs are named.
    main = "image"

    @property
    def tensors(self) -> dict:
        """Its inputs by name, as a sample's: the one tensor, ``image``."""
        return {self.main: self.tensor}


# ----------------------------------------------------------------------------- decoding


def load_image(source: "str | os.PathLike | Image.Image", max_pixels: int = DEFAULT_MAX_PIXELS) -> LoadedSample:
    """Decode a file (or take a PIL image) and return it upright in RGB.

    Raises:
        ImageError: the file is missing, unreadable, truncated, too large or too thin.
    """
    if isinstance(source, Image.Image):
        return _to_loaded(None, source, max_pixels)
    path = Path(source)
    shown = display_path(path)
    if not path.exists():
        raise ImageError(f"{shown}: no such file")
    if path.is_dir():
        raise ImageError(f"{shown}: is a directory, not an image")
    if path.stat().st_size == 0:
        raise ImageError(f"{shown}: file is empty (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                loaded = _to_loaded(path, im, max_pixels)
        # Read again for its digest, from the page cache (a 5 MB, 12 MP JPEG: ~15 ms, 2% of
        # decoding it), once decoding succeeded: the file is never held whole in memory, and a
        # broken one costs nothing more.
        return replace(loaded, identity=SampleIdentity.of(path))
    except Image.DecompressionBombError:
        cap = 2 * (Image.MAX_IMAGE_PIXELS or 0)
        if max_pixels < cap:
            advice = f"raise {arg('max_pixels')} if you trust it"
        else:  # PIL's own limit is lower than ours, and hookviz leaves PIL's settings alone
            advice = f"PIL refuses anything above {cap:,} pixels (PIL.Image.MAX_IMAGE_PIXELS); shrink it first"
        raise ImageError(f"{shown}: image is too large to decode safely; {advice}") from None
    except PermissionError:
        raise ImageError(f"{shown}: cannot read it (permission denied)") from None
    except UnidentifiedImageError:
        if _is_heif(path):
            raise ImageError(
                f"{shown}: a HEIC/HEIF photo, which PIL cannot read alone; {hint('heif')}, or convert it to JPEG or PNG"
            ) from None
        if (mimetypes.guess_type(path.name)[0] or "").startswith("video/"):
            raise ImageError(
                f"{shown}: is a video (a clip), and this model takes photos: "
                "give a model that takes clips, or the video's frames as photos"
            ) from None
        raise ImageError(f"{shown}: not an image format PIL can read (for SVG or PDF, convert it to PNG first)") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError(f"{shown}: image data is corrupt or truncated ({first_line(exc)})") from None


def photo_of_array(array: np.ndarray) -> Image.Image:
    """An H x W (x 1, 3 or 4) array of pixels as a PIL image: uint8 as it is, uint16 (65535 is
    white), floats in 0..1 (a single-channel float array outside 0..1 as a float TIFF's).

    Raises:
        UsageError: another shape or dtype, or float colour pixels outside 0..1, in one line
            naming them.
    """
    shape, dtype = "x".join(map(str, array.shape)), array.dtype.name
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[-1] in (1, 3, 4))):
        channels_first = array.ndim == 3 and array.shape[0] in (1, 3, 4)
        layout = "; it looks like (C, H, W): pass array.transpose(1, 2, 0)" if channels_first else ""
        raise UsageError(f"{arg('image', f'{shape} {dtype} array')}: an array is a photo of H x W (x 1, 3 or 4){layout}")
    if array.size == 0:
        raise UsageError(f"{arg('image', f'{shape} {dtype} array')}: the array has no pixels; pass a photo of H x W pixels")
    pixels = array[..., 0] if array.ndim == 3 and array.shape[-1] == 1 else array
    kind = array.dtype.kind
    if dtype == "uint8" or (dtype == "bool" and pixels.ndim == 2):
        return Image.fromarray(np.ascontiguousarray(pixels))
    if dtype == "uint16":
        return Image.fromarray(((pixels.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8))
    if kind != "f":
        raise UsageError(
            f"{arg('image', f'{shape} {dtype} array')}: pixels are uint8 (0..255), uint16 or floats in 0..1, "
            f"not {dtype}; pass array.astype(np.uint8) if they are 0..255"
        )
    finite = pixels[np.isfinite(pixels)]
    clean = finite.size == pixels.size and 0 <= finite.min() and finite.max() <= 1
    if pixels.ndim == 2 and not clean:
        return Image.fromarray(pixels.astype(np.float32), mode="F")  # scaled, or refused, as a float TIFF is
    if not clean:
        span = f"span {finite.min():.4g}..{finite.max():.4g}" if finite.size else "hold no finite value"
        unfinite = " with NaN or infinite values" if 0 < finite.size < pixels.size else ""
        raise UsageError(
            f"{arg('image', f'{shape} {dtype} array')}: float pixels are read in 0..1, but these {span}{unfinite}; "
            "pass array.astype(np.uint8) for 0..255 pixels, or scale them into 0..1"
        )
    return Image.fromarray(np.round(pixels.astype(np.float64) * 255.0).astype(np.uint8))


#: An iPhone's photos: PIL reads them only once pillow-heif registers its opener.
HEIF_SUFFIXES = (".heic", ".heif", ".hif")
_HEIF_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"}


def _is_heif(path: Path) -> bool:
    """Whether a file is a HEIC/HEIF photo (an iPhone's), by its name or its ``ftyp`` box."""
    if path.suffix.lower() in HEIF_SUFFIXES:
        return True
    with contextlib.suppress(OSError), open(path, "rb") as stream:
        head = stream.read(12)
        return head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS
    return False


def _to_loaded(path: Path | None, im: Image.Image, max_pixels: int) -> LoadedSample:
    label = display_path(path) if path is not None else "<image>"
    width, height = im.size
    if width * height > max_pixels:
        raise ImageError(
            f"{label}: {width}x{height} is {width * height:,} pixels, above "
            f"{arg('max_pixels', f'{max_pixels:,}')} (a decompression bomb?); raise it if you trust the file"
        )
    if width < 1 or height < 1:
        raise ImageError(f"{label}: image has no pixels ({width}x{height})")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ImageError(
            f"{label}: {width}x{height} is too thin to resize (aspect ratio above "
            f"{MAX_ASPECT_RATIO}:1); crop it to the region you want explained"
        )
    notes = []
    frames = getattr(im, "n_frames", 1)
    if frames > 1:
        im.seek(0)
        notes.append(f"{label}: first frame of {frames} used")
    im.load()
    im = ImageOps.exif_transpose(im)
    rgb, value_notes = _rgb(im, label)
    return LoadedSample(path=path, rgb=rgb, notes=(*notes, *value_notes))


def _rgb(im: Image.Image, label: str) -> tuple[Image.Image, tuple[str, ...]]:
    """The picture in RGB, and notes on how its values were read when that was a guess."""
    mode = im.mode
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        gray, notes = _gray_to_uint8(np.asarray(im), mode, label)
        return Image.fromarray(gray).convert("RGB"), notes
    if mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
        mode = im.mode
    if mode in ("RGBA", "LA", "PA", "La", "RGBa"):
        # Transparent pixels hold arbitrary colours; show them as a viewer would, over white.
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB"), ()
    return im.convert("RGB"), ()


def _gray_to_uint8(array: np.ndarray, mode: str, label: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Scale high-bit-depth grayscale into 0..255 instead of clipping it, with a note whenever
    the scale is a guess: values outside the mode's usual range, or pixels that are not numbers.

    Raises:
        ImageError: no pixel holds a finite value: there is no picture to explain.
    """
    values = array.astype(np.float64)
    finite = values[np.isfinite(values)]
    if not finite.size:
        raise ImageError(f"{label}: no pixel holds a finite value (all NaN or infinite); there is no picture to explain")
    notes = []
    if finite.size < values.size:
        notes.append(
            f"{label}: {values.size - finite.size:,} of {values.size:,} pixels are NaN or infinite; "
            "shown black (NaN, -inf) or white (+inf)"
        )
    low, high = float(finite.min()), float(finite.max())
    usual = 65535.0 if mode.startswith("I") else 1.0
    if mode.startswith("I;16") or (low >= 0.0 and high <= usual):
        scaled = values / usual  # 16-bit or 0..1 float data, read as it says
    elif high > low:
        scaled = (values - low) / (high - low)
        notes.append(f"{label}: pixel values span {low:.4g}..{high:.4g}, outside 0..{usual:g}; stretched to black..white")
    else:
        scaled = np.zeros_like(values)
        notes.append(f"{label}: every pixel is {low:.4g}, outside 0..{usual:g}; shown as a black image")
    scaled = np.nan_to_num(scaled, nan=0.0, posinf=1.0, neginf=0.0)
    return np.round(np.clip(scaled, 0.0, 1.0) * 255.0).astype(np.uint8), tuple(notes)


# ----------------------------------------------------------------------------- preprocessing


def prepare(image: LoadedSample, preprocessing: Preprocessing, max_pixels: int = DEFAULT_MAX_PIXELS) -> PreparedSample:
    """Resize, crop and normalise a decoded photo into the model's input tensor, or have the
    weights' transform object make it where ``preprocessing`` applies it (``applies_transform``).

    Raises:
        ImageError: resizing would make more than ``max_pixels`` pixels (a huge ``resize``), or
            the transform object failed on the photo.
    """
    if preprocessing.transform is not None and preprocessing.transform.applied:
        return preprocessing.transform.prepare(image, preprocessing)
    import torch

    from hookviz.lazy_dynamo import import_torchvision

    import_torchvision()
    from torchvision.transforms import functional as F

    shown_pil = _resized(image, preprocessing, max_pixels)
    if preprocessing.channels == 1:
        shown_pil = shown_pil.convert("L").convert("RGB")  # shown as the model sees it: grey
    shown = np.asarray(shown_pil, dtype=np.uint8)
    pixels = shown[..., :1] if preprocessing.channels == 1 else shown
    # a contiguous copy, as torchvision's to_tensor makes: the permuted view lies channels-last (a
    # model that calls .view on its input fails on Explanation.image.tensor[None] given back to it),
    # and PIL's pixels are read-only, which torch warns of when a 1x1 view needs no copy to be contiguous
    tensor = torch.from_numpy(pixels.transpose(2, 0, 1).copy()).float().div_(255.0)
    channels = preprocessing.channels
    tensor = F.normalize(tensor, list(preprocessing.mean[:channels]), list(preprocessing.std[:channels]))
    whole = np.asarray(image.rgb, dtype=np.uint8) if preprocessing.mode == "whole" else None
    return PreparedSample(source=image, tensor=tensor, shown=shown, whole=whole)


def _resized(image: LoadedSample, preprocessing: Preprocessing, max_pixels: int) -> Image.Image:
    from torchvision.transforms import functional as F

    mode = preprocessing.mode
    if mode == "whole":
        return image.rgb.resize((preprocessing.size, preprocessing.size), INTERPOLATIONS[preprocessing.interpolation])
    if mode == "original":
        return image.rgb
    width, height = image.rgb.size
    scale = preprocessing.resize / min(width, height)
    resized = round(width * scale) * round(height * scale)
    if resized > max_pixels:
        raise ImageError(
            f"{image.label}: resizing its shorter side to {arg('resize', preprocessing.resize)} makes "
            f"{resized:,} pixels, above {arg('max_pixels', f'{max_pixels:,}')}; choose a smaller resize"
        )
    shorter = F.resize(image.rgb, preprocessing.resize, F.InterpolationMode(preprocessing.interpolation))
    return F.center_crop(shorter, preprocessing.size) if mode == "crop" else shorter


#: Their names in hookviz 0.2, for plug-ins written against it (to go in 0.3).
LoadedImage = LoadedSample
PreparedImage = PreparedSample
