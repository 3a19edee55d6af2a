"""``<layer>.channels.png`` and ``<layer>.grad_channels.png``: a grid of one tile per channel
of the output (or of its gradient), each labelled with its index and, on the default
per-tile scale, the range its colours span (``[min, max]``, or ``±L`` for gradients).

The grid uses the tiles chosen when the layer was summarised; ``channels`` picks others,
which needs the full tensors (``explain`` keeps them). A tensor without spatial layout
gets no grid.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

from hookviz.render.kinds import PictureKind, grid_options, register_kind, usual_reuse_key

__all__ = ["build", "reuse_key", "KIND", "GRADIENT_KIND"]


def reuse_key(explanation, layer, options: dict):
    """The tiles' shape and the grid's options; ``None`` without tiles (no spatial layout)."""
    tiles = layer.tiles.get(options.get("which", "output"))
    return usual_reuse_key(explanation, layer, None if tiles is None else (tiles.maps.shape, tuple(sorted(options.items()))))


def _tiles_for(explanation, layer, which: str, channels):
    from hookviz.explaining.summaries import channel_tiles
    from hookviz.options import ChannelSelection

    tiles = layer.tiles.get(which)
    full = layer.output if which == "output" else layer.grad_output
    if channels is not None and full is not None:
        selection = ChannelSelection.parse(channels)
        tiles, _ = channel_tiles(full, layer.layout, selection, by_magnitude=which != "output")
    return _flat(tiles)


def _flat(tiles):
    """``tiles`` with each map 2-D: a signal's channel as a strip (a quarter as high as long),
    a clip's as its slices tiled (``anatomy.slices``, NaN between them)."""
    import numpy as np

    from hookviz.render.figures import flat

    if tiles is None or tiles.maps.ndim == 3:
        return tiles
    if tiles.maps.ndim == 2:
        band = max(1, round(tiles.maps.shape[1] / 4))
        return replace(tiles, maps=np.repeat(tiles.maps[:, None, :], band, axis=1))
    return replace(tiles, maps=np.stack([flat(volume)[0] for volume in tiles.maps]))


def _what_tiles_show(layer, which: str) -> str:
    """How a tile shows a channel of a map that is not a photo's."""
    from hookviz.anatomy.slices import tiling

    rank = layer.ranks.get(which)
    if rank == 1:
        return " · each tile: a strip over the signal"
    grid = getattr(layer.maps.get(which), "shape", ())  # the map as read (a token grid, channels last), not the tensor
    if rank == 3 and len(grid) == 3:
        return f" · each tile: {tiling(tuple(grid)).note()}"
    return ""


def _grid_geometry(tiles):
    count = len(tiles.indices)
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    height, width = tiles.maps.shape[1:]
    pad = max(1, round(max(height, width) * 0.08))
    gap = max(pad, round(height * 0.3), round(width * 0.12))  # room above each tile for its label, however flat
    return columns, rows, height, width, pad, gap


def _tile_ranges(maps):
    """Each tile's finite min and max, and whether it has no finite value at all."""
    import numpy as np

    maps = maps.astype(np.float64)
    finite = np.isfinite(maps)
    blank = ~finite.any(axis=(1, 2))
    low = np.where(blank, 0.0, np.where(finite, maps, np.inf).min(axis=(1, 2)))
    high = np.where(blank, 0.0, np.where(finite, maps, -np.inf).max(axis=(1, 2)))
    return low, high, blank


def _tile_values(maps, low, high, signed: bool, scale: str):
    """The values drawn and their norm: on the ``tile`` scale, each tile mapped to -1..1
    (signed, centred on zero) or 0..1 (its min to its max; a flat tile is all 0)."""
    import numpy as np
    from matplotlib.colors import Normalize

    from hookviz.render.figures import norm_for

    maps = maps.astype(np.float64)
    if scale != "tile":
        norm, note = norm_for(maps, signed)
        return maps, norm, note
    if signed:
        limit = np.maximum(np.abs(low), np.abs(high))
        return maps / np.where(limit > 0, limit, 1.0)[:, None, None], Normalize(-1, 1), ""
    span = (high - low)[:, None, None]
    scaled = np.where(span > 0, (maps - low[:, None, None]) / np.where(span > 0, span, 1.0), 0.0)
    return scaled, Normalize(0, 1), ""


def _tile_scope(low: float, high: float, blank: bool, signed: bool, scale: str) -> str:
    """What a tile's label says of its values: ``=v`` when flat, else the range its colours span."""
    from hookviz.render.figures import fmt

    if low == high and not blank:
        return f" ={fmt(low)}"  # a flat tile: its one value, not a range
    if scale != "tile":
        return ""
    if signed:  # the tile's colours span -L..L
        return f" ±{fmt(max(abs(low), abs(high)))}"
    return f" [{fmt(low)}, {fmt(high)}]"


def _tile_labels(ax, count: int, columns: int, cell: tuple[int, int, int, int]) -> list:
    """The text above each of ``count`` tiles, empty until ``update`` fills it; ``cell``: a tile's
    height and width, and the columns and rows of space after it (``_grid_geometry``)."""
    height, width, pad, gap = cell
    font = 6 if columns > 6 else 8
    return [
        ax.text(
            c * (width + pad) - 0.5,
            r * (height + gap) + gap - 0.6,
            "",
            fontsize=font,
            va="bottom",
            ha="left",
            parse_math=False,
        )
        for r, c in (divmod(slot, columns) for slot in range(count))
    ]


def _bar_label(scale: str, signed: bool) -> str:
    if scale != "tile":
        return "one scale for all tiles"
    return "each tile on its own scale: " + ("value / max|value| of the tile" if signed else "tile min (0) to tile max (1)")


def _mosaic(maps, rows: int, columns: int, cell: tuple[int, int, int, int]):
    """Tiles in reading order, each below a strip for its label, separated by columns of NaN."""
    import numpy as np

    height, width, pad, gap = cell
    slots = np.full((rows * columns, height + gap, width + pad), np.nan)
    slots[: len(maps), gap:, :width] = maps
    mosaic = slots.reshape(rows, columns, height + gap, width + pad).transpose(0, 2, 1, 3)
    return mosaic.reshape(rows * (height + gap), columns * (width + pad))[:, : columns * (width + pad) - pad]


def build(explanation, layer, which: str = "output", channels=None, scale: str = "tile"):
    import matplotlib
    import numpy as np

    from hookviz.render.figures import (
        ACTIVATION_CMAP,
        DPI,
        GRADIENT_CMAP,
        NO_FINITE,
        Sheet,
        ValueBar,
        layer_text,
        presented,
        shape_text,
    )

    tiles = _tiles_for(explanation, layer, which, channels)
    if tiles is None:
        return None
    signed = which != "output"
    columns, rows, height, width, pad, gap = _grid_geometry(tiles)
    shape = (rows * (height + gap), columns * (width + pad) - pad)
    # About 7 dots per value, and room for a label like "#1016 [9.62, 69.2]": 1 to 1.2 in.
    tile_inches = max(1.0, min(1.2, 12.0 / columns, max(height, width) * 7 / DPI))
    grid_width = columns * tile_inches
    grid_height = grid_width * shape[0] / shape[1]
    # The bar as tall as its label (its scale, in words) is long, however flat the grid (a signal's strips).
    bar_height = min(max(grid_height, len(_bar_label(scale, signed)) * 0.065), 5.0)
    sheet = Sheet(grid_width + 1.9, max(grid_height, bar_height) + 1.0)
    ax = sheet.axes(0.2, 0.8, grid_width, grid_height)
    cax = sheet.axes(0.2 + grid_width + 0.2, 0.8 + max(0.0, (grid_height - bar_height) / 2), 0.18, bar_height)
    colormap = matplotlib.colormaps[GRADIENT_CMAP if signed else ACTIVATION_CMAP].with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(np.full(shape, np.nan)), cmap=colormap, interpolation="nearest")
    labels = _tile_labels(ax, len(tiles.indices), columns, (height, width, pad, gap))
    ax.set_axis_off()
    bar = ValueBar(sheet.figure, cax, colormap, _bar_label(scale, signed))

    def update(explanation, layer):
        tiles = _tiles_for(explanation, layer, which, channels)
        low, high, blank = _tile_ranges(tiles.maps)
        maps, norm, note = _tile_values(tiles.maps, low, high, signed, scale)
        mosaic = _mosaic(maps, rows, columns, (height, width, pad, gap))
        for slot, channel in enumerate(tiles.indices):
            labels[slot].set_text(f"#{channel}{_tile_scope(low[slot], high[slot], blank[slot], signed, scale)}")
        image.set_data(np.ma.masked_invalid(mosaic))
        image.set_norm(norm)
        bar.set_norm(None if note == NO_FINITE else norm)
        flat = int(((low == high) & ~blank).sum())
        flat_note = (
            "" if not flat else " · every tile is constant (=value)" if flat == len(low) else f" · {flat} constant tiles (=value)"
        )
        sheet.title(
            f"{explanation.model} · {layer_text(layer)} · {which} {shape_text(layer.shapes[which])} · "
            f"{len(tiles.indices)} of {tiles.total} channels{flat_note}{_what_tiles_show(layer, which)}\n"
            f"{presented(explanation).headline(explanation)}"
        )

    update(explanation, layer)
    return sheet.figure, update, [image, *labels, *bar.labels, sheet.heading]


def _grad_channels_wanted(pictures) -> bool:
    return pictures.grad_channels


KIND = register_kind(
    PictureKind(
        "channels",
        group="channels",
        label="channels",
        help="a grid of the output's channels",
        build=build,
        reuse_key=reuse_key,
        options=partial(grid_options, "output"),
        default=True,
        ranks=(1, 2, 3),
    )
)
GRADIENT_KIND = register_kind(
    PictureKind(
        "grad_channels",
        group="channels",
        label="gradient channels",
        help="with --grad-channels, one of grad_output's",
        build=build,
        reuse_key=reuse_key,
        wanted=_grad_channels_wanted,
        options=partial(grid_options, "grad_output"),
        default=True,
        ranks=(1, 2, 3),
    )
)
