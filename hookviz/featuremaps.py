"""Feature maps: see any layer output as (batch, channels, height, width).

Convolution layers already are. Transformer layers are not: a ViT block outputs
(batch, tokens, channels) with class, distillation or register tokens first, and Swin
and ConvNeXt blocks work channels-last (batch, height, width, channels).

A model that declares its layout (``DeclaredLayout``: how many prefix tokens, its patch
size, the strides of its feature maps; see ``hookviz.geometry``) is read as it says.
Only what the declaration does not cover is guessed: the patch grid inferred from the
token count and the input's aspect ratio, with or without one class token. Every
``Layout`` says which of the two it came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Layout", "DeclaredLayout", "layout_of", "token_layout", "as_feature_map", "reshape", "patch_grid"]


@dataclass(frozen=True)
class Layout:
    """How a tensor's dimensions map onto (batch, channels, height, width).

    Attributes:
        kind: ``nchw`` (as is), ``nhwc`` (channels last) or ``tokens`` (batch, tokens, channels).
        prefix: tokens before the patch grid (class, distillation, register), dropped from the map.
        grid: the patch grid's (rows, cols), for ``tokens``.
        declared: read from what the model declares (``True``) or guessed from the shape.
    """

    kind: str
    prefix: int = 0
    grid: tuple[int, int] | None = None
    declared: bool = False

    def describe(self) -> str:
        if self.kind == "tokens":
            rows, cols = self.grid
            dropped = "" if not self.prefix else ", first token dropped" if self.prefix == 1 else f", first {self.prefix} tokens dropped"
            return f"tokens as a {rows}x{cols} grid{dropped}"
        return "channels last" if self.kind == "nhwc" else ""

    def to_json(self) -> dict:
        return {
            "kind": self.kind, "prefix": self.prefix, "grid": list(self.grid) if self.grid else None,
            "basis": "declared" if self.declared else "guessed",
        }


@dataclass(frozen=True)
class DeclaredLayout:
    """What a model declares about where its feature maps lie.

    Attributes:
        prefix: tokens in front of the patch tokens (timm's ``num_prefix_tokens``: class,
            distillation and register tokens).
        patch: the (rows, cols) stride of its patch embedding, when token tensors lie on
            that patch grid in raster order (ViT, DeiT, EVA, BEiT).
        pad: the patch embedding pads the input up to whole patches (the grid rounds up).
        strides: the reductions of its 4-D feature maps (timm's ``feature_info``), which
            tell a (N, C, H, W) map from a channels-last (N, H, W, C) one.
        channels_last: the model declares its feature maps channels-last (timm's Swin
            ``output_fmt``); ``None`` when it does not say.
        origin: what was read, for reports.
    """

    prefix: int = 0
    patch: tuple[int, int] | None = None
    pad: bool = False
    strides: tuple[int, ...] = ()
    channels_last: bool | None = None
    origin: str = ""

    def patch_grid(self, input_hw: tuple[int, int]) -> tuple[int, int] | None:
        """The patch grid of an input of ``input_hw``, or ``None`` without a patch embedding."""
        if self.patch is None:
            return None
        divide = _ceil if self.pad else (lambda a, b: a // b)
        return divide(input_hw[0], self.patch[0]), divide(input_hw[1], self.patch[1])

    def map_grids(self, input_hw: tuple[int, int]) -> set[tuple[int, int]]:
        """Every (height, width) a 4-D feature map of this model may have for ``input_hw``."""
        grids = set()
        for stride in self.strides:
            grids.add((input_hw[0] // stride, input_hw[1] // stride))
            grids.add((_ceil(input_hw[0], stride), _ceil(input_hw[1], stride)))
        grid = self.patch_grid(input_hw)
        if grid is not None:
            grids.add(grid)
        return {g for g in grids if g[0] > 0 and g[1] > 0}

    def to_json(self) -> dict:
        return {
            "prefix": self.prefix, "patch": list(self.patch) if self.patch else None, "pad": self.pad,
            "strides": list(self.strides), "channels_last": self.channels_last, "origin": self.origin,
        }


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


def layout_of(shape: tuple[int, ...], input_hw: tuple[int, int], declared: DeclaredLayout | None = None) -> Layout | None:
    """The layout of a tensor of ``shape`` (batch first), or ``None`` without a spatial one.

    What ``declared`` settles is taken from it; the rest is guessed from the shape.
    """
    shape = tuple(shape)
    if declared is not None:
        layout = _declared_layout(shape, tuple(input_hw), declared)
        if layout is not None:
            return layout
    return _guessed_layout(shape, tuple(input_hw))


def _declared_layout(shape: tuple[int, ...], input_hw: tuple[int, int], declared: DeclaredLayout) -> Layout | None:
    if len(shape) == 3:
        grid = declared.patch_grid(input_hw)
        if grid is None or grid[0] * grid[1] < 2:
            return None
        cells = grid[0] * grid[1]
        if shape[1] == cells + declared.prefix:
            return Layout("tokens", declared.prefix, grid, declared=True)
        if shape[1] == cells:  # the patch tokens alone (a patch embedding's own output)
            return Layout("tokens", 0, grid, declared=True)
        return None
    if len(shape) == 4:
        grids = declared.map_grids(input_hw)
        _, a, b, c = shape
        first, last = (a, b) in grids, (b, c) in grids
        if first and not last:
            return Layout("nhwc", declared=True)
        if last and not first:
            return Layout("nchw", declared=True)
        if first and last and declared.channels_last is not None:
            return Layout("nhwc" if declared.channels_last else "nchw", declared=True)
    return None


def _guessed_layout(shape: tuple[int, ...], input_hw: tuple[int, int]) -> Layout | None:
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


def token_layout(shape: tuple[int, ...], input_hw: tuple[int, int], declared: DeclaredLayout | None = None) -> Layout | None:
    """The layout of a transformer's tensor: patch tokens or channels last, else ``None``."""
    layout = layout_of(tuple(shape), input_hw, declared)
    return layout if layout is not None and layout.kind != "nchw" else None


def as_feature_map(tensor, input_hw: tuple[int, int], declared: DeclaredLayout | None = None):
    """Return ``tensor`` as (N, C, h, w), or ``None`` if it has no spatial layout.

    Args:
        tensor: a recorded output or gradient, batch first (a torch tensor or numpy array).
        input_hw: the model input's (height, width), used to recognise the layout.
        declared: what the model declares about its layout, if anything.
    """
    if tensor is None:
        return None
    layout = layout_of(tuple(tensor.shape), input_hw, declared)
    return None if layout is None else reshape(tensor, layout)


def reshape(tensor, layout: Layout):
    """``tensor`` laid out as ``layout`` says, as (N, C, h, w)."""
    if layout.kind == "nhwc":
        return _transpose(tensor, (0, 3, 1, 2))
    if layout.kind == "tokens":
        rows, cols = layout.grid
        n, _, channels = tensor.shape
        return _transpose(tensor[:, layout.prefix :, :].reshape(n, rows, cols, channels), (0, 3, 1, 2))
    return tensor


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _matches(rows: int, cols: int, input_hw: tuple[int, int]) -> bool:
    height, width = input_hw
    return rows > 0 and cols > 0 and abs(math.log((rows / cols) / (height / width))) < math.log(1.5)


def _is_square_like(grid: tuple[int, int]) -> bool:
    rows, cols = grid
    return rows > 1 and cols > 1


def _transpose(array, axes):
    return array.permute(*axes) if hasattr(array, "permute") else array.transpose(axes)
