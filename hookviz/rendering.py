"""Rendering: the pictures, as matplotlib ``Figure`` objects on the Agg canvas.

No pyplot: figures are built with the object API, so rendering is safe in threads and
worker processes and leaves no global state behind. Each picture has a builder
(``summary_parts``, ``channels_parts``, ``cam_parts``, ``cam_topk_parts``, ``diff_parts``) that keeps the
contract written in ``hookviz.pictures``; ``pictures.KINDS`` says which file each makes. Colour is honest: activations use a
sequential colormap, gradients a diverging one centred on zero, and every panel has a
colorbar spanning the true values, so a dead layer never looks like an active one.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy

from .options import ChannelSelection
from .summaries import channel_tiles

__all__ = ["summary_parts", "channels_parts", "cam_parts", "cam_topk_parts", "prediction_figure", "summary_figure", "channels_figure", "cam_figure", "cam_topk_figure", "render_png", "png_bytes", "photo_of", "FigureCache", "worker_cache", "configure_worker", "fonts_from_memory", "warm_up", "anatomy"]

ACTIVATION_CMAP = "viridis"
GRADIENT_CMAP = "RdBu_r"
CAM_CMAP = "jet"
CAM_ALPHA = 0.45


DPI = 100
#: zlib level for the PNGs: 1 encodes these pictures 1.3-4x faster than matplotlib's default 6,
#: for files 10-20% larger (measured on the default pictures; see bench/).
PNG_COMPRESSION = 1


# ----------------------------------------------------------------------------- helpers


class _Sheet:
    """A figure laid out by hand, in inches from its top-left corner.

    Fixed positions instead of a layout engine: the pictures have fixed anatomies, and
    solving constraints at every draw made rendering a third slower.
    """

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self.figure = Figure(figsize=(width, height), dpi=DPI)
        FigureCanvasAgg(self.figure)
        self.heading = None  # the title's Text, once set

    def axes(self, left: float, top: float, width: float, height: float):
        return self.figure.add_axes(
            (left / self.width, 1 - (top + height) / self.height, width / self.width, height / self.height)
        )

    def title(self, text: str) -> None:
        # Wrapped only when a line would not fit (a long image path): wrapping measures
        # every word at each draw.
        wrap = max(map(len, text.splitlines())) * _CHAR_INCHES > self.width - 0.2
        # parse_math=False everywhere: titles carry file, layer and class names, where "$" is
        # a dollar sign, not mathtext ("price $x^{$.png" would fail to draw).
        self.heading = self.figure.suptitle(
            text, x=0.5, y=1 - 0.1 / self.height, ha="center", va="top", fontsize=10, wrap=wrap, parse_math=False
        )


#: Width of an average character of the 10-point titles, in inches (DejaVu Sans).
_CHAR_INCHES = 0.08


def _photo_inches(photo: np.ndarray, longest: float) -> tuple[float, float]:
    """(width, height) in inches that show ``photo`` one pixel to one dot, its long side kept
    within [2.24 in, ``longest``]: the model's 224-pixel input is drawn as it is, not blown
    up (which only blurs it, and makes every picture slower to draw and to compress)."""
    height, width = photo.shape[:2]
    long_side = min(max(max(height, width) / DPI, 2.24), longest)
    scale = long_side / max(height, width)
    return width * scale, height * scale


def png_bytes(figure: Figure) -> bytes:
    """The figure as an RGB PNG: the pictures are opaque, so the alpha channel would only
    add a quarter more data to filter and compress."""
    figure.canvas.draw()
    return _encode(figure)


def _encode(figure: Figure) -> bytes:
    """The figure's canvas, as drawn, as a PNG."""
    from PIL import Image

    rgba = figure.canvas.buffer_rgba()
    buffer = io.BytesIO()
    Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1).convert("RGB").save(
        buffer, format="png", compress_level=PNG_COMPRESSION, dpi=(figure.dpi, figure.dpi)
    )
    return buffer.getvalue()


def _shape(shape) -> str:
    return "-" if shape is None else "x".join(str(d) for d in shape)


def _target_text(explanation) -> str:
    target = explanation.target
    if explanation.task == "detect":
        return _detections_text(explanation.prediction)
    if target is None:
        return "no target"
    measure = "mean p over its pixels" if explanation.task == "segment" else "p"
    return f"target {target.label}, {measure}={target.probability:.3f}"


def _layer_text(layer) -> str:
    asked = "" if layer.requested in (layer.name, "(default)") else f" (asked: {layer.requested})"
    default = " (default layer)" if layer.requested == "(default)" else ""
    return f"{layer.name}{asked}{default} [{layer.module_type}]"


def _fmt(value: float) -> str:
    return f"{value:.3g}"


NO_FINITE = "no finite values"
#: Where a map is NaN or infinite: a grey no colormap here uses, not the colour of zero.
NOT_FINITE_COLOUR = "0.55"


def _norm_for(values: np.ndarray, signed: bool):
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return Normalize(0, 1), NO_FINITE
    low, high = float(finite.min()), float(finite.max())
    holes = f", {values.size - finite.size} not finite (grey)" if finite.size < values.size else ""
    if low == high:
        # A flat map: keep the colorbar readable and let the colour carry sign and size.
        limit = abs(low) or 1.0
        note = f"constant {_fmt(low)} everywhere{holes}"
        if signed:
            return TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit), note
        return Normalize(min(0.0, low), max(0.0, low) or 1.0), note
    note = f"min {_fmt(low)}, max {_fmt(high)}{holes}"
    if signed:
        limit = max(abs(low), abs(high))
        return TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit), note
    return Normalize(low, high), note


class _ValueBar:
    """A colorbar drawn once, whose three value labels (bottom, middle, top) change.

    The bar is matplotlib's colorbar of a fixed 0..1 scale with tick marks at 0, 1/2 and 1;
    the labels are Texts of their own beside those marks, so a reused figure redraws three
    labels instead of a whole axis and its locator. The images keep their true norms.
    """

    FRACTIONS = (0.0, 0.5, 1.0)

    def __init__(self, figure: Figure, cax, cmap, label: str = ""):
        self.bar = figure.colorbar(ScalarMappable(norm=Normalize(0, 1), cmap=cmap), cax=cax, ticks=self.FRACTIONS)
        self.bar.ax.set_yticklabels([])
        # Where matplotlib puts tick labels: past the tick (3.5 pt) and its pad (3.5 pt).
        beside = offset_copy(cax.transAxes, figure, x=7, units="points")
        if label:
            # Beyond the widest value label ("-1.23e+04" at 7 pt), which the bar cannot measure.
            self.bar.set_label(label, fontsize=8, parse_math=False)
            cax.yaxis.set_label_coords(1, 0.5, transform=offset_copy(cax.transAxes, figure, x=44, units="points"))
        self.labels = [
            cax.text(1, f, "", transform=beside, fontsize=7, va="center", ha="left", parse_math=False)
            for f in self.FRACTIONS
        ]

    def set_norm(self, norm) -> None:
        """Label the bar with the values ``norm`` maps to its bottom, middle and top;
        ``None`` leaves it unlabelled (no finite values)."""
        for text, fraction in zip(self.labels, self.FRACTIONS):
            text.set_text("" if norm is None else _fmt(float(norm.inverse(fraction))))


class _MapPanel:
    """One channel-summed map with its colorbar; ``update`` redraws it in place.

    A 2-D map keeps its image and colorbar between images; a vector (no spatial layout)
    or a missing tensor is simply drawn again.
    """

    def __init__(self, figure: Figure, ax, cax, signed: bool, missing: str):
        self.figure, self.ax, self.cax = figure, ax, cax
        self.signed, self.missing = signed, missing
        self.image = None
        self.bar = None

    def changing(self) -> list | None:
        """The artists that change between images, or ``None`` when the panel is redrawn whole."""
        if self.image is None:
            return None
        return [self.image, *self.ax.spines.values(), self.ax.title, *self.bar.labels]

    def update(self, values: np.ndarray | None, title: str, missing: str | None = None) -> None:
        """Draw ``values``; without them, ``missing`` (else the panel's own words) says why."""
        if values is None or values.ndim != 2 or self.image is None:
            # Drawn anew: a missing tensor, a vector, or the first 2-D map.
            self.ax.clear()
            self.cax.clear()
            self.image = self.bar = None
        if values is None:
            self.ax.set_title(title, fontsize=9, parse_math=False)
            self.ax.text(
                0.5, 0.5, missing or self.missing, ha="center", va="center", fontsize=9,
                transform=self.ax.transAxes, parse_math=False,
            )
            self.ax.set_axis_off()
            self.cax.set_axis_off()
            return
        norm, note = _norm_for(values, self.signed)
        # Raised past the colourbar's top value label, which a title wider than its map reaches.
        self.ax.set_title(f"{title}\n{note}", fontsize=9, parse_math=False, pad=10)
        if values.ndim == 1:
            # Lines, not bars: a single spike among 1000 features must stay visible.
            colour = "tab:red" if self.signed else "tab:blue"
            self.ax.vlines(np.arange(values.size), 0, values, colors=colour, linewidth=1.0)
            self.ax.set_xlim(-0.5, values.size - 0.5)
            self.ax.axhline(0, color="black", linewidth=0.5)
            self.ax.set_xlabel("feature index", fontsize=8, parse_math=False)
            self.ax.tick_params(labelsize=7)
            self.cax.set_axis_off()
            return
        if self.image is None:  # kept, with its bar, for the next images' maps
            cmap = matplotlib.colormaps[GRADIENT_CMAP if self.signed else ACTIVATION_CMAP]
            self.image = self.ax.imshow(
                values, cmap=cmap.with_extremes(bad=NOT_FINITE_COLOUR), norm=norm, interpolation="nearest"
            )
            self.ax.set_xticks([])
            self.ax.set_yticks([])
            self.bar = _ValueBar(self.figure, self.cax, cmap)
        self.image.set_data(values)
        self.image.set_norm(norm)
        self.bar.set_norm(None if note == NO_FINITE else norm)


# ----------------------------------------------------------------------------- summary
#
# Each builder lays out its figure and returns it with an ``update`` function that draws
# one image's data into it (the contract is in ``hookviz.pictures``). The render workers
# reuse a figure per layer and picture (``FigureCache``): only the data, norms and texts
# change between images.


def summary_parts(explanation, layer):
    width, height = _photo_inches(explanation.image.shown, longest=3.9)
    left = 0.25 + max(width, 2.4) + 0.6  # room for the photo's title
    sheet = _Sheet(left + 7.8, 7.5)
    photo_ax = sheet.axes(0.25 + (max(width, 2.4) - width) / 2, 4.0 - height / 2, width, height)
    photo = photo_ax.imshow(explanation.image.shown, interpolation="bilinear")
    photo_ax.set_axis_off()
    photo_ax.set_title("model input (after preprocessing)", fontsize=9)
    side = 2.45
    cells = {
        "input": (left, 1.2), "output": (left + 4.05, 1.2),
        "grad_input": (left, 4.55), "grad_output": (left + 4.05, 4.55),
    }
    panels = {}
    for label, (left, top) in cells.items():
        signed = label.startswith("grad")
        ax = sheet.axes(left, top, side, side)
        ax.set_anchor("N")  # a wide map hangs from its cell's top: its title stays above the colourbar's
        panels[label] = _MapPanel(
            sheet.figure, ax, sheet.axes(left + side + 0.12, top, 0.13, side),
            signed, "no gradient reached this tensor" if signed else "not recorded",
        )

    def update(explanation, layer):
        photo.set_data(explanation.image.shown)
        for label, panel in panels.items():
            values = layer.maps[label]
            shape = layer.shapes[label]
            # A recorded tensor without a map: its shape reads channels-first and -last alike.
            unread = f"{_shape(shape)}: channels first or last?\nnot drawn (see report.json)" if shape is not None else None
            panel.update(values, f"{label} {_shape(shape)}, {_how(shape, values)}" if values is not None else label, unread)
        sheet.title(
            f"{explanation.model} · {_layer_text(layer)} · output {_shape(layer.shapes['output'])}\n"
            f"{_target_text(explanation)} · {_objective_text(explanation)} · {explanation.image.source.label}"
        )

    update(explanation, layer)
    parts = [panel.changing() for panel in panels.values()]
    changing = None if None in parts else [photo, *(a for part in parts for a in part), sheet.heading]
    return sheet.figure, update, changing


def _detections_text(prediction) -> str:
    """``3 detections of class person with score ≥ 0.5`` (``no detections ...`` when none)."""
    count = len(prediction.detections) if prediction is not None else 0
    details = prediction.details if prediction is not None else {}
    of = f" of class {details['target']}" if details.get("target") is not None else ""
    number = "no" if not count else str(count)
    return f"{number} detection{'s' if count != 1 else ''}{of} with score ≥ {details.get('score_threshold')}"


def _objective_text(explanation) -> str:
    """What the gradient panels are the gradients of."""
    if explanation.task == "detect":
        count = len(explanation.prediction.detections) if explanation.prediction is not None else 0
        return f"gradients of the sum of the {count} detection scores" if count else "no gradients: nothing to explain"
    return f"objective {explanation.objective}"


def _how(shape, values) -> str:
    """How a tensor became the panel's picture, so token grids are not mistaken for images."""
    if values is None:
        return "not recorded"
    if values.ndim != 2:
        return "per feature"
    if shape is not None and len(shape) == 3:
        rows, cols = values.shape
        prefix = shape[1] - rows * cols  # class, distillation and register tokens
        dropped = "" if prefix < 1 else ", first token dropped" if prefix == 1 else f", first {prefix} tokens dropped"
        return f"summed over channels\ntokens as a {rows}x{cols} grid{dropped}"
    return "summed over channels"


def summary_figure(explanation, layer) -> Figure:
    """The layer's four tensors summed over channels, in a 2x2 grid (input, output,
    grad_input, grad_output) as the usual hook snippets plot them, with the photo beside it
    and a title naming model, layer, shape and target."""
    return summary_parts(explanation, layer)[0]


# ----------------------------------------------------------------------------- channel grid


def _tiles_for(explanation, layer, which: str, channels):
    tiles = layer.tiles.get(which)
    full = layer.output if which == "output" else layer.grad_output
    if channels is not None and full is not None:
        selection = ChannelSelection.parse(channels)
        tiles, _ = channel_tiles(full, layer.layout, selection, by_magnitude=which != "output")
    return tiles


def _grid_geometry(tiles):
    count = len(tiles.indices)
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    height, width = tiles.maps.shape[1:]
    pad = max(1, round(max(height, width) * 0.08))
    gap = max(pad, round(height * 0.3))  # room above each tile for its label
    return columns, rows, height, width, pad, gap


def _tile_ranges(maps: np.ndarray):
    """Each tile's finite min and max, and whether it has no finite value at all."""
    maps = maps.astype(np.float64)
    finite = np.isfinite(maps)
    blank = ~finite.any(axis=(1, 2))
    low = np.where(blank, 0.0, np.where(finite, maps, np.inf).min(axis=(1, 2)))
    high = np.where(blank, 0.0, np.where(finite, maps, -np.inf).max(axis=(1, 2)))
    return low, high, blank


def _tile_values(maps: np.ndarray, low, high, signed: bool, scale: str):
    """The values drawn and their norm: on the ``tile`` scale, each tile mapped to -1..1
    (signed, centred on zero) or 0..1 (its min to its max; a flat tile is all 0)."""
    maps = maps.astype(np.float64)
    if scale != "tile":
        norm, note = _norm_for(maps, signed)
        return maps, norm, note
    if signed:
        limit = np.maximum(np.abs(low), np.abs(high))
        return maps / np.where(limit > 0, limit, 1.0)[:, None, None], Normalize(-1, 1), ""
    span = (high - low)[:, None, None]
    scaled = np.where(span > 0, (maps - low[:, None, None]) / np.where(span > 0, span, 1.0), 0.0)
    return scaled, Normalize(0, 1), ""


def _tile_scope(low: float, high: float, blank: bool, signed: bool, scale: str) -> str:
    """What a tile's label says of its values: ``=v`` when flat, else the range its colours span."""
    if low == high and not blank:
        return f" ={_fmt(low)}"  # a flat tile: its one value, not a range
    if scale != "tile":
        return ""
    if signed:  # the tile's colours span -L..L
        return f" ±{_fmt(max(abs(low), abs(high)))}"
    return f" [{_fmt(low)}, {_fmt(high)}]"


def channels_parts(explanation, layer, which: str = "output", channels=None, scale: str = "tile"):
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
    sheet = _Sheet(grid_width + 1.9, grid_height + 1.0)
    ax = sheet.axes(0.2, 0.8, grid_width, grid_height)
    bar_height = min(grid_height, 5.0)
    cax = sheet.axes(0.2 + grid_width + 0.2, 0.8 + (grid_height - bar_height) / 2, 0.18, bar_height)
    colormap = matplotlib.colormaps[GRADIENT_CMAP if signed else ACTIVATION_CMAP].with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(np.full(shape, np.nan)), cmap=colormap, interpolation="nearest")
    font = 6 if columns > 6 else 8
    labels = [
        ax.text(
            c * (width + pad) - 0.5, r * (height + gap) + gap - 0.6, "",
            fontsize=font, va="bottom", ha="left", parse_math=False,
        )
        for r, c in (divmod(slot, columns) for slot in range(len(tiles.indices)))
    ]
    ax.set_axis_off()
    if scale == "tile":
        bar_label = "each tile on its own scale: " + (
            "value / max|value| of the tile" if signed else "tile min (0) to tile max (1)"
        )
    else:
        bar_label = "one scale for all tiles"
    bar = _ValueBar(sheet.figure, cax, colormap, bar_label)

    def update(explanation, layer):
        tiles = _tiles_for(explanation, layer, which, channels)
        low, high, blank = _tile_ranges(tiles.maps)
        maps, norm, note = _tile_values(tiles.maps, low, high, signed, scale)
        # Tiles in reading order, each below a strip for its label, separated by columns of NaN.
        slots = np.full((rows * columns, height + gap, width + pad), np.nan)
        slots[: len(maps), gap:, :width] = maps
        mosaic = slots.reshape(rows, columns, height + gap, width + pad).transpose(0, 2, 1, 3)
        mosaic = mosaic.reshape(rows * (height + gap), columns * (width + pad))[:, : shape[1]]
        for slot, channel in enumerate(tiles.indices):
            labels[slot].set_text(f"#{channel}{_tile_scope(low[slot], high[slot], blank[slot], signed, scale)}")
        image.set_data(np.ma.masked_invalid(mosaic))
        image.set_norm(norm)
        bar.set_norm(None if note == NO_FINITE else norm)
        flat = int(((low == high) & ~blank).sum())
        flat_note = "" if not flat else " · every tile is constant (=value)" if flat == len(low) else f" · {flat} constant tiles (=value)"
        sheet.title(
            f"{explanation.model} · {_layer_text(layer)} · {which} {_shape(layer.shapes[which])} · "
            f"{len(tiles.indices)} of {tiles.total} channels{flat_note}\n{_target_text(explanation)}"
        )

    update(explanation, layer)
    return sheet.figure, update, [image, *labels, *bar.labels, sheet.heading]


def channels_figure(
    explanation, layer, which: str = "output", channels: str | int | Sequence[int] | None = None, scale: str = "tile"
) -> Figure | None:
    """A grid of one tile per channel, each labelled with its index (and, on the default
    per-tile scale, the range its colours span: ``[min, max]``, or ``±L`` for gradients).

    Uses the tiles chosen when the layer was summarised; ``channels`` picks others, which
    needs the full tensors (``explain`` keeps them). Returns ``None`` for a tensor without
    spatial layout.
    """
    made = channels_parts(explanation, layer, which, channels, scale)
    return None if made is None else made[0]


# ----------------------------------------------------------------------------- CAM


def _upsample(cam: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    image = Image.fromarray(np.asarray(cam, dtype=np.float32), mode="F")
    return np.asarray(image.resize((size[1], size[0]), Image.BILINEAR), dtype=np.float64)


def _visible(cam: np.ndarray, window) -> np.ndarray:
    """The part of a CAM over the photo: a detector pads its batch, and ``window`` is the
    (height, width) fraction of the padded input the photo covers."""
    if not window:
        return cam
    rows = max(1, min(cam.shape[0], round(cam.shape[0] * window[0])))
    cols = max(1, min(cam.shape[1], round(cam.shape[1] * window[1])))
    return cam[:rows, :cols]


class _Overlay:
    """A CAM drawn over the photo, with an opaque colorbar of the raw values (and, for a
    detection, its box)."""

    def __init__(self, figure: Figure, ax, cax, photo: np.ndarray, cam: np.ndarray):
        from matplotlib.patches import Rectangle

        self.ax = ax
        ax.set_anchor("N")  # a thin photo hangs from the top of its box, level with the colourbar's top
        self.photo = ax.imshow(photo, interpolation="bilinear")
        self.heat = ax.imshow(_upsample(cam, photo.shape[:2]), cmap=CAM_CMAP, alpha=CAM_ALPHA, interpolation="bilinear")
        self.box = ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, edgecolor="white", linewidth=2, visible=False))
        ax.set_axis_off()
        # The colorbar has an opaque scale of its own, so its colours are readable.
        self.bar = _ValueBar(figure, cax, CAM_CMAP, _cam_label(cam))

    @property
    def changing(self) -> list:
        return [self.photo, self.heat, self.box, self.ax.title, *self.bar.labels]

    def update(self, photo: np.ndarray, cam: np.ndarray, title: str, window=None, box=None) -> None:
        finite = np.isfinite(cam)
        top = float(cam[finite].max()) if finite.any() else 0.0
        norm = Normalize(0.0, top if top > 0 else 1.0)
        self.photo.set_data(photo)
        self.heat.set_data(np.ma.masked_invalid(_upsample(_visible(cam, window), photo.shape[:2])))
        self.heat.set_norm(norm)
        self.bar.set_norm(norm if finite.any() else None)
        self.box.set_visible(box is not None)
        if box is not None:
            x0, y0, x1, y1 = box
            self.box.set_bounds(x0, y0, x1 - x0, y1 - y0)
        if not finite.any():
            note = " (no finite values: NaN or Inf)"
        elif not finite.all():
            note = f" ({int((~finite).sum())} values not finite, left out)"
        elif top == 0:
            note = " (all zero: nothing here raises this class)"
        elif cam.size == 1:
            note = " (a 1x1 map: no spatial detail)"
        else:
            note = ""
        self.ax.set_title(title + note, fontsize=9, parse_math=False)


def _cam_label(cam: np.ndarray) -> str:
    return f"CAM (raw, {cam.shape[0]}x{cam.shape[1]} map)"


#: The smallest box a CAM panel gets, in inches: a thin photo hangs centred in it, so the
#: panels' titles have the width of the usual 224-pixel input, and the colourbar the height
#: of its label.
_MIN_PANEL = 2.24


def _cam_boxes(photo: np.ndarray, cam: np.ndarray, longest: float) -> tuple[float, float]:
    """(width, height) in inches of a CAM panel and its colourbar: the photo's, at least
    ``_MIN_PANEL`` wide and as tall as the bar's label (8 pt, vertical) is long."""
    width, height = _photo_inches(photo, longest)
    return max(width, _MIN_PANEL), max(height, len(_cam_label(cam)) * _CHAR_INCHES * 0.8 + 0.3)


def photo_of(explanation) -> np.ndarray:
    """The photo a CAM is drawn on: what the model saw, or the whole photo with ``--no-crop``."""
    return explanation.image.whole if explanation.image.whole is not None else explanation.image.shown


def _cam_heading(explanation, layer) -> str:
    return f"{explanation.model} · {_layer_text(layer)} · output {_shape(layer.shapes['output'])}"


def cam_parts(explanation, layer):
    if explanation.task == "detect":
        return cam_topk_parts(explanation, layer, detections=True)  # one panel per detection, with its box
    if layer.cam is None:
        return None
    photo = photo_of(explanation)
    panel, side = _cam_boxes(photo, layer.cam, longest=4.3)
    heading = _cam_heading(explanation, layer)
    content = 2 * panel + 0.3 + 0.3 + 0.9
    width = max(0.2 + content, len(heading) * _CHAR_INCHES + 0.4)
    x = (width - content) / 2  # the panels centred under a title wider than they are
    sheet = _Sheet(width, 0.95 + side + 0.2)
    left = sheet.axes(x, 0.95, panel, side)
    left.set_anchor("N")
    plain = left.imshow(photo, interpolation="bilinear")
    left.set_axis_off()
    left.set_title("model input" if explanation.image.whole is None else "whole photo (resized, not cropped)", fontsize=9)
    overlay = _Overlay(sheet.figure, sheet.axes(x + panel + 0.3, 0.95, panel, side),
                       sheet.axes(x + 2 * panel + 0.45, 0.95, 0.15, side), photo, layer.cam)

    def update(explanation, layer):
        photo = photo_of(explanation)
        plain.set_data(photo)
        overlay.update(photo, layer.cam, f"{explanation.cam_method} for {explanation.target.label}", _window(explanation))
        sheet.title(f"{_cam_heading(explanation, layer)}\n{_target_text(explanation)}")

    update(explanation, layer)
    return sheet.figure, update, [plain, *overlay.changing, sheet.heading]


def cam_figure(explanation, layer) -> Figure | None:
    """The target's CAM over the photo the model saw, beside the photo alone."""
    made = cam_parts(explanation, layer)
    return None if made is None else made[0]


def _window(explanation):
    prediction = explanation.prediction
    return prediction.details.get("window") if prediction is not None else None


#: Panels a row of CAMs holds before the next row starts (20 detections make four rows, not one).
_PANELS_PER_ROW = 5


def cam_topk_parts(explanation, layer, detections: bool = False):
    """CAMs side by side: of the top-K classes, or (``detections``) of each detection, its
    box drawn over it."""
    if not layer.topk_cams or (explanation.task == "detect") != detections:
        return None
    photo = photo_of(explanation)
    most_said = max((cam for _, cam in layer.topk_cams), key=lambda cam: len(_cam_label(cam)))  # the longest bar label
    panel, side = _cam_boxes(photo, most_said, longest=3.5)
    stride, rise = panel + 1.25, side + 1.0
    columns = min(len(layer.topk_cams), _PANELS_PER_ROW)
    rows = math.ceil(len(layer.topk_cams) / columns)
    sheet = _Sheet(0.2 + columns * stride, 0.2 + rows * rise)
    overlays = []
    for k, (_, cam) in enumerate(layer.topk_cams):
        left, top = 0.2 + (k % columns) * stride, 1.0 + (k // columns) * rise
        overlays.append(_Overlay(sheet.figure, sheet.axes(left, top, panel, side),
                                 sheet.axes(left + panel + 0.12, top, 0.13, side), photo, cam))

    def update(explanation, layer):
        photo = photo_of(explanation)
        for overlay, (focus, cam) in zip(overlays, layer.topk_cams):
            if detections:
                rank = explanation.prediction.detections.index(focus) + 1
                overlay.update(photo, cam, f"{rank}. {focus.name or 'class'} ({focus.index})\nscore {focus.score:.3f}",
                               _window(explanation), focus.box)
            else:
                overlay.update(photo, cam, f"{focus.label}\np={focus.probability:.3f}", _window(explanation))
        count = len(layer.topk_cams)
        what = f"{count} detection{'s' if count != 1 else ''}" if detections else \
            f"the top {count} class{'es' if count != 1 else ''}"
        sheet.title(f"{explanation.model} · {_layer_text(layer)} · {explanation.cam_method} of {what}")

    update(explanation, layer)
    return sheet.figure, update, [a for overlay in overlays for a in overlay.changing] + [sheet.heading]


def cam_topk_figure(explanation, layer) -> Figure | None:
    """CAMs of the top-K classes side by side, each on its own colour scale."""
    made = cam_topk_parts(explanation, layer)
    return None if made is None else made[0]


# ----------------------------------------------------------------------------- prediction


def _class_colour(index: int):
    return matplotlib.colormaps["tab20"](index % 20)


def prediction_figure(explanation) -> Figure | None:
    """What the model predicted, over the photo it saw: a segmentation's mask with a legend
    of the classes present, or a detector's boxes with labels and scores. ``None`` for a
    classifier (its top-5 is in every title and in the gallery)."""
    prediction = explanation.prediction
    if prediction is None or explanation.task not in ("segment", "detect"):
        return None
    photo = explanation.image.shown
    width, height = _photo_inches(photo, longest=6.0)
    legend = 2.6 if explanation.task == "segment" else 0.0
    title = f"{explanation.model} · {_prediction_text(explanation)}\n{explanation.image.source.label}"
    sheet_width = max(0.4 + width + legend, max(map(len, title.splitlines())) * _CHAR_INCHES + 0.4)
    sheet = _Sheet(sheet_width, 0.9 + height + 0.2)
    ax = sheet.axes((sheet_width - width - legend) / 2, 0.9, width, height)
    ax.imshow(photo, interpolation="bilinear")
    ax.set_axis_off()
    if explanation.task == "segment":
        _draw_mask(ax, prediction)
    else:
        _draw_detections(ax, prediction, photo.shape)
    sheet.title(title)
    return sheet.figure


def _prediction_text(explanation) -> str:
    prediction = explanation.prediction
    if explanation.task == "segment":
        count = sum(1 for c in prediction.details["classes"] if c["index"] != 0)
        return f"predicted mask: {count} class{'es' if count != 1 else ''} besides background" if count else \
            "predicted mask: background only"
    return _detections_text(prediction)


def _draw_mask(ax, prediction) -> str:
    from matplotlib.patches import Patch

    mask = prediction.mask
    colours = np.zeros((*mask.shape, 4))
    classes = [c for c in prediction.details["classes"] if c["index"] != 0]
    for entry in classes:
        colours[mask == entry["index"]] = _class_colour(entry["index"])[:3] + (0.55,)
    ax.imshow(colours, interpolation="nearest")
    handles = [
        Patch(color=_class_colour(c["index"]), label=f"{c['name'] or c['index']}  {100 * c['fraction']:.1f}%")
        for c in classes[:14]
    ]
    background = next((c for c in prediction.details["classes"] if c["index"] == 0), None)
    if background is not None:
        handles.append(Patch(facecolor="none", edgecolor="0.5", label=f"{background['name'] or 0}  {100 * background['fraction']:.1f}%"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False,
              title="predicted classes (share of pixels)", title_fontsize=8)


def _draw_detections(ax, prediction, shape) -> None:
    from matplotlib.patches import Rectangle

    threshold = prediction.details.get("score_threshold")
    for rank, detection in enumerate(prediction.detections, start=1):
        x0, y0, x1, y1 = detection.box
        colour = _class_colour(detection.index)
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=colour, linewidth=2))
        right = x0 > 0.6 * shape[1]  # a label near the right edge ends at its box's right side
        above = y0 > 0.05 * shape[0]
        ax.text(x1 if right else x0, y0 if above else y1, f"{rank}. {detection.name or detection.index} {detection.score:.2f}",
                fontsize=8, va="bottom" if above else "top", ha="right" if right else "left", color="black",
                bbox={"facecolor": colour, "alpha": 0.85, "pad": 1, "linewidth": 0}, parse_math=False)
    if not prediction.detections:
        of = f" of class {prediction.details['target']}" if prediction.details.get("target") is not None else ""
        ax.text(0.5, 0.5, f"no detections{of} ≥ {threshold}", transform=ax.transAxes, ha="center", va="center",
                fontsize=14, color="white", bbox={"facecolor": "black", "alpha": 0.6}, parse_math=False)
# ----------------------------------------------------------------------------- diff


def diff_parts(image, layer):
    """The change of one layer from the baseline (a ``diffing.ImageDiff`` and ``LayerDiff``):
    the channel-summed output before and after on one sequential scale, their difference on
    a diverging scale centred on zero, and the CAM before and after on one scale. Redrawn
    whole for each image; ``None`` when there is neither an output map nor a CAM to compare."""
    if layer.maps is None and (layer.cam is None or layer.cam.maps is None):
        return None
    sheet = _Sheet(11.6, 7.7)

    def update(image, layer):
        sheet.figure.clear()
        _draw_diff(sheet, image, layer)

    update(image, layer)
    return sheet.figure, update, None


def _draw_diff(sheet: _Sheet, image, layer) -> None:
    side, stride = 2.5, 3.85
    slots = [sheet.axes(0.35 + k * stride, 1.25, side, side) for k in range(3)]
    bars = [sheet.axes(0.35 + k * stride + side + 0.1, 1.25, 0.13, side) for k in range(3)]
    lower = [sheet.axes(0.35 + k * stride, 4.75, side, side) for k in range(2)]
    lower_bars = [sheet.axes(0.35 + k * stride + side + 0.1, 4.75, 0.13, side) for k in range(2)]
    maps = layer.maps
    if maps is None:
        for ax, bar in zip(slots, bars):
            _empty(ax, bar, "output not comparable\n(shapes differ, or not recorded)")
    else:
        where = "the layer's resolution (saved tensors)" if maps.source == "tensors" else "area means of the fingerprint"
        shape = "x".join(map(str, maps.before.shape))
        if maps.before.ndim == 1:
            shape = f"{maps.before.size} values"
        norm = _shared_norm(maps.before, maps.after)
        _diff_panel(sheet.figure, slots[0], bars[0], maps.before, norm, ACTIVATION_CMAP, f"output before\n{shape}, {where}")
        _diff_panel(sheet.figure, slots[1], bars[1], maps.after, norm, ACTIVATION_CMAP, "output after\nsame scale as before (it spans both)")
        change = maps.after.astype(np.float64) - maps.before.astype(np.float64)
        limit = float(np.nanmax(np.abs(change))) if np.isfinite(change).any() else 0.0
        diverging = TwoSlopeNorm(vcenter=0.0, vmin=-(limit or 1.0), vmax=limit or 1.0)
        title = f"after - before\nmax |diff| {_fmt(limit)}" + (" (identical)" if limit == 0 else "")
        _diff_panel(sheet.figure, slots[2], bars[2], change, diverging, GRADIENT_CMAP, title)
    cam = layer.cam
    if cam is None or cam.maps is None:
        for ax, bar in zip(lower, lower_bars):
            _empty(ax, bar, "no CAM to compare")
    else:
        cams = cam.maps
        top = max(float(np.nanmax(c)) if np.isfinite(c).any() else 0.0 for c in (cams.before, cams.after))
        norm = Normalize(0.0, top if top > 0 else 1.0)
        shown = "x".join(map(str, cams.before.shape))
        whole = "x".join(map(str, cam.layer_shape or cams.before.shape))
        kind = f"raw {shown}" if shown == whole else f"{shown} area means of the {whole} map"
        _diff_panel(sheet.figure, lower[0], lower_bars[0], cams.before, norm, CAM_CMAP, f"CAM before\n{kind}")
        _diff_panel(sheet.figure, lower[1], lower_bars[1], cams.after, norm, CAM_CMAP, "CAM after\nsame scale as before (it spans both)")
    sheet.figure.text(0.35 + 2 * stride, 4.75, _diff_text(image, layer), transform=_inches(sheet),
                      va="top", ha="left", fontsize=9, family="monospace", parse_math=False)
    sheet.title(f"change from the baseline · {layer.name} [{layer.module_type}]\n{image.image}")


def _inches(sheet: _Sheet):
    """Figure coordinates in inches from the top-left corner, as ``_Sheet.axes`` places axes."""
    from matplotlib.transforms import Affine2D

    return Affine2D().scale(1 / sheet.width, -1 / sheet.height).translate(0, 1) + sheet.figure.transFigure


def _diff_text(image, layer) -> str:
    """The figures beside the CAMs: what changed, in numbers."""
    before, after = image.target
    p_change = "n/a" if image.probability_change is None else f"{image.probability_change:+.3g}"
    lines = [
        f"target before: {before.get('name') or before.get('index')}",
        f"target after:  {after.get('name') or after.get('index')}",
        f"P(target before) change: {p_change}",
        "",
    ]
    for tensor in layer.tensors:
        figures = tensor.tensor or tensor.map
        if figures is not None:
            cosine = "n/a" if not math.isfinite(figures.cosine) else f"{figures.cosine:.6f}"
            lines.append(f"{tensor.name}: rel {_fmt(figures.max_rel)}, cos {cosine}")
    if layer.cam is not None:
        corr = "n/a" if layer.cam.corr is None or not math.isfinite(layer.cam.corr) else f"{layer.cam.corr:.4f}"
        shift = "n/a" if layer.cam.peak_shift is None else f"{layer.cam.peak_shift:.1f} px"
        lines += ["", f"CAM correlation: {corr}", f"CAM peak moved:  {shift}"]
    lines += ["", "rel: max |after - before|", "     / max |before|"]
    return "\n".join(lines)


def _shared_norm(before: np.ndarray, after: np.ndarray) -> Normalize:
    values = np.concatenate([np.ravel(before), np.ravel(after)]).astype(np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Normalize(0, 1)
    low, high = float(values.min()), float(values.max())
    return Normalize(low, high) if high > low else Normalize(min(0.0, low), max(0.0, high) or 1.0)


def _diff_panel(figure: Figure, ax, cax, values: np.ndarray, norm, cmap_name: str, title: str) -> None:
    """One map on a given scale with a colorbar of its true values; a vector as lines."""
    ax.set_title(title, fontsize=9, parse_math=False)
    if values.ndim == 1:
        colour = "tab:red" if isinstance(norm, TwoSlopeNorm) else "tab:blue"
        ax.vlines(np.arange(values.size), 0, values, colors=colour, linewidth=1.0)
        ax.set_xlim(-0.5, values.size - 0.5)
        ax.set_ylim(norm.vmin, norm.vmax)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_xlabel("feature", fontsize=8)
        ax.tick_params(labelsize=7)
        cax.set_axis_off()
        return
    cmap = matplotlib.colormaps[cmap_name]
    ax.imshow(values, cmap=cmap.with_extremes(bad=NOT_FINITE_COLOUR), norm=norm, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    _ValueBar(figure, cax, cmap).set_norm(norm)


def _empty(ax, cax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, transform=ax.transAxes, parse_math=False)
    ax.set_axis_off()
    cax.set_axis_off()


# ----------------------------------------------------------------------------- reuse


def configure_worker() -> None:
    """Settings for a process that only renders (hookviz's workers), never for a user's:
    figures are kept for reuse (``worker_cache``), and text is drawn faster.

    Text is drawn without FreeType's hinting: at 100 dpi it looks the same, and glyphs (the
    channel grid alone has 64 labels) render about twice as fast as with the autohinter.
    Fonts are read from memory (below).
    """
    global _worker_cache
    matplotlib.rcParams["text.hinting"] = "no_hinting"
    _read_fonts_from_memory()
    _worker_cache = FigureCache()


def _read_fonts_from_memory() -> bool:
    """Hand FreeType each font file's bytes instead of the open file, as matplotlib 3.12
    does (matplotlib#32064).

    Before that, FreeType reads every glyph it draws through Python file calls: about ten
    seeks and four reads, each a system call. With the font in memory the same pictures
    cost ~17% less to make (146 -> 121 ms per image, measured), pixel for pixel the same
    (tests/test_rendering.py). Only for matplotlib before 3.12, and only where its font
    manager still builds fonts the way this expects; otherwise nothing changes.
    """
    import os
    import types

    from matplotlib import font_manager, ft2font

    if matplotlib.__version_info__[:2] >= (3, 12) or getattr(font_manager, "ft2font", None) is not ft2font:
        return fonts_from_memory()
    contents: dict = {}

    def font_from_memory(path, *args, **kwargs):
        if isinstance(path, (str, bytes, os.PathLike)):
            if path not in contents:
                with open(path, "rb") as stream:
                    contents[path] = stream.read()
            path = io.BytesIO(contents[path])
        return ft2font.FT2Font(path, *args, **kwargs)

    patched = types.ModuleType(ft2font.__name__)
    patched.__dict__.update(ft2font.__dict__)
    patched.FT2Font = font_from_memory
    patched.hookviz_fonts_from_memory = True
    font_manager.ft2font = patched
    return True


def fonts_from_memory() -> bool:
    """Whether this process's font manager reads fonts from memory (``configure_worker``)."""
    from matplotlib import font_manager

    return bool(getattr(getattr(font_manager, "ft2font", None), "hookviz_fonts_from_memory", False))


def warm_up() -> None:
    """Load what the first picture would: fonts, colormaps, the Agg canvas."""
    sheet = _Sheet(2.0, 1.0)
    ax = sheet.axes(0.1, 0.3, 1.0, 0.6)
    sheet.figure.colorbar(ax.imshow(np.eye(2), cmap=ACTIVATION_CMAP), cax=sheet.axes(1.3, 0.3, 0.1, 0.6))
    sheet.title("warm-up 0.123")
    png_bytes(sheet.figure)


class _Reused:
    """A figure kept for the next images of its layer, and how to draw one image into it.

    Only the artists that change are redrawn (matplotlib's blitting): the rest of the
    figure is drawn once, kept as pixels, and restored under each new image's data.
    ``changing`` is ``None`` for a figure that must be redrawn whole each time.
    """

    def __init__(self, figure: Figure, update, changing: list | None):
        self.figure, self.update, self.changing = figure, update, changing
        self.background = None
        for artist in changing or ():
            artist.set_animated(True)  # left out of the full draw that makes the background

    def png(self) -> bytes:
        if self.changing is None:
            return png_bytes(self.figure)
        canvas = self.figure.canvas
        if self.background is None:
            canvas.draw()
            self.background = canvas.copy_from_bbox(self.figure.bbox)
        else:
            canvas.restore_region(self.background)
        for artist in self.changing:
            self.figure.draw_artist(artist)
        return _encode(self.figure)


class FigureCache:
    """Figures kept for the next images of their layer, at most ``size`` of them, the most
    recently used last. Only render workers keep one (``configure_worker``): a caller's
    process never holds figures after a call returns."""

    def __init__(self, size: int = 24):
        self.size = size
        self._entries: dict = {}

    def take(self, key) -> "_Reused | None":
        return self._entries.pop(key, None)

    def keep(self, key, entry: "_Reused") -> None:
        self._entries[key] = entry
        while len(self._entries) > self.size:
            self._entries.pop(next(iter(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)


_worker_cache: FigureCache | None = None


def worker_cache() -> FigureCache | None:
    """The render worker's cache, or ``None`` in any other process."""
    return _worker_cache


def anatomy(kind: str, explanation, layer, options: dict):
    """What must match for a figure to be reused: the model, the layer and its output's
    shape (they are in the titles), and everything that decides the layout."""
    photo = photo_of(explanation).shape
    if kind == "summary":
        shape = tuple(None if v is None else (v.ndim, v.shape) for v in layer.maps.values())
    elif kind in ("channels", "grad_channels"):
        tiles = layer.tiles.get(options.get("which", "output"))
        shape = None if tiles is None else (tiles.maps.shape, tuple(sorted(options.items())))
    elif kind == "cam" and explanation.task != "detect":
        shape = None if layer.cam is None else (photo, layer.cam.shape, explanation.image.whole is None)
    elif kind in ("faithfulness", "sanity"):
        from .trust.drawing import reuse_key

        shape = reuse_key(kind, layer)
    elif (kind == "cam") == (explanation.task == "detect"):  # panels: top-K classes, or each detection
        shape = (photo, tuple(cam.shape for _, cam in layer.topk_cams)) if layer.topk_cams else None
    else:
        shape = None
    if shape is None:
        return None
    return (explanation.model, layer.name, layer.shapes.get("output"), explanation.image.shown.shape, shape)


def render_png(kind, explanation, layer, cache: FigureCache | None = None, **options) -> bytes | None:
    """The PNG of one picture (a ``pictures.PictureKind``), or ``None`` when it does not
    apply to this layer.

    With a ``cache`` (the render workers'), the figure is kept and reused for the next
    image of the same layer and anatomy: a long run then only redraws data, which is
    about a third cheaper. Without one, the figure is built, drawn and dropped.
    """
    key = anatomy(kind.name, explanation, layer, options)
    if key is None:
        return None
    entry = cache.take((kind.name, key)) if cache is not None else None
    if entry is None:
        built = kind.build(explanation, layer, **options)
        if built is None:
            return None
        entry = _Reused(*built)
    else:
        entry.update(explanation, layer)
    if cache is not None:
        cache.keep((kind.name, key), entry)
    return entry.png()
