"""``prediction.png``: what the model predicted, over the photo it saw (one per image, not
per layer), as its task's presentation draws it (``Presentation.draw_prediction``): a segmentation's mask with a
legend of the classes present, a detector's boxes with labels and scores. A classifier has
none (its top-5 is in every title and in the gallery)."""

from __future__ import annotations

from hookviz.render.figures import CHAR_INCHES, Sheet, photo_inches, png_bytes, presented

__all__ = ["prediction_figure", "prediction_png"]


def prediction_figure(explanation):
    """The ``Figure``, or ``None`` where the task draws none."""
    shown = presented(explanation)
    panel = shown.prediction_panel(explanation) if explanation.prediction is not None else None
    if panel is None:
        return None
    photo = explanation.image.shown
    width, height = photo_inches(photo, longest=6.0)
    title = f"{explanation.model} · {panel.heading}\n{explanation.image.source.label}"
    sheet_width = max(0.4 + width + panel.legend, max(map(len, title.splitlines())) * CHAR_INCHES + 0.4)
    sheet = Sheet(sheet_width, 0.9 + height + 0.2)
    ax = sheet.axes((sheet_width - width - panel.legend) / 2, 0.9, width, height)
    ax.imshow(photo, interpolation="bilinear")
    ax.set_axis_off()
    shown.draw_prediction(ax, explanation)
    sheet.title(title)
    return sheet.figure


def prediction_png(explanation) -> bytes | None:
    """``prediction.png``'s bytes, or ``None`` where the task draws none."""
    figure = prediction_figure(explanation)
    return None if figure is None else png_bytes(figure)
