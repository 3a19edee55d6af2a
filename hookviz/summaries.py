"""Summaries: reduce a layer's tensors to what the pictures, reports and checks need.

A layer's four tensors can be large (all 53 convolutions of resnet50 hold about 160 MB per
image); the pictures need only channel sums, a few channel tiles and the CAM, the report
only statistics. Reducing each layer as soon as its gradients exist keeps memory flat
however many images and layers a run has, and keeps what crosses to the rendering workers small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import UsageError
from .featuremaps import as_feature_map

TENSOR_KEYS = ("input", "output", "grad_input", "grad_output")


@dataclass(frozen=True)
class ChannelTiles:
    """The channels a grid shows: their indices, maps (k, h, w) and the layer's channel count."""

    indices: tuple[int, ...]
    maps: np.ndarray
    total: int


def tensor_stats(array: np.ndarray | None) -> dict | None:
    """min, max, mean and std of the finite values; how many values are not finite; the fraction of zeros."""
    if array is None:
        return None
    values = np.asarray(array)
    mask = np.isfinite(values)
    finite = values if mask.all() else values[mask]  # no copy in the usual case
    stats: dict = {"nonfinite": int(values.size - finite.size)}
    if finite.size:
        stats.update(  # accumulated in float64 whatever the tensor's dtype
            min=float(finite.min()), max=float(finite.max()),
            mean=float(finite.mean(dtype=np.float64)), std=float(finite.std(dtype=np.float64)),
        )
    else:
        stats.update(min=None, max=None, mean=None, std=None)
    stats["zero_fraction"] = float((values == 0).mean()) if values.size else 1.0
    return stats


def channel_sum(array: np.ndarray | None, input_hw: Sequence[int]) -> np.ndarray | None:
    """The seeds' picture of a tensor: channels summed into a 2-D map (a 1-D vector for
    outputs with no spatial layout)."""
    if array is None:
        return None
    spatial = as_feature_map(array, tuple(input_hw))
    if spatial is not None:
        return np.asarray(spatial[0], dtype=np.float32).sum(axis=0)
    flat = np.asarray(array[0], dtype=np.float32)
    return flat.reshape(-1) if flat.ndim <= 1 else flat.reshape(flat.shape[0], -1).sum(axis=0)


def parse_channels(text: str | int | Sequence[int]) -> int | list[int]:
    """``64`` -> 64 (the most active N); ``0-15`` and ``3,7,9`` -> explicit indices.

    Raises:
        UsageError: the text is not of one of those forms.
    """
    if isinstance(text, int):
        return text
    if not isinstance(text, str):
        return list(text)
    text = text.strip()
    try:
        if text.isdigit():
            return int(text)
        indices: list[int] = []
        for part in text.split(","):
            if "-" in part:
                start, end = (int(v) for v in part.split("-", 1))
                if end < start:
                    raise ValueError
                indices.extend(range(start, end + 1))
            else:
                indices.append(int(part))
        return indices
    except ValueError:
        raise UsageError(f"--channels {text!r}: expected a count (64), a range (0-15) or a list (3,7,9)") from None


def select_channels(maps: np.ndarray, spec: str | int | Sequence[int] = 64) -> list[int]:
    """Which of ``maps`` (C, h, w) a grid shows: the N with the largest mean, or the listed ones."""
    count = maps.shape[0]
    spec = parse_channels(spec)
    if isinstance(spec, int):
        order = np.argsort(-maps.reshape(count, -1).mean(axis=1), kind="stable")
        return sorted(int(c) for c in order[: min(spec, count)])
    return [c for c in spec if 0 <= c < count]


def channel_tiles(
    array: np.ndarray | None, input_hw: Sequence[int], spec: str | int | Sequence[int], by_magnitude: bool = False
) -> ChannelTiles | None:
    """The tiles of a channel grid, or ``None`` when the tensor has no spatial layout.

    Gradients (``by_magnitude``) are ranked by mean absolute value, activations by mean value.
    """
    if array is None:
        return None
    spatial = as_feature_map(array, tuple(input_hw))
    if spatial is None:
        return None
    maps = np.asarray(spatial[0], dtype=np.float32)
    chosen = select_channels(np.abs(maps) if by_magnitude else maps, spec)
    if not chosen:
        return None
    return ChannelTiles(indices=tuple(chosen), maps=maps[chosen].copy(), total=maps.shape[0])


def histogram(array: np.ndarray | None, bins: int = 64) -> dict | None:
    """A histogram of the finite values, in the fields TensorBoard's ``add_histogram_raw`` takes."""
    if array is None:
        return None
    values = np.asarray(array, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    counts, edges = np.histogram(values, bins=bins)
    return {
        "min": float(values.min()),
        "max": float(values.max()),
        "num": int(values.size),
        "sum": float(values.sum()),
        "sum_squares": float((values**2).sum()),
        "bucket_limits": edges[1:].tolist(),
        "bucket_counts": counts.tolist(),
    }
