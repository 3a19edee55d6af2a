"""Feature maps: see any layer output as (batch, channels, height, width).

Convolution layers already are. Transformer layers are not: a ViT block outputs
(batch, tokens, channels) with a class token first, and Swin outputs channels-last
(batch, height, width, channels). Both are reshaped onto the patch grid, whose shape is
inferred from the token count and the input's aspect ratio.
"""

from __future__ import annotations

import math


def patch_grid(tokens: int, input_hw: tuple[int, int]) -> tuple[int, int] | None:
    """The (rows, cols) grid with ``rows * cols == tokens`` closest to the input's aspect ratio."""
    height, width = input_hw
    aspect = height / width
    best = None
    for rows in range(1, tokens + 1):
        if tokens % rows:
            continue
        cols = tokens // rows
        error = abs(math.log((rows / cols) / aspect))
        if best is None or error < best[0]:
            best = (error, rows, cols)
    if best is None or best[0] > math.log(1.5):
        return None
    return best[1], best[2]


def as_feature_map(tensor, input_hw: tuple[int, int]):
    """Return ``tensor`` as (N, C, h, w), or ``None`` if it has no spatial layout.

    Args:
        tensor: a recorded output or gradient, batch first (a torch tensor or numpy array).
        input_hw: the model input's (height, width), used to recognise the layout.
    """
    if tensor is None:
        return None
    if tensor.ndim == 4:
        n, a, b, c = tensor.shape
        if _matches(a, b, input_hw) and not _matches(b, c, input_hw) and c > a:
            return _transpose(tensor, (0, 3, 1, 2))  # channels-last (Swin)
        return tensor
    if tensor.ndim == 3:
        n, tokens, channels = tensor.shape
        for skip in (0, 1):  # with or without a class token in front
            grid = patch_grid(tokens - skip, input_hw) if tokens - skip > 1 else None
            if grid is not None and (skip == 1 or _is_square_like(grid)):
                rows, cols = grid
                return _transpose(tensor[:, skip:, :].reshape(n, rows, cols, channels), (0, 3, 1, 2))
        return None
    return None


def _matches(rows: int, cols: int, input_hw: tuple[int, int]) -> bool:
    height, width = input_hw
    return rows > 0 and cols > 0 and abs(math.log((rows / cols) / (height / width))) < math.log(1.5)


def _is_square_like(grid: tuple[int, int]) -> bool:
    rows, cols = grid
    return rows > 1 and cols > 1


def _transpose(array, axes):
    return array.permute(*axes) if hasattr(array, "permute") else array.transpose(axes)
