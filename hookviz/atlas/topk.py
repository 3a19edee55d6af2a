"""The running top-K of every channel of a layer: O(channels x K) memory whatever the dataset.

Examples are ordered by score, highest first, and equal scores by the sample's place in the
whole run's list, so the top-K does not depend on how the samples were batched or sharded:
merging the shards' top-K gives the single run's exactly.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TopK"]

_EMPTY = -1  # the sample id of a slot not filled yet


class TopK:
    """Per channel, the ``k`` best ``scores`` (float64), their ``samples`` (ids: places in the
    run's list of samples, ``-1`` for an empty slot) and ``peaks`` (flat grid positions)."""

    def __init__(self, channels: int, k: int):
        self.scores = np.full((channels, k), -np.inf)
        self.samples = np.full((channels, k), _EMPTY, dtype=np.int64)
        self.peaks = np.zeros((channels, k), dtype=np.int64)

    @property
    def k(self) -> int:
        return self.scores.shape[1]

    @classmethod
    def of_arrays(cls, scores: np.ndarray, samples: np.ndarray, peaks: np.ndarray) -> "TopK":
        top = cls(scores.shape[0], scores.shape[1])
        top.scores, top.samples, top.peaks = scores.astype(np.float64), samples.astype(np.int64), peaks.astype(np.int64)
        return top

    def update(self, scores: np.ndarray, ids: np.ndarray, peaks: np.ndarray) -> None:
        """Take a batch: ``scores`` and ``peaks`` of shape (B, C), ``ids`` the B samples' ids."""
        ids = np.broadcast_to(np.asarray(ids, dtype=np.int64)[None, :], (scores.shape[1], scores.shape[0]))
        self._keep(scores.T, ids, peaks.T)

    def merge(self, other: "TopK") -> None:
        """Take another part's top-K (a shard's, or a resumed run's)."""
        self._keep(other.scores, other.samples, other.peaks)

    def _keep(self, scores: np.ndarray, ids: np.ndarray, peaks: np.ndarray) -> None:
        scores = np.where(np.isnan(scores), -np.inf, scores)  # a NaN map never ranks
        all_scores = np.concatenate([self.scores, scores], axis=1)
        all_ids = np.concatenate([self.samples, ids], axis=1)
        all_peaks = np.concatenate([self.peaks, peaks], axis=1)
        # an empty slot sorts after every sample; ties go to the earlier sample
        order_ids = np.where(all_ids == _EMPTY, np.iinfo(np.int64).max, all_ids)
        order = np.lexsort((order_ids, -all_scores), axis=1)[:, : self.k]
        self.scores = np.take_along_axis(all_scores, order, axis=1)
        self.samples = np.take_along_axis(all_ids, order, axis=1)
        self.peaks = np.take_along_axis(all_peaks, order, axis=1)

    def ranked(self, channel: int) -> list[tuple[int, float, int]]:
        """The channel's filled slots, best first: ``(sample id, score, peak)``."""
        return [
            (int(s), float(v), int(p))
            for s, v, p in zip(self.samples[channel], self.scores[channel], self.peaks[channel])
            if s != _EMPTY
        ]
