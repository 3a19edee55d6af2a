"""``pixel_maps.png``: the maps at the input's resolution (guided backprop, guided Grad-CAM,
integrated gradients; one per image, not per layer), each summed over the input's channels
and drawn on a diverging scale centred on zero with its true values, beside the photo the
model saw. A method without a map says why in its place."""

from __future__ import annotations

from hookviz.render.figures import CHAR_INCHES, MapPanel, Sheet, method_title, photo_inches, png_bytes

__all__ = ["pixels_figure", "pixels_png"]

#: Panels a row holds before the next row starts (the photo is the first).
PANELS_PER_ROW = 4


def pixels_figure(explanation):
    """The ``Figure``, or ``None`` when the explanation has no map at the input's resolution."""
    maps = explanation.pixel_maps
    if not any(pixels.map is not None for pixels in maps.values()):
        return None
    photo = explanation.image.shown
    width, height = photo_inches(photo, longest=3.5)
    width = max(width, 2.24)
    stride, rise = width + 1.3, height + 1.1
    count = 1 + len(maps)
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    target = explanation.target.label if explanation.target is not None else "nothing"
    title = f"{explanation.model} · maps of the input, of {target}\n{explanation.image.source.label}"
    sheet = Sheet(max(0.2 + columns * stride, max(map(len, title.splitlines())) * CHAR_INCHES + 0.4), 0.3 + rows * rise)
    ax = sheet.axes(0.2, 1.1, width, height)
    ax.imshow(photo, interpolation="bilinear")
    ax.set_axis_off()
    ax.set_title("model input", fontsize=9)
    for k, (name, pixels) in enumerate(maps.items(), start=1):
        left, top = 0.2 + (k % columns) * stride, 1.1 + (k // columns) * rise
        panel = MapPanel(
            sheet.figure,
            sheet.axes(left, top, width, height),
            sheet.axes(left + width + 0.12, top, 0.13, height),
            signed=True,
            missing="no map",
        )
        summed = None if pixels.map is None else pixels.map.sum(axis=0)
        used = f" ({pixels.layer})" if pixels.layer else ""
        channels = "" if pixels.map is None else f", sum of {pixels.map.shape[0]} channels"
        panel.update(summed, f"{method_title(explanation, name)}{used}{channels}", pixels.note)
    sheet.title(title)
    return sheet.figure


def pixels_png(explanation) -> bytes | None:
    """``pixel_maps.png``'s bytes, or ``None`` without a map of the input."""
    figure = pixels_figure(explanation)
    return None if figure is None else png_bytes(figure)
