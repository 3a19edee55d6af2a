"""Feature maps: see any layer output as (batch, channels, height, width).

Convolution layers already are. Transformer layers are not: a ViT block outputs
(batch, tokens, channels) with a class token first, and Swin outputs channels-last
(batch, height, width, channels). Both are reshaped onto the patch grid, whose shape is
inferred from the token count and the input's aspect ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Layout", "layout_of", "token_layout", "as_feature_map", "patch_grid"]


@dataclass(frozen=True)
class Layout:
    """How a tensor's dimensions map onto (batch, channels, height, width).

    Attributes:
        kind: ``nchw`` (as is), ``nhwc`` (channels last) or ``tokens`` (batch, tokens, channels).
        prefix: tokens before the patch grid (a class token), dropped from the map.
        grid: the patch grid's (rows, cols), for ``tokens``.
    """

    kind: str
    prefix: int = 0
    grid: tuple[int, int] | None = None

    def describe(self) -> str:
        if self.kind == "tokens":
            rows, cols = self.grid
            dropped = f", first {self.prefix} token{'s' if self.prefix > 1 else ''} dropped" if self.prefix else ""
            return f"tokens as a {rows}x{cols} grid{dropped}"
        return "channels last" if self.kind == "nhwc" else ""


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


def layout_of(shape: tuple[int, ...], input_hw: tuple[int, int]) -> Layout | None:
    """The layout of a tensor of ``shape`` (batch first), or ``None`` without a spatial one."""
    if len(shape) == 4:
        _, a, b, c = shape
        if _matches(a, b, input_hw) and not _matches(b, c, input_hw) and c > a:
            return Layout("nhwc")
        return Layout("nchw")
    if len(shape) == 3:
        _, tokens, _ = shape
        for skip in (0, 1):  # with or without a class token in front
            grid = patch_grid(tokens - skip, input_hw) if tokens - skip > 1 else None
            if grid is not None and (skip == 1 or _is_square_like(grid)):
                return Layout("tokens", skip, grid)
    return None


def token_layout(shape: tuple[int, ...], input_hw: tuple[int, int]) -> Layout | None:
    """The layout of a transformer's tensor: patch tokens or channels last, else ``None``."""
    layout = layout_of(tuple(shape), input_hw)
    return layout if layout is not None and layout.kind != "nchw" else None


def as_feature_map(tensor, input_hw: tuple[int, int]):
    """Return ``tensor`` as (N, C, h, w), or ``None`` if it has no spatial layout.

    Args:
        tensor: a recorded output or gradient, batch first (a torch tensor or numpy array).
        input_hw: the model input's (height, width), used to recognise the layout.
    """
    if tensor is None:
        return None
    layout = layout_of(tuple(tensor.shape), input_hw)
    if layout is None:
        return None
    if layout.kind == "nhwc":
        return _transpose(tensor, (0, 3, 1, 2))
    if layout.kind == "tokens":
        rows, cols = layout.grid
        n, _, channels = tensor.shape
        return _transpose(tensor[:, layout.prefix :, :].reshape(n, rows, cols, channels), (0, 3, 1, 2))
    return tensor


def _matches(rows: int, cols: int, input_hw: tuple[int, int]) -> bool:
    height, width = input_hw
    return rows > 0 and cols > 0 and abs(math.log((rows / cols) / (height / width))) < math.log(1.5)


def _is_square_like(grid: tuple[int, int]) -> bool:
    rows, cols = grid
    return rows > 1 and cols > 1


def _transpose(array, axes):
    return array.permute(*axes) if hasattr(array, "permute") else array.transpose(axes)
