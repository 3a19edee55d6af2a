"""A channel's statistics over the dataset, streamed: its mean, how often it is dead, the
quantiles of its maximum (``sketch``) and its mean maximum per class (class selectivity).

Everything is a sum or a count, so the shards' statistics add up to the single run's (the
float sums to rounding, in float64).
"""

from __future__ import annotations

import numpy as np

from hookviz.atlas.sketch import MaxSketch

__all__ = ["ChannelStatistics", "QUANTILES", "CLASSES_SHOWN"]

#: The quantiles of the maximum atlas.json gives.
QUANTILES = (0.5, 0.9, 0.99)

#: The classes a channel lists, those it fires for most.
CLASSES_SHOWN = 5


class ChannelStatistics:
    """Running sums per channel. ``count``: samples seen; ``sums``: of each sample's spatial mean;
    ``dead``: samples whose map never rose above 0; ``low``/``high``: the smallest and largest
    maximum; ``classes``: per class, ``[sum of maxima per channel, samples]``."""

    def __init__(self, channels: int):
        self.count = 0
        self.sums = np.zeros(channels)
        self.dead = np.zeros(channels, dtype=np.int64)
        self.low = np.full(channels, np.inf)
        self.high = np.full(channels, -np.inf)
        self.sketch = MaxSketch(channels)
        self.classes: dict[str, list] = {}

    @property
    def channels(self) -> int:
        return self.sums.shape[0]

    def update(self, maxima: np.ndarray, means: np.ndarray, classes: list[str | None]) -> None:
        """One batch: ``maxima`` and ``means`` of shape (B, C); each sample's class or ``None``."""
        self.count += maxima.shape[0]
        self.sums += means.sum(axis=0)
        self.dead += (maxima <= 0).sum(axis=0)
        self.low = np.fmin(self.low, maxima.min(axis=0))
        self.high = np.fmax(self.high, maxima.max(axis=0))
        self.sketch.add(maxima)
        for row, name in enumerate(classes):
            if name is not None:
                entry = self.classes.setdefault(name, [np.zeros(self.channels), 0])
                entry[0] += maxima[row]
                entry[1] += 1

    def merge(self, other: "ChannelStatistics") -> None:
        self.count += other.count
        self.sums += other.sums
        self.dead += other.dead
        self.low, self.high = np.fmin(self.low, other.low), np.fmax(self.high, other.high)
        self.sketch.merge(other.sketch)
        for name, (sums, count) in other.classes.items():
            entry = self.classes.setdefault(name, [np.zeros(self.channels), 0])
            entry[0] += sums
            entry[1] += count

    def summary(self, channel: int) -> dict:
        """The channel's ``stats`` as atlas.json gives them."""
        count = max(self.count, 1)
        return {
            "mean": float(self.sums[channel] / count),
            "dead": float(self.dead[channel] / count),
            "max_quantiles": {str(q): self.sketch.quantile(channel, q) for q in QUANTILES},
            "max_range": [_finite(self.low[channel]), _finite(self.high[channel])],
            "classes": self._classes(channel)[:CLASSES_SHOWN],
            "selectivity": self._selectivity(channel),
        }

    def _classes(self, channel: int) -> list[dict]:
        rows = [
            {"class": name, "mean_max": float(sums[channel] / count), "count": int(count)}
            for name, (sums, count) in self.classes.items()
            if count
        ]
        return sorted(rows, key=lambda row: (-row["mean_max"], row["class"]))

    def _selectivity(self, channel: int) -> float | None:
        """Morcos et al. (2018): (mean max of its best class - mean over the other classes) / their sum,
        each class's mean taken as 0 where it is below 0: the formula is for units that fire (values
        above 0, as after a ReLU), and a layer whose values go negative would otherwise give figures
        above 1. Between 0 and 1; ``None`` with fewer than two classes or where no class fires."""
        means = np.maximum([row["mean_max"] for row in self._classes(channel)], 0.0)
        if means.size < 2:
            return None
        best, rest = float(means[0]), float(np.mean(means[1:]))
        return None if best + rest <= 0 else (best - rest) / (best + rest)


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
