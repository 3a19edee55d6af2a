"""Feature maps: see any layer output as (batch, channels, *spatial), with one to three
spatial dimensions: a Conv1d's (N, C, L), a Conv2d's (N, C, H, W), a Conv3d's (N, C, D, H, W).

Convolution layers already are. Transformer layers are not: a ViT block outputs
(batch, tokens, channels) with class, distillation or register tokens first, and Swin
and ConvNeXt blocks work channels-last (batch, height, width, channels).

A model that declares its layout (``DeclaredLayout``: how many prefix tokens, its patch
size, the strides of its feature maps; see ``hookviz.anatomy.geometry``) is read as it says.
A 4-D map's order the declaration leaves open is taken from its data flow (the ops that
made it, see ``hookviz.anatomy.dataflow``). Only what neither covers is guessed: the patch grid
inferred from the token count and the input's aspect ratio, with or without one class
token; the order of a map whose shape fits one reading better. A map whose shape fits
both orders equally (1x96x96x96: height, width and channels alike) is never guessed: its
layout is ``ambiguous``, and it is not drawn as a map. Every ``Layout`` says its basis.

Maps of other ranks are channels first, as PyTorch's Conv1d and Conv3d make them: the data
flow says so, and so does the input's own rank when the data flow does not (a (N, C, L)
tensor of a model fed (C, L) signals, a (N, C, D, H, W) one). Tokens are read over a 2-D
input's patch grid only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "Layout",
    "DeclaredLayout",
    "layout_of",
    "token_layout",
    "as_feature_map",
    "reshape",
    "patch_grid",
    "ambiguity",
    "shape_text",
    "layout_hint",
    "NCHW",
    "NHWC",
    "TOKENS",
    "AMBIGUOUS",
    "MAP_ORDERS",
    "CHANNELS_FIRST_OTHER_RANKS",
    "NCL",
    "NCDHW",
    "NDHWC",
    "DECLARED",
    "DATA_FLOW",
    "GUESSED",
    "UNDECIDED",
]

NCHW, NHWC, TOKENS, AMBIGUOUS = "nchw", "nhwc", "tokens", "ambiguous"  # a Layout's kinds
#: The orders a clip's tokens may run over its (frames, rows, cols) grid, slowest axis first.
CLIP_ORDER, CLIP_ORDERS = "thw", ("thw", "hwt")
# Every order of a map's axes with the batch first: what ``x.transpose(1, 3)`` makes (nwhc)
# is known from the data flow too, and read back upright.
MAP_ORDERS = ("nchw", "nhwc", "nwhc", "ncwh", "nhcw", "nwch")
# A Conv1d's (N, C, L) and a Conv3d's (N, C, D, H, W) as the data flow names them: maps of
# one and three spatial dimensions, read as they are, and never tokens.
NCL, NCDHW = "ncl", "ncdhw"
CHANNELS_FIRST_OTHER_RANKS = (NCL, NCDHW)
# A channels-last map of a clip, (N, T, H, W, C), as torchvision's Swin3D makes them: read
# as such only when the model declares it (``DeclaredLayout.channels_last``).
NDHWC = "ndhwc"
# A Layout's basis: what the model declares, the ops that made the tensor, the shape alone,
# or nothing (a map whose shape reads both ways).
DECLARED, DATA_FLOW, GUESSED, UNDECIDED = "declared", "data flow", "guessed", "undecided"


@dataclass(frozen=True)
class Layout:
    """How a tensor's dimensions map onto (batch, channels, *spatial).

    Attributes:
        kind: ``nchw`` (as is), ``nhwc`` (channels last), ``tokens`` (batch, tokens, channels),
            ``ncl`` and ``ncdhw`` (a map of one or three spatial dimensions, as is),
            or ``ambiguous`` (a 4-D map that reads as ``nchw`` and ``nhwc`` alike, and that
            nothing settles: it is not drawn as a map). The data flow may also find the
            other orders of ``MAP_ORDERS`` (``nwhc``: ``x.transpose(1, 3)``).
        prefix: tokens before the patch grid (class, distillation, register), dropped from the map.
        grid: the patch grid's (rows, cols), for ``tokens``; a clip's (frames, rows, cols)
            for the tokens of a video transformer (MViT), a map of three dimensions.
        order: the order a clip's tokens run over its grid, slowest axis first: ``thw`` (frame by
            frame, each in raster order: MViT, VideoMAE) or ``hwt`` (position by position, its
            frames in a row: TimeSformer's divided space-time tokens).
        basis: ``declared`` by the model (or the caller), read from the tensor's ``data flow``,
            ``guessed`` from the shape, or ``undecided`` (``ambiguous``).
    """

    kind: str
    prefix: int = 0
    grid: tuple[int, ...] | None = None
    basis: str = GUESSED
    order: str = CLIP_ORDER

    @property
    def declared(self) -> bool:
        return self.basis == DECLARED

    @property
    def spatial(self) -> bool:
        """Whether the tensor can be read as a map in this layout (``ambiguous`` cannot)."""
        return self.kind != AMBIGUOUS

    @property
    def rank(self) -> int:
        """How many spatial dimensions the map has: 1 (``ncl``), 3 (``ncdhw``), else 2."""
        clip_tokens = self.kind == TOKENS and self.grid is not None and len(self.grid) == 3
        return 1 if self.kind == NCL else 3 if self.kind in (NCDHW, NDHWC) or clip_tokens else 2

    def describe(self) -> str:
        if self.kind == TOKENS:
            grid = "x".join(map(str, self.grid or ()))
            dropped = (
                ""
                if not self.prefix
                else ", first token dropped"
                if self.prefix == 1
                else f", first {self.prefix} tokens dropped"
            )
            ordered = f" (tokens run {self.order}, slowest first)" if self.order != CLIP_ORDER else ""
            return f"tokens as a {grid} grid{ordered}{dropped}"
        if self.kind in (NCHW, AMBIGUOUS, NCL, NCDHW):
            return ""
        return "channels last" if self.kind in (NHWC, NDHWC) else f"axes {self.kind.upper()}"

    def to_json(self) -> dict:
        order = {"order": self.order} if self.order != CLIP_ORDER else {}
        return {
            "kind": self.kind,
            "prefix": self.prefix,
            "grid": list(self.grid) if self.grid else None,
            "basis": self.basis,
            **order,
        }

    @classmethod
    def from_json(cls, data) -> "Layout | None":
        """The layout ``to_json`` wrote, or ``None`` for what is not one (an older report)."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            return None
        grid = data.get("grid")
        grid = tuple(grid) if isinstance(grid, list) and len(grid) in (2, 3) else None
        order = str(data["order"]) if data.get("order") in CLIP_ORDERS else CLIP_ORDER
        return cls(data["kind"], int(data.get("prefix") or 0), grid, str(data.get("basis") or GUESSED), order)


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
            ``output_fmt``), or the caller does (``layout='nhwc'``); ``None`` when neither
            says. It decides only maps that fit both orders and whose data flow is unknown,
            and a clip's 5-D maps the data flow does not call channels-first (Swin3D's).
        temporal: a video model's temporal stride: the input frames each of its token or map
            slices stands for (MViT's and Swin3D's patch embedding: 2); ``None`` for a photo's.
            Its tokens lie on a (frames, rows, cols) grid, with ``strides`` the spatial ones.
        token_order: the order its tokens run over that grid (``Layout.order``): ``thw``, or
            ``hwt`` (TimeSformer: each position's frames in a row).
        origin: what was read, for reports.
    """

    prefix: int = 0
    patch: tuple[int, int] | None = None
    pad: bool = False
    strides: tuple[int, ...] = ()
    channels_last: bool | None = None
    origin: str = ""
    temporal: int | None = None
    token_order: str = "thw"

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
            "prefix": self.prefix,
            "patch": list(self.patch) if self.patch else None,
            "pad": self.pad,
            "strides": list(self.strides),
            "channels_last": self.channels_last,
            "origin": self.origin,
            "temporal": self.temporal,
            **({"token_order": self.token_order} if self.token_order != CLIP_ORDER else {}),
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


def layout_of(
    shape: tuple[int, ...],
    input_hw: tuple[int, ...],
    declared: DeclaredLayout | None = None,
    flow: str | None = None,
) -> Layout | None:
    """The layout of a tensor of ``shape`` (batch first), or ``None`` without a spatial one.

    Args:
        input_hw: the model input's spatial size: (height, width) for a photo, (length,)
            for a signal, (frames, height, width) for a clip: its shape past the channels.
        declared: what the model declares; what it settles is taken from it.
        flow: a tensor's order as its data flow tells it (one of ``MAP_ORDERS``, or one of
            ``CHANNELS_FIRST_OTHER_RANKS`` for a Conv1d's or Conv3d's map; see
            ``hookviz.anatomy.dataflow``), ``None`` when unknown.

    Returns:
        A ``Layout``; for a 4-D map, what the declared strides settle, else the data flow,
        else the shape when one order fits it better, else the declared channel order, else
        ``ambiguous``. A 3-D tensor the data flow calls ``ncl``, or of a model fed signals,
        is a map of one spatial dimension; a 5-D one a map of three.
    """
    shape, input_hw = tuple(shape), tuple(input_hw)
    other = _other_rank(shape, input_hw, flow, declared)
    if other is not None:
        return other
    if len(shape) == 4:
        hw = (input_hw[-2], input_hw[-1]) if len(input_hw) >= 2 else (1, 1)  # a clip's frames' (H, W)
        return _map_layout(shape, hw, declared, flow)
    if flow in CHANNELS_FIRST_OTHER_RANKS:
        return None
    if len(input_hw) == 3 and declared is not None:  # a video transformer's tokens, as it declares them
        return _clip_tokens(shape, input_hw, declared)
    if len(input_hw) != 2:  # else tokens lie on a photo's patch grid only
        return None
    if declared is not None:
        layout = _declared_tokens(shape, input_hw, declared)
        if layout is not None:
            return layout
    return _guessed_tokens(shape, input_hw)


def _other_rank(
    shape: tuple[int, ...], input_hw: tuple[int, ...], flow: str | None, declared: DeclaredLayout | None = None
) -> Layout | None:
    """A channels-first map of one or three spatial dimensions, or a clip's channels-last map
    its model declares (Swin3D's (N, T, H, W, C)), else ``None``."""
    rank = {3: NCL, 5: NCDHW}.get(len(shape))
    if rank is None or min(shape[2:], default=0) < 1:
        return None
    if flow == rank:
        return Layout(rank, basis=DATA_FLOW)
    if rank == NCDHW and flow is None and declared is not None and declared.channels_last:
        return Layout(NDHWC, basis=DECLARED)
    if flow is None and len(input_hw) == len(shape) - 2:  # a signal's or a clip's model: as its input lies
        return Layout(rank)
    return None


def ambiguity(shape: tuple[int, ...]) -> str:
    """Why a map of ``shape`` (with its batch dimension) has no layout: the two readings it fits."""
    _, a, b, c = shape
    return (
        f"fits channels first ({a} channels of {b}x{c}) and channels last ({c} channels of {a}x{b}) alike, "
        "and neither the model nor the ops that made it say which"
    )


def _map_layout(shape: tuple[int, ...], input_hw: tuple[int, int], declared: DeclaredLayout | None, flow: str | None) -> Layout:
    _, a, b, c = shape
    grids = declared.map_grids(input_hw) if declared is not None else set()
    first, last = (a, b) in grids, (b, c) in grids
    if first != last:  # the declared strides fit one reading only
        return Layout(NHWC if first else NCHW, basis=DECLARED)
    if flow in MAP_ORDERS:
        return Layout(flow, basis=DATA_FLOW)
    if not first:  # no declared grid fits either reading: the shape may still prefer one
        guess = _guessed_order(a, b, c, input_hw)
        if guess is not None:
            return Layout(guess)
    if declared is not None and declared.channels_last is not None:
        return Layout(NHWC if declared.channels_last else NCHW, basis=DECLARED)
    return Layout(AMBIGUOUS, basis=UNDECIDED)


def _guessed_order(a: int, b: int, c: int, input_hw: tuple[int, int]) -> str | None:
    """The order whose (height, width) fits the input's aspect better; ``None`` for a tie
    (a square photo's 1x96x96x96, or 1x64x56x64: a side equals the channel count)."""
    as_first, as_last = _misfit(b, c, input_hw), _misfit(a, b, input_hw)
    if as_last is None or (as_first is not None and as_first < as_last - 1e-9):
        return NCHW  # also when neither fits: as convolutions put their maps out
    if as_first is None or as_last < as_first - 1e-9:
        return NHWC
    return None


def _declared_tokens(shape: tuple[int, ...], input_hw: tuple[int, int], declared: DeclaredLayout) -> Layout | None:
    if len(shape) != 3:
        return None
    grid = declared.patch_grid(input_hw)
    if grid is None or grid[0] * grid[1] < 2:
        return None
    cells = grid[0] * grid[1]
    if shape[1] == cells + declared.prefix:
        return Layout(TOKENS, declared.prefix, grid, basis=DECLARED)
    if shape[1] == cells:  # the patch tokens alone (a patch embedding's own output)
        return Layout(TOKENS, 0, grid, basis=DECLARED)
    return None


def _clip_tokens(shape: tuple[int, ...], input_hw: tuple[int, ...], declared: DeclaredLayout) -> Layout | None:
    """(N, tokens, C) of a video transformer on a (frames, rows, cols) grid: the frames its
    ``temporal`` stride makes of the clip's, the rows and columns one of its spatial
    ``strides`` makes (MViT pools the grid stage by stage), with or without its prefix tokens."""
    if len(shape) != 3 or not declared.temporal:
        return None
    frames, height, width = input_hw
    for slices in sorted({frames // declared.temporal, _ceil(frames, declared.temporal)}):
        for rows, cols in sorted(declared.map_grids((height, width)), reverse=True):
            cells = slices * rows * cols
            if cells < 2:
                continue
            for prefix in dict.fromkeys((declared.prefix, 0)):
                if shape[1] == cells + prefix:
                    return Layout(TOKENS, prefix, (slices, rows, cols), basis=DECLARED, order=declared.token_order)
    return None


def _guessed_tokens(shape: tuple[int, ...], input_hw: tuple[int, int]) -> Layout | None:
    if len(shape) != 3:
        return None
    _, tokens, _ = shape
    for skip in (0, 1):  # with or without a class token in front
        grid = patch_grid(tokens - skip, input_hw) if tokens - skip > 1 else None
        if grid is not None and (skip == 1 or _is_square_like(grid)):
            return Layout(TOKENS, skip, grid)
    return None


def token_layout(shape: tuple[int, ...], input_hw: tuple[int, int], declared: DeclaredLayout | None = None) -> Layout | None:
    """The layout of a transformer's tensor: patch tokens or channels last, else ``None``."""
    layout = layout_of(tuple(shape), input_hw, declared)
    return layout if layout is not None and layout.kind in (TOKENS, NHWC) else None


def as_feature_map(tensor, input_hw: tuple[int, ...], declared: DeclaredLayout | None = None, flow: str | None = None):
    """Return ``tensor`` as (N, C, *spatial), or ``None`` if it has no spatial layout (or an ambiguous one).

    Args:
        tensor: a recorded output or gradient, batch first (a torch tensor or numpy array).
        input_hw: the model input's spatial size, used to recognise the layout.
        declared: what the model declares about its layout, if anything.
        flow: the tensor's order as its data flow tells it (see ``layout_of``).
    """
    if tensor is None:
        return None
    return reshape(tensor, layout_of(tuple(tensor.shape), input_hw, declared, flow))


def reshape(tensor, layout: Layout | None):
    """``tensor`` laid out as ``layout`` says, as (N, C, *spatial); ``None`` without a layout
    or with an ambiguous one."""
    if tensor is None or layout is None or not layout.spatial:
        return None
    if layout.kind in MAP_ORDERS and layout.kind != NCHW:  # nhwc: (0, 3, 1, 2)
        return _transpose(tensor, tuple(layout.kind.index(axis) for axis in NCHW))
    if layout.kind == NDHWC:
        return _transpose(tensor, (0, 4, 1, 2, 3))
    if layout.kind == TOKENS:
        n, _, channels = tensor.shape
        grid = tuple(layout.grid or ())
        run = tuple(CLIP_ORDER.index(axis) for axis in layout.order) if len(grid) == 3 else tuple(range(len(grid)))
        axes = (0, len(grid) + 1, *(1 + run.index(axis) for axis in range(len(grid))))  # (N, *run, C) -> (N, C, *grid)
        return _transpose(tensor[:, layout.prefix :, :].reshape(n, *(grid[axis] for axis in run), channels), axes)
    return tensor


def shape_text(shape) -> str:
    """A batch tensor's shape as reports write one image's: ``1x512x7x7``."""
    return "x".join(map(str, (1, *shape[1:])))


def layout_hint() -> str:
    """How the caller settles a map's order hookviz cannot tell."""
    from hookviz.errors import arg

    return f"pass {arg('layout', 'nhwc')} or {arg('layout', 'nchw')} to say it"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _misfit(rows: int, cols: int, input_hw: tuple[int, int]) -> float | None:
    """How far a (rows, cols) grid's aspect is from the input's (0: the same), or ``None``
    when it is too far (more than 1.5 times) to be a map of it."""
    height, width = input_hw
    if rows <= 0 or cols <= 0:
        return None
    error = abs(math.log((rows / cols) / (height / width)))
    return error if error < math.log(1.5) else None


def _is_square_like(grid: tuple[int, int]) -> bool:
    rows, cols = grid
    return rows > 1 and cols > 1


def _transpose(array, axes):
    return array.permute(*axes) if hasattr(array, "permute") else array.transpose(axes)
