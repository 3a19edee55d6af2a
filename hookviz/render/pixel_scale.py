"""How a map at the input's resolution is scaled for its picture, as captum's
``visualize_image_attr`` scales it: the map summed over the input's channels, the sign chosen
(``absolute``: |v|, captum's default; ``positive``: max(v, 0); ``all``: v), then divided by a
threshold above which the largest values (``clip`` per cent of the map's total |v|, 2 by
default) are clipped to 1: a handful of extreme pixels no longer sets the scale of all the rest.

The threshold is captum's ``_cumulative_sum_threshold``: the smallest |v| at which the running
sum of the sorted |v| reaches ``100 - clip`` per cent of their total; not a percentile of the
values' count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hookviz.options.pictures import DEFAULT_CLIP, PIXEL_SIGNS

__all__ = ["DEFAULT_CLIP", "PIXEL_SIGNS", "Scaled", "clip_threshold", "scaled"]


@dataclass(frozen=True)
class Scaled:
    """A map scaled for its picture.

    Attributes:
        values: (H, W) in [-1, 1] (``all``) or [0, 1]; NaN where the map was not finite.
        threshold: the |value| drawn as 1 (and above it, clipped); 0 for a map of zeros.
        clipped: the share of finite pixels at or above the threshold.
    """

    values: np.ndarray
    threshold: float
    clipped: float


def clip_threshold(magnitudes: np.ndarray, percentile: float) -> float:
    """The smallest of ``magnitudes`` (>= 0) at which their cumulative sum, smallest first,
    reaches ``percentile`` per cent of their total (captum's ``_cumulative_sum_threshold``)."""
    ordered = np.sort(magnitudes.ravel())
    if ordered.size == 0:
        return 0.0
    sums = np.cumsum(ordered, dtype=np.float64)
    reached = np.nonzero(sums >= sums[-1] * 0.01 * percentile)[0]
    # at 100 per cent the product may round past the total itself (captum then fails): the largest
    return float(ordered[reached[0]] if reached.size else ordered[-1])


def scaled(channels: np.ndarray, sign: str = "absolute", clip: float = DEFAULT_CLIP) -> Scaled:
    """``channels`` (C, H, W), or (H, W) already summed, scaled as the module says."""
    summed = channels.sum(axis=0) if channels.ndim == 3 else channels
    summed = summed.astype(np.float64)
    finite = np.isfinite(summed)
    kept = np.where(finite, summed, 0.0)
    if sign == "absolute":
        kept = np.abs(kept)
    elif sign == "positive":
        kept = np.maximum(kept, 0.0)
    threshold = clip_threshold(np.abs(kept), 100.0 - clip)
    if threshold == 0:  # a map of zeros (of this sign): nothing to scale
        values = np.zeros_like(kept)
        clipped = 0.0
    else:
        values = np.clip(kept / threshold, -1.0, 1.0)
        clipped = float((np.abs(kept[finite]) >= threshold).mean()) if finite.any() else 0.0
    return Scaled(np.where(finite, values, np.nan), threshold, clipped)
