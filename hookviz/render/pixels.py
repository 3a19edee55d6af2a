"""``pixel_maps.png``: the maps at the input's resolution (guided backprop, guided Grad-CAM,
integrated gradients; one per image, not per layer) beside the photo the model saw.

A photo's map is drawn as captum's ``visualize_image_attr`` draws it (``hookviz.render.pixel_scale``):
summed over the input's channels, of the sign asked (``--pixel-sign``: ``absolute`` by default,
``positive`` or ``all``), its largest values clipped (``--pixel-clip``, 2 per cent of the total
by default), as a heat map with its colorbar in the map's own values, and again blended over
the photo in grey (captum's ``blended_heat_map``, the heat map at alpha 0.5). A signal's or a
clip's map keeps its plain panel: true values on a diverging scale centred on zero. A method
without a map says why in its place."""

from __future__ import annotations

import numpy as np

from hookviz.render.figures import (
    CHAR_INCHES,
    NOT_FINITE_COLOUR,
    MapPanel,
    Sheet,
    fitted,
    fmt,
    method_title,
    photo_inches,
    png_bytes,
)
from hookviz.render.pixel_scale import DEFAULT_CLIP, scaled

__all__ = ["pixels_figure", "pixels_png", "SIGN_CMAPS"]

#: Panels a row holds before the next row starts (the photo is the first).
PANELS_PER_ROW = 4
#: Each sign's colour map and range, as captum's (its red-white-green for ``all``).
SIGN_CMAPS = {"absolute": ("Blues", 0.0), "positive": ("Greens", 0.0), "all": ("RdWhGn", -1.0)}
#: How opaque the heat map lies over the grey photo (captum's ``alpha_overlay``).
ALPHA_OVERLAY = 0.5


def pixels_figure(explanation, clip: float = DEFAULT_CLIP, sign: str = "absolute"):
    """The ``Figure``, or ``None`` when the explanation has no map at the input's resolution."""
    maps = explanation.pixel_maps
    if not any(pixels.map is not None for pixels in maps.values()):
        return None
    photo = explanation.image.shown
    width, height = photo_inches(photo, longest=3.5)
    width = max(width, 2.24)
    panels = [(name, pixels, part) for name, pixels in maps.items() for part in _parts(pixels)]
    stride = width + 1.3
    room = min(stride - 0.2, width + 0.4)  # a title is centred on its panel, the first 0.2 in from the edge
    above = 0.8 + 0.15 * _title_lines(explanation, panels, clip, sign, room)  # a panel's top below its row's
    rise = height + above
    count = 1 + len(panels)
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    target = explanation.target.label if explanation.target is not None else "nothing"
    title = f"{explanation.model} · maps of the input, of {target}\n{explanation.image.source.label}"
    sheet = Sheet(max(0.2 + columns * stride, max(map(len, title.splitlines())) * CHAR_INCHES + 0.4), 0.3 + rows * rise)
    ax = sheet.axes(0.2, above, width, height)
    ax.imshow(photo, interpolation="bilinear")
    ax.set_axis_off()
    ax.set_title("model input", fontsize=9)
    for k, (name, pixels, part) in enumerate(panels, start=1):
        left, top = 0.2 + (k % columns) * stride, above + (k // columns) * rise
        axes = (sheet.axes(left, top, width, height), sheet.axes(left + width + 0.12, top, 0.13, height))
        heading = _heading(explanation, name, pixels)
        if part == "plain":
            panel = MapPanel(sheet.figure, *axes, signed=True, missing="no map")
            summed = None if pixels.map is None else pixels.map.sum(axis=0)
            channels = "" if pixels.map is None else f", sum of {pixels.map.shape[0]} channels"
            panel.update(summed, f"{heading}{channels}", pixels.note)
        else:
            shown = photo if part == "blended" else None
            _heat(sheet.figure, axes, pixels.map, shown, heading, clip, sign, room)
    sheet.title(title)
    return sheet.figure


def _heading(explanation, name: str, pixels) -> str:
    """A map's name in its panels' titles: the method's title, and its layer where it has one."""
    used = f" ({pixels.layer})" if pixels.layer else ""
    return f"{method_title(explanation, name)}{used}"


def _heat_title(heading: str, channels: int, blended: bool, clip: float, sign: str, share: float) -> str:
    """A heat map's title: what it maps (over the photo, or the sum of its ``channels``), and how
    it was clipped (``share``: of its pixels)."""
    what = "over the photo" if blended else f"sum of {channels} channels"
    words = {"absolute": "|v|", "positive": "max(v, 0)", "all": "v"}[sign]
    return f"{heading}, {what}\n{words}, top {clip:g}% of the total clipped ({_percent(share)} of pixels)"


def _percent(share: float) -> str:
    """A share in per cent, to two figures: ``0.39%``, ``12%``, ``100%``, ``<0.01%``."""
    value = 100 * share
    if 0 < value < 0.01:
        return "<0.01%"
    return f"{value:.0f}%" if value >= 10 else f"{value:.2g}%"


def _title_lines(explanation, panels, clip: float, sign: str, inches: float) -> int:
    """The most lines a heat map's title takes broken to fit ``inches`` (2 at least), its clipped
    share written as long as it can be: the room the panels leave above them."""
    longest = 2
    for name, pixels, part in panels:
        if part != "plain":
            heading, channels = _heading(explanation, name, pixels), pixels.map.shape[0]
            text = fitted(_heat_title(heading, channels, part == "blended", clip, sign, 0.000123), inches)
            longest = max(longest, text.count("\n") + 1)
    return longest


def _parts(pixels) -> tuple[str, ...]:
    """A map's panels: a photo's, its heat map and its blend over the photo; else one plain panel."""
    return ("heat", "blended") if pixels.map is not None and pixels.map.ndim == 3 else ("plain",)


def _heat(figure, axes, channels: np.ndarray, photo, heading: str, clip: float, sign: str, inches: float) -> None:
    """One map scaled as captum scales it, as a heat map (``photo`` ``None``) or blended over
    ``photo`` in grey, with a colorbar labelled in the map's own values; its title broken into
    lines that fit ``inches`` (a small input's panel is narrower than the title)."""
    import matplotlib
    from matplotlib.colors import LinearSegmentedColormap

    ax, cax = axes
    found = scaled(channels, sign, clip)
    name, low = SIGN_CMAPS[sign]
    cmap = LinearSegmentedColormap.from_list(name, ["red", "white", "green"]) if name == "RdWhGn" else matplotlib.colormaps[name]
    height, width = found.values.shape
    extent = (-0.5, width - 0.5, height - 0.5, -0.5)
    if photo is not None:
        ax.imshow(np.asarray(photo, dtype=np.float64).mean(axis=2), cmap="gray", extent=extent, interpolation="bilinear")
    shown = cmap.with_extremes(bad=NOT_FINITE_COLOUR)
    image = ax.imshow(
        found.values, cmap=shown, vmin=low, vmax=1.0, extent=extent, interpolation="nearest",
        alpha=ALPHA_OVERLAY if photo is not None else None,
    )  # fmt: skip
    ax.set_xticks([])
    ax.set_yticks([])
    bar = figure.colorbar(image, cax=cax, ticks=[low, (low + 1) / 2, 1.0])
    top = fmt(found.threshold)
    labels = [f"≤ -{top}", "0", f"≥ {top}"] if low < 0 else ["0", fmt(found.threshold / 2), f"≥ {top}"]
    bar.ax.set_yticklabels(labels, fontsize=7)
    bar.ax.tick_params(labelsize=7)
    title = _heat_title(heading, channels.shape[0], photo is not None, clip, sign, found.clipped)
    ax.set_title(fitted(title, inches), fontsize=9, parse_math=False, pad=10)


def pixels_png(explanation, clip: float = DEFAULT_CLIP, sign: str = "absolute") -> bytes | None:
    """``pixel_maps.png``'s bytes, or ``None`` without a map of the input."""
    figure = pixels_figure(explanation, clip, sign)
    return None if figure is None else png_bytes(figure)
