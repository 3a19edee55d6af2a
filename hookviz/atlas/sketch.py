"""Quantiles of a channel's maximum over a stream: a mergeable log-bucket sketch.

The sketch is DDSketch's (Masson, Rim and Lee, VLDB 2019) with a fixed set of buckets:
a value ``x`` with ``MIN_MAGNITUDE <= |x| <= MAX_MAGNITUDE`` counts in bucket
``ceil(log_gamma |x|)`` of its sign, ``gamma = (1 + ALPHA) / (1 - ALPHA)``, and a quantile read
from it is within a relative error of ``ALPHA`` (1%) of the exact sample quantile. Smaller
magnitudes count as zero, larger ones in the last bucket. Counts only add, so shards merge
exactly, in any order, into the single run's sketch.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ALPHA", "MaxSketch"]

#: The relative accuracy of every quantile the sketch answers.
ALPHA = 0.01
MIN_MAGNITUDE, MAX_MAGNITUDE = 1e-6, 1e6

_GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(_GAMMA)
_LOW = math.ceil(math.log(MIN_MAGNITUDE) / _LOG_GAMMA)
_HIGH = math.ceil(math.log(MAX_MAGNITUDE) / _LOG_GAMMA)
_SIDE = _HIGH - _LOW + 1  # buckets per sign
BUCKETS = 2 * _SIDE + 1  # negatives (largest magnitude first), zero, positives


def _bucket_values() -> np.ndarray:
    magnitudes = 2 * _GAMMA ** np.arange(_LOW, _HIGH + 1) / (_GAMMA + 1)
    return np.concatenate([-magnitudes[::-1], [0.0], magnitudes])


#: The value each bucket stands for (within ALPHA of every value it counted).
VALUES = _bucket_values()


class MaxSketch:
    """Per channel, the counts of its values (a sample's maximum) in ``BUCKETS`` buckets."""

    def __init__(self, channels: int, counts: np.ndarray | None = None):
        self.counts = np.zeros((channels, BUCKETS), dtype=np.int64) if counts is None else counts.astype(np.int64)

    @staticmethod
    def buckets(values: np.ndarray) -> np.ndarray:
        """The bucket of each value."""
        magnitude = np.clip(np.abs(values), MIN_MAGNITUDE, MAX_MAGNITUDE)
        index = np.clip(np.ceil(np.log(magnitude) / _LOG_GAMMA).astype(np.int64) - _LOW, 0, _SIDE - 1)
        index = np.where(values > 0, _SIDE + 1 + index, _SIDE - 1 - index)
        return np.where(np.abs(values) < MIN_MAGNITUDE, _SIDE, index)

    def add(self, values: np.ndarray) -> None:
        """Count ``values`` of shape (B, C): one value per sample and channel (NaN is left out)."""
        rows, channels = values.shape
        finite = ~np.isnan(values)
        flat = (np.arange(channels)[None, :] * BUCKETS + self.buckets(np.nan_to_num(values)))[finite]
        self.counts += np.bincount(flat, minlength=channels * BUCKETS).reshape(channels, BUCKETS)

    def merge(self, other: "MaxSketch") -> None:
        self.counts += other.counts

    def quantile(self, channel: int, q: float) -> float | None:
        """The ``q`` quantile of the channel's values (``None`` when it counted none)."""
        counts = self.counts[channel]
        total = int(counts.sum())
        if total == 0:
            return None
        # the nearest rank (numpy's method="nearest"): over few samples the lower one made a
        # channel's q99 its smallest maximum (2 samples: q50 = q90 = q99 = the lesser one)
        rank = int(np.around(q * (total - 1)))
        return float(VALUES[int(np.searchsorted(np.cumsum(counts), rank, side="right"))])

    def histogram(self, channel: int, low: float, high: float, bins: int) -> np.ndarray:
        """The channel's counts regrouped into ``bins`` equal bins from ``low`` to ``high``."""
        counts = self.counts[channel]
        filled = counts > 0
        if high <= low:
            return np.array([counts.sum()] + [0] * (bins - 1))
        where = np.clip(((VALUES[filled] - low) / (high - low) * bins).astype(np.int64), 0, bins - 1)
        return np.bincount(where, weights=counts[filled], minlength=bins).astype(np.int64)
