"""Fingerprints: what a run keeps of each image so that a later run can be compared with it.

Every run writes ``fingerprint.npz`` beside ``report.json``, with or without
``--save-tensors``: a few KB per image and layer, small enough to commit as a CI baseline
(``hookviz run --baseline``, ``hookviz diff``). All arrays are float32:

* ``logits``: the model's scores, all of them;
* ``model_input/map``, ``model_input/channels``: the preprocessed input summed over its
  channels and area-averaged onto at most ``MAP_SIDE`` x ``MAP_SIDE``, and each channel's mean;
* ``<layer>/<tensor>/map``, ``<layer>/<tensor>/channels`` for each recorded tensor (``input``,
  ``output``, ``grad_input``, ``grad_output``): the same two summaries. A tensor without a
  spatial layout (a classifier's vector) keeps its values area-averaged into at most
  ``VECTOR_LENGTH``, and no channel means;
* ``<layer>/cam``: the raw CAM at the layer's resolution (area-averaged where a side is
  longer than ``CAM_SIDE``).

A signal's maps (one spatial dimension) are kept as vectors are, at most ``VECTOR_LENGTH``
long; a clip's (three) at most ``MAP_SIDE`` on each of their sides.

Per-channel means are averaged in groups down to at most ``PROFILE_LENGTH`` values. They are
kept beside the channel sum because a layer with a 1x1 map (a global pool) sums to a single
number, which would hide which channels changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from hookviz.explaining.summaries import TENSOR_KEYS

__all__ = [
    "FINGERPRINT",
    "FORMAT",
    "MAP_SIDE",
    "CAM_SIDE",
    "PROFILE_LENGTH",
    "VECTOR_LENGTH",
    "TensorPrint",
    "LayerPrint",
    "Fingerprint",
    "area_mean",
    "fingerprint_of",
    "write_fingerprint",
    "read_fingerprint",
    "looks_whole",
    "description",
]

FINGERPRINT = "fingerprint.npz"
#: Bumped when the arrays change meaning; a reader skips a fingerprint of a format it does not know.
FORMAT = 1
MAP_SIDE = 16
CAM_SIDE = 32
PROFILE_LENGTH = 64
VECTOR_LENGTH = 256


@dataclass(frozen=True)
class TensorPrint:
    """One tensor, summarised: ``map`` (2-D channel sum, or 1-D vector) and ``channels``
    (per-channel means), each area-averaged; either may be ``None``."""

    map: np.ndarray | None = None
    channels: np.ndarray | None = None


@dataclass(frozen=True)
class LayerPrint:
    """One recorded layer call: a ``TensorPrint`` per recorded tensor, and its raw CAM."""

    tensors: dict = field(default_factory=dict)
    cam: np.ndarray | None = None


@dataclass(frozen=True)
class Fingerprint:
    """What one image's run keeps for later comparison (see the module's docstring)."""

    logits: np.ndarray | None
    model_input: TensorPrint
    layers: dict = field(default_factory=dict)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays as ``fingerprint.npz`` names them."""
        named: dict[str, np.ndarray | None] = {"logits": self.logits}
        named.update(_tensor_arrays("model_input", self.model_input))
        for name, layer in self.layers.items():
            for key, tensor in layer.tensors.items():
                named.update(_tensor_arrays(f"{name}/{key}", tensor))
            named[f"{name}/cam"] = layer.cam
        return {key: np.asarray(value, dtype=np.float32) for key, value in named.items() if value is not None}


def _tensor_arrays(prefix: str, tensor: TensorPrint) -> dict:
    return {f"{prefix}/map": tensor.map, f"{prefix}/channels": tensor.channels}


def description() -> dict:
    """The ``fingerprint`` entry of ``report.json``: the file and how it was made."""
    return {
        "file": FINGERPRINT,
        "format": FORMAT,
        "map_side": MAP_SIDE,
        "cam_side": CAM_SIDE,
        "profile_length": PROFILE_LENGTH,
        "vector_length": VECTOR_LENGTH,
    }


# ----------------------------------------------------------------------------- making one


def area_mean(values: np.ndarray, limit: int) -> np.ndarray:
    """``values`` (1-D or 2-D) averaged over areas, at most ``limit`` per side.

    A side of length n becomes ``ceil(n / ceil(n / limit))`` bins: exact blocks of
    ``ceil(n / limit)`` where that divides n (224 -> 16, 56 -> 14, 7 stays 7), otherwise
    the overlapping bins of torch's adaptive average pooling. A bin holding a NaN or an
    infinity is NaN, so a non-finite value stays visible without spreading to its neighbours.
    """
    result = np.asarray(values, dtype=np.float64)
    for axis in range(result.ndim):
        size = result.shape[axis]
        bins = -(-size // -(-size // limit)) if size else 0
        if bins == size:
            continue
        starts = (np.arange(bins) * size) // bins
        ends = -(-(np.arange(1, bins + 1) * size) // bins)
        finite = np.isfinite(result)
        sums = _cumulative(np.where(finite, result, 0.0), axis)
        holes = _cumulative((~finite).astype(np.float64), axis)
        total = np.take(sums, ends, axis) - np.take(sums, starts, axis)
        shape = [1] * result.ndim
        shape[axis] = bins
        result = total / (ends - starts).reshape(shape)
        result[(np.take(holes, ends, axis) - np.take(holes, starts, axis)) > 0] = np.nan
    return result.astype(np.float32)


def _cumulative(values: np.ndarray, axis: int) -> np.ndarray:
    """Sums of the first 0, 1, ..., n entries along ``axis``."""
    padding = [(0, 0)] * values.ndim
    padding[axis] = (1, 0)
    return np.pad(np.cumsum(values, axis=axis), padding)


def _tensor_print(channel_sum: np.ndarray | None, profile: np.ndarray | None) -> TensorPrint:
    if channel_sum is None:
        return TensorPrint()
    limit = VECTOR_LENGTH if np.ndim(channel_sum) == 1 else MAP_SIDE  # a clip's map: MAP_SIDE on each of its sides
    channels = None if profile is None else area_mean(profile, PROFILE_LENGTH)
    return TensorPrint(area_mean(channel_sum, limit), channels)


def fingerprint_of(explanation) -> Fingerprint:
    """The fingerprint of one explained image (needs no full tensors: the channel sums and
    per-channel means every explanation keeps are enough)."""
    image = np.asarray(explanation.image.tensor, dtype=np.float32)  # (C, H, W), normalised
    # Accumulated in float64: numpy sums a float32 row in an order that depends on its
    # memory layout, and a run must not drift from itself.
    means = image.reshape(image.shape[0], -1).mean(axis=1, dtype=np.float64)
    model_input = _tensor_print(image.sum(axis=0, dtype=np.float64), means)
    layers = {}
    for layer in explanation.layers:
        profiles = getattr(layer, "profiles", None) or {}
        tensors = {
            key: _tensor_print(layer.maps.get(key), profiles.get(key)) for key in TENSOR_KEYS if layer.maps.get(key) is not None
        }
        cam = None if layer.cam is None else area_mean(layer.cam, CAM_SIDE)
        layers[layer.name] = LayerPrint(tensors, cam)
    return Fingerprint(np.asarray(explanation.logits, dtype=np.float32).reshape(-1), model_input, layers)


def write_fingerprint(fingerprint: Fingerprint, stream: BinaryIO) -> None:
    """Write ``fingerprint.npz`` into ``stream`` (zip-compressed: a dead layer's zeros cost nothing)."""
    np.savez_compressed(stream, **fingerprint.arrays())


_ZIP_START, _ZIP_END = b"PK\x03\x04", b"PK\x05\x06"  # numpy's archives end without a comment


def looks_whole(path) -> bool:
    """Whether ``path`` begins and ends as a whole .npz archive does (two small reads: what
    ``--skip-existing`` asks of every image it skips). Raises nothing."""
    try:
        with open(path, "rb") as stream:
            start = stream.read(4)
            stream.seek(0, 2)
            if stream.tell() < 26:
                return False
            stream.seek(-22, 2)
            return start == _ZIP_START and stream.read(4) == _ZIP_END
    except OSError:
        return False


def read_fingerprint(path, layer_names: Sequence[str]) -> Fingerprint:
    """The fingerprint in ``path`` for the layers ``layer_names`` (those its report lists).

    Raises:
        OSError, ValueError (``zipfile.BadZipFile`` is one): the file is missing or corrupt.
    """
    import zipfile
    import zlib

    if not looks_whole(path):  # numpy would take any other bytes for a pickle it refuses to load
        open(path, "rb").close()  # a missing file says so (OSError)
        raise ValueError("not a whole .npz archive: truncated, or other bytes")
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {key: np.asarray(stored[key]) for key in stored.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, KeyError) as exc:
        raise ValueError(f"not a complete fingerprint archive ({type(exc).__module__}.{type(exc).__name__})") from None
    if not isinstance(arrays, dict) or any(value.dtype.kind != "f" for value in arrays.values()):
        raise ValueError("holds arrays that are not floating point")
    if "logits" not in arrays or "model_input/map" not in arrays:
        raise ValueError("holds no fingerprint of a hookviz run (no logits, no model input)")
    missing = [name for name in layer_names if not any(key.startswith(f"{name}/") for key in arrays)]
    if missing:
        raise ValueError(f"holds nothing of the layers its report lists ({', '.join(missing[:3])})")

    def tensor(prefix: str) -> TensorPrint:
        return TensorPrint(arrays.get(f"{prefix}/map"), arrays.get(f"{prefix}/channels"))

    layers = {
        name: LayerPrint(
            {key: tensor(f"{name}/{key}") for key in TENSOR_KEYS if f"{name}/{key}/map" in arrays},
            arrays.get(f"{name}/cam"),
        )
        for name in layer_names
    }
    return Fingerprint(arrays.get("logits"), tensor("model_input"), layers)
