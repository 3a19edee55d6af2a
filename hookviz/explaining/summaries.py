"""Summaries: reduce a layer's tensors to what the pictures, reports and checks need.

A layer's four tensors can be large (all 53 convolutions of resnet50 hold about 160 MB per
image); the pictures need only channel sums, a few channel tiles and the CAM, the report
only statistics. Reducing each layer as soon as its gradients exist keeps memory flat
however many images and layers a run has, and keeps what crosses to the rendering workers small.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hookviz.anatomy.featuremaps import Layout, reshape
from hookviz.errors import arg
from hookviz.options import MAX_TILES, ChannelSelection

__all__ = ["TENSOR_KEYS", "ChannelTiles", "tensor_stats", "channel_sum", "select_channels", "channel_tiles", "histogram"]

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
            min=float(finite.min()),
            max=float(finite.max()),
            mean=float(finite.mean(dtype=np.float64)),
            std=float(finite.std(dtype=np.float64)),
        )
    else:
        stats.update(min=None, max=None, mean=None, std=None)
    stats["zero_fraction"] = float((values == 0).mean()) if values.size else 1.0
    return stats


def channel_sum(array: np.ndarray | None, layout: Layout | None) -> np.ndarray | None:
    """A tensor's channels summed into one 2-D map, as the usual hook snippets plot it
    (a 1-D vector for outputs with no spatial layout, ``None`` for an ambiguous one).
    ``layout``: how the tensor lies (``featuremaps.layout_of``)."""
    if array is None or (layout is not None and not layout.spatial):
        return None
    spatial = reshape(array, layout)
    if spatial is not None:
        return np.asarray(spatial[0], dtype=np.float32).sum(axis=0)
    flat = np.asarray(array[0], dtype=np.float32)
    return flat.reshape(-1) if flat.ndim <= 1 else flat.reshape(flat.shape[0], -1).sum(axis=0)


def channel_profile(array: np.ndarray | None, layout: Layout | None) -> np.ndarray | None:
    """Each channel's mean over the map, (C,) float32, or ``None`` for a tensor without
    spatial layout (its channel sum is the vector itself). A baseline keeps it beside the
    channel sum: a layer with a 1x1 map (a global pool) sums to one number, which hides
    which channels changed."""
    spatial = reshape(array, layout)
    if spatial is None:
        return None
    maps = np.asarray(spatial[0], dtype=np.float32)
    return maps.reshape(maps.shape[0], -1).mean(axis=1, dtype=np.float64).astype(np.float32)


def select_channels(maps: np.ndarray, selection: ChannelSelection) -> tuple[list[int], str | None]:
    """Which of ``maps`` (C, h, w) a grid shows: the most active ones (largest mean), or the
    listed ones that exist, at most ``MAX_TILES``.

    Returns:
        The channel indices, ascending for a count and in the order listed otherwise, and a
        note when the selection had to be cut or found nothing.
    """
    count = maps.shape[0]
    if selection.count is not None:
        order = np.argsort(-maps.reshape(count, -1).mean(axis=1), kind="stable")
        shown = min(selection.count, count, MAX_TILES)
        note = None
        if selection.count > MAX_TILES and count > MAX_TILES:
            note = f"{arg('channels', selection)}: the grid shows the {MAX_TILES} most active of {count} channels"
        return sorted(int(c) for c in order[:shown]), note
    chosen = selection.indices(count)
    if not chosen:
        return [], (
            f"{arg('channels', selection)}: the layer has {count} channels (0-{count - 1}), "
            "none of those asked for; no channel grid drawn"
        )
    if len(chosen) > MAX_TILES:
        return chosen[:MAX_TILES], f"{arg('channels', selection)}: the grid shows the first {MAX_TILES} of them"
    return chosen, None


def channel_tiles(
    array: np.ndarray | None,
    layout: Layout | None,
    selection: ChannelSelection,
    by_magnitude: bool = False,
) -> tuple[ChannelTiles | None, str | None]:
    """The tiles of a channel grid (``None`` when the tensor has no spatial layout, an
    ambiguous one, or no channel was selected), and a note when the selection was cut or empty.

    Gradients (``by_magnitude``) are ranked by mean absolute value, activations by mean value.
    """
    spatial = reshape(array, layout)
    if spatial is None:
        return None, None
    maps = np.asarray(spatial[0], dtype=np.float32)
    chosen, note = select_channels(np.abs(maps) if by_magnitude else maps, selection)
    if not chosen:
        return None, note
    return ChannelTiles(indices=tuple(chosen), maps=maps[chosen].copy(), total=maps.shape[0]), note


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
