"""Rendering: the pictures, as matplotlib ``Figure`` objects on the Agg canvas.

No pyplot: figures are built with the object API, so rendering is safe in threads and
worker processes and leaves no global state behind. Colour is honest: activations use a
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

from .summaries import channel_tiles

ACTIVATION_CMAP = "viridis"
GRADIENT_CMAP = "RdBu_r"
CAM_CMAP = "jet"
CAM_ALPHA = 0.45


DPI = 100
#: zlib level for the PNGs: 3 writes them about twice as fast as the default 6, for files ~10% larger.
PNG_COMPRESSION = 3


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

    def axes(self, left: float, top: float, width: float, height: float):
        return self.figure.add_axes(
            (left / self.width, 1 - (top + height) / self.height, width / self.width, height / self.height)
        )

    def title(self, text: str) -> None:
        self.figure.suptitle(text, x=0.5, y=1 - 0.1 / self.height, ha="center", va="top", fontsize=10)


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=figure.dpi, pil_kwargs={"compress_level": PNG_COMPRESSION})
    return buffer.getvalue()


def _shape(shape) -> str:
    return "-" if shape is None else "x".join(str(d) for d in shape)


def _target_text(explanation) -> str:
    target = explanation.target
    return f"target {target.label}, p={target.probability:.3f}"


def _layer_text(layer) -> str:
    asked = "" if layer.requested in (layer.name, "(default)") else f" (asked: {layer.requested})"
    default = " (default layer)" if layer.requested == "(default)" else ""
    return f"{layer.name}{asked}{default} [{layer.module_type}]"


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _norm_for(values: np.ndarray, signed: bool):
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return Normalize(0, 1), "no finite values"
    low, high = float(finite.min()), float(finite.max())
    note = f"min {_fmt(low)}, max {_fmt(high)}"
    if low == high:
        # A flat map: keep the colorbar readable and let the colour carry sign and size.
        limit = abs(low) or 1.0
        if signed:
            return TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit), f"constant {_fmt(low)} everywhere"
        return Normalize(min(0.0, low), max(0.0, low) or 1.0), f"constant {_fmt(low)} everywhere"
    if signed:
        limit = max(abs(low), abs(high))
        return TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit), note
    return Normalize(low, high), note


def _draw_map(figure: Figure, ax, cax, values: np.ndarray | None, title: str, signed: bool, missing: str) -> None:
    if values is None:
        ax.set_title(title, fontsize=9)
        ax.text(0.5, 0.5, missing, ha="center", va="center", fontsize=9, transform=ax.transAxes)
        ax.set_axis_off()
        cax.set_axis_off()
        return
    norm, note = _norm_for(values, signed)
    ax.set_title(f"{title}\n{note}", fontsize=9)
    if values.ndim == 1:
        # Lines, not bars: a single spike among 1000 features must stay visible.
        ax.vlines(np.arange(values.size), 0, values, colors="tab:red" if signed else "tab:blue", linewidth=1.0)
        ax.set_xlim(-0.5, values.size - 0.5)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_xlabel("feature index", fontsize=8)
        ax.tick_params(labelsize=7)
        cax.set_axis_off()
        return
    image = ax.imshow(np.nan_to_num(values, nan=0.0), cmap=GRADIENT_CMAP if signed else ACTIVATION_CMAP,
                      norm=norm, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    bar = figure.colorbar(image, cax=cax)
    bar.ax.tick_params(labelsize=7)


# ----------------------------------------------------------------------------- summary


def summary_figure(explanation, layer) -> Figure:
    """The seeds' 2x2 figure (channel-summed input, output, grad_input, grad_output), with
    the photo beside it and a title naming model, layer, shape and target."""
    sheet = _Sheet(12.8, 7.3)
    photo = sheet.axes(0.25, 1.5, 3.9, 3.9)
    photo.imshow(explanation.image.shown, interpolation="bilinear")
    photo.set_axis_off()
    photo.set_title("model input (after preprocessing)", fontsize=9)
    side = 2.45
    cells = {"input": (5.0, 1.05), "output": (9.05, 1.05), "grad_input": (5.0, 4.35), "grad_output": (9.05, 4.35)}
    for label, (left, top) in cells.items():
        ax = sheet.axes(left, top, side, side)
        cax = sheet.axes(left + side + 0.12, top, 0.13, side)
        signed = label.startswith("grad")
        missing = "no gradient reached this tensor" if signed else "not recorded"
        values = layer.maps[label]
        how = "summed over channels" if values is not None and values.ndim == 2 else "per feature"
        _draw_map(sheet.figure, ax, cax, values, f"{label} {_shape(layer.shapes[label])}, {how}", signed, missing)
    sheet.title(
        f"{explanation.model} · {_layer_text(layer)} · output {_shape(layer.shapes['output'])}\n"
        f"{_target_text(explanation)} · objective {explanation.objective} · {explanation.image.source.label}"
    )
    return sheet.figure


# ----------------------------------------------------------------------------- channel grid


def channels_figure(
    explanation, layer, which: str = "output", channels: str | int | Sequence[int] | None = None, scale: str = "tile"
) -> Figure | None:
    """A grid of one tile per channel, each labelled with its index (and its range, per tile).

    Uses the tiles chosen when the layer was summarised; ``channels`` picks others, which
    needs the full tensors (``explain`` keeps them). Returns ``None`` for a tensor without
    spatial layout.
    """
    tiles = layer.tiles.get(which)
    full = layer.output if which == "output" else layer.grad_output
    if channels is not None and full is not None:
        tiles = channel_tiles(full, explanation.image.tensor.shape[-2:], channels, by_magnitude=which != "output")
    if tiles is None:
        return None
    maps = tiles.maps.astype(np.float64)
    chosen = list(tiles.indices)
    signed = which != "output"
    columns = math.ceil(math.sqrt(len(chosen)))
    rows = math.ceil(len(chosen) / columns)
    height, width = maps.shape[1:]
    pad = max(1, round(max(height, width) * 0.08))
    gap = max(pad, round(height * 0.3))  # room above each tile for its label
    mosaic = np.full((rows * (height + gap), columns * (width + pad) - pad), np.nan)
    ranges = []
    for slot, channel in enumerate(chosen):
        tile = maps[slot]
        finite = tile[np.isfinite(tile)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
        ranges.append((low, high))
        if scale == "tile":
            if signed:
                limit = max(abs(low), abs(high)) or 1.0
                tile = tile / limit  # -1..1, centred on zero
            else:
                tile = (tile - low) / (high - low) if high > low else np.zeros_like(tile)
        r, c = divmod(slot, columns)
        top = r * (height + gap) + gap
        mosaic[top : top + height, c * (width + pad) : c * (width + pad) + width] = tile
    tile_inches = max(0.9, min(1.6, 12.0 / columns))
    grid_width = columns * tile_inches
    grid_height = grid_width * mosaic.shape[0] / mosaic.shape[1]
    sheet = _Sheet(grid_width + 1.9, grid_height + 1.0)
    ax = sheet.axes(0.2, 0.8, grid_width, grid_height)
    bar_height = min(grid_height, 5.0)
    cax = sheet.axes(0.2 + grid_width + 0.2, 0.8 + (grid_height - bar_height) / 2, 0.18, bar_height)
    colormap = matplotlib.colormaps[GRADIENT_CMAP if signed else ACTIVATION_CMAP].with_extremes(bad="white")
    if scale == "tile":
        norm = Normalize(-1, 1) if signed else Normalize(0, 1)
        bar_label = "each tile on its own scale: " + (
            "value / max|value| of the tile" if signed else "tile min (0) to tile max (1)"
        )
    else:
        norm, note = _norm_for(maps, signed)
        bar_label = f"one scale for all tiles ({note})"
    image = ax.imshow(np.ma.masked_invalid(mosaic), cmap=colormap, norm=norm, interpolation="nearest")
    font = 6 if columns > 6 else 8
    for slot, channel in enumerate(chosen):
        r, c = divmod(slot, columns)
        low, high = ranges[slot]
        label = f"#{channel}" + (f" [{_fmt(low)}, {_fmt(high)}]" if scale == "tile" else "")
        ax.text(c * (width + pad) - 0.5, r * (height + gap) + gap - 0.6, label, fontsize=font, va="bottom", ha="left")
    ax.set_axis_off()
    bar = sheet.figure.colorbar(image, cax=cax)
    bar.set_label(bar_label, fontsize=8)
    bar.ax.tick_params(labelsize=7)
    sheet.title(
        f"{explanation.model} · {_layer_text(layer)} · {which} {_shape(layer.shapes[which])} · "
        f"{len(chosen)} of {tiles.total} channels\n{_target_text(explanation)}"
    )
    return sheet.figure


# ----------------------------------------------------------------------------- CAM


def _upsample(cam: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    image = Image.fromarray(np.asarray(cam, dtype=np.float32), mode="F")
    return np.asarray(image.resize((size[1], size[0]), Image.BILINEAR), dtype=np.float64)


def _overlay(figure: Figure, ax, cax, photo: np.ndarray, cam: np.ndarray, title: str) -> None:
    heat = _upsample(cam, photo.shape[:2])
    top = float(np.nanmax(cam)) if np.isfinite(cam).any() else 0.0
    norm = Normalize(0.0, top if top > 0 else 1.0)
    ax.imshow(photo, interpolation="bilinear")
    ax.imshow(heat, cmap=CAM_CMAP, alpha=CAM_ALPHA, norm=norm, interpolation="bilinear")
    ax.set_axis_off()
    note = " (all zero: nothing here raises this class)" if top == 0 else ""
    ax.set_title(title + note, fontsize=9)
    # The colorbar gets an opaque mappable of its own, so its colours are readable.
    bar = figure.colorbar(ScalarMappable(norm=norm, cmap=CAM_CMAP), cax=cax)
    bar.set_label(f"CAM (raw, {cam.shape[0]}x{cam.shape[1]} map)", fontsize=8)
    bar.ax.tick_params(labelsize=7)


def photo_of(explanation) -> np.ndarray:
    """The photo a CAM is drawn on: what the model saw, or the whole photo with ``--no-crop``."""
    return explanation.image.whole if explanation.image.whole is not None else explanation.image.shown


def cam_figure(explanation, layer) -> Figure | None:
    """The target's CAM over the photo the model saw, beside the photo alone."""
    if layer.cam is None:
        return None
    photo = photo_of(explanation)
    side = 4.3
    panel = side * photo.shape[1] / photo.shape[0]
    sheet = _Sheet(0.2 + 2 * panel + 0.3 + 0.3 + 0.9, 0.95 + side + 0.2)
    left = sheet.axes(0.2, 0.95, panel, side)
    left.imshow(photo, interpolation="bilinear")
    left.set_axis_off()
    left.set_title("model input" if explanation.image.whole is None else "whole photo (resized, not cropped)", fontsize=9)
    right = sheet.axes(0.2 + panel + 0.3, 0.95, panel, side)
    cax = sheet.axes(0.2 + 2 * panel + 0.45, 0.95, 0.15, side)
    _overlay(sheet.figure, right, cax, photo, layer.cam, f"{explanation.cam_method} for {explanation.target.label}")
    sheet.title(
        f"{explanation.model} · {_layer_text(layer)} · output {_shape(layer.shapes['output'])}\n{_target_text(explanation)}"
    )
    return sheet.figure


def cam_topk_figure(explanation, layer) -> Figure | None:
    """CAMs of the top-K classes side by side, each on its own colour scale."""
    if not layer.topk_cams:
        return None
    photo = photo_of(explanation)
    side = 3.5
    panel = side * photo.shape[1] / photo.shape[0]
    stride = panel + 1.25
    sheet = _Sheet(0.2 + len(layer.topk_cams) * stride, 1.0 + side + 0.2)
    for k, (score, cam) in enumerate(layer.topk_cams):
        left = 0.2 + k * stride
        ax = sheet.axes(left, 1.0, panel, side)
        cax = sheet.axes(left + panel + 0.12, 1.0, 0.13, side)
        _overlay(sheet.figure, ax, cax, photo, cam, f"{score.label}\np={score.probability:.3f}")
    sheet.title(
        f"{explanation.model} · {_layer_text(layer)} · {explanation.cam_method} of the top {len(layer.topk_cams)} classes"
    )
    return sheet.figure


FIGURES = {
    "summary": summary_figure,
    "channels": channels_figure,
    "cam": cam_figure,
    "cam_topk": cam_topk_figure,
}
