"""Slices: how a map of three spatial dimensions (a clip's T x H x W, a volume's D x H x W)
is laid flat to be drawn: at most ``MAX_SLICES`` slices along its first axis, evenly spaced
(the first and the last always among them), tiled row by row with a one-pixel gap between
tiles, which a map leaves NaN (drawn grey) and a photo fills.

A clip's frames and its CAM, brought to the clip's size, are tiled alike, so the CAM lies
over its frames. ``Tiling.note`` says which slices a picture shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["MAX_SLICES", "Tiling", "tiling", "along_depth", "per_frame"]

#: The most slices a picture shows of a map of three spatial dimensions.
MAX_SLICES = 16


@dataclass(frozen=True)
class Tiling:
    """Where each shown slice lies in the flat picture.

    Attributes:
        depth: the length of the first axis.
        indices: the slices shown, ascending.
        columns: tiles per row.
        tile: each tile's (height, width).
        gap: pixels between tiles.
    """

    depth: int
    indices: tuple[int, ...]
    columns: int
    tile: tuple[int, int]
    gap: int = 1

    @property
    def rows(self) -> int:
        return math.ceil(len(self.indices) / self.columns)

    @property
    def shape(self) -> tuple[int, int]:
        """The flat picture's (height, width)."""
        height, width = self.tile
        return self.rows * (height + self.gap) - self.gap, self.columns * (width + self.gap) - self.gap

    def origin(self, position: int) -> tuple[int, int]:
        """The (top, left) pixel of the ``position``-th shown slice."""
        row, column = divmod(position, self.columns)
        return row * (self.tile[0] + self.gap), column * (self.tile[1] + self.gap)

    def flat(self, slices: np.ndarray, fill) -> np.ndarray:
        """``slices`` (one per shown index, each ``tile`` large, with trailing channels if
        any) tiled flat; ``fill`` between and after the tiles."""
        slices = np.asarray(slices)
        out = np.full((*self.shape, *slices.shape[3:]), fill, dtype=np.result_type(slices.dtype, np.asarray(fill).dtype))
        height, width = self.tile
        for position, piece in enumerate(slices):
            top, left = self.origin(position)
            out[top : top + height, left : left + width] = piece
        return out

    def note(self, axis: str = "the first axis") -> str:
        """Which slices are shown, in words."""
        shown = len(self.indices)
        if shown == self.depth:
            return f"all {self.depth} slices along {axis}, in rows"
        return f"{shown} of {self.depth} slices along {axis}, {self.indices[0]} to {self.indices[-1]} evenly spaced, in rows"

    def brief(self, what: str = "frames") -> str:
        """``note`` in a few words, for a panel's title."""
        shown = len(self.indices)
        return f"all {shown} {what}, in rows" if shown == self.depth else f"{shown} of {self.depth} {what}, in rows"


def tiling(shape: tuple[int, int, int], limit: int = MAX_SLICES) -> Tiling:
    """The tiling of a (depth, height, width) map: ``limit`` slices at most, in a grid
    about as wide as tall."""
    depth, height, width = shape
    count = min(depth, limit)
    indices = tuple(sorted({round(i * (depth - 1) / max(count - 1, 1)) for i in range(count)}))
    count = len(indices)
    # Columns that make the picture closest to square.
    columns = min(range(1, count + 1), key=lambda c: abs(math.log((c * width) / (math.ceil(count / c) * height))))
    return Tiling(depth, indices, columns, (height, width))


def along_depth(volume: np.ndarray, depth: int, indices: tuple[int, ...]) -> np.ndarray:
    """The slices of ``volume`` (d, h, w) at ``indices`` of a first axis ``depth`` long, as
    trilinear resizing with ``align_corners=False`` (torch-cam's) reads them along it: each
    the linear blend of the two nearest of its ``d`` slices."""
    volume = np.asarray(volume, dtype=np.float64)
    given = volume.shape[0]
    where = np.clip((np.asarray(indices, dtype=np.float64) + 0.5) * given / depth - 0.5, 0, given - 1)
    low = np.floor(where).astype(int)
    high = np.minimum(low + 1, given - 1)
    weight = (where - low)[:, None, None]
    return volume[low] * (1 - weight) + volume[high] * weight


def per_frame(volume: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """A (T', H', W') map read at each of a clip's ``count`` frames (``along_depth``: a map of
    a model with a temporal stride over 1 blends its two nearest slices at each frame), at the
    map's own size: each frame's peak (its largest finite value, NaN where it has none) and
    its mass (the sum of its finite values)."""
    slices = along_depth(volume, count, tuple(range(count)))
    finite = np.isfinite(slices)
    mass = np.where(finite, slices, 0.0).sum(axis=(1, 2))
    peak = np.where(finite, slices, -np.inf).max(axis=(1, 2))
    return np.where(finite.any(axis=(1, 2)), peak, np.nan), mass
