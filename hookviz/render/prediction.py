"""``prediction.png``: what the model predicted, over the photo it saw (one per image, not
per layer): a segmentation's mask with a legend of the classes present, or a detector's
boxes with labels and scores. A classifier has none (its top-5 is in every title and in
the gallery)."""

from __future__ import annotations

import numpy as np

from .figures import CHAR_INCHES, Sheet, class_colour, detections_text, photo_inches, png_bytes

__all__ = ["prediction_figure", "prediction_png"]


def prediction_figure(explanation):
    """The ``Figure``, or ``None`` where the task draws none."""
    prediction = explanation.prediction
    if prediction is None or explanation.task not in ("segment", "detect"):
        return None
    photo = explanation.image.shown
    width, height = photo_inches(photo, longest=6.0)
    legend = 2.6 if explanation.task == "segment" else 0.0
    title = f"{explanation.model} · {_prediction_text(explanation)}\n{explanation.image.source.label}"
    sheet_width = max(0.4 + width + legend, max(map(len, title.splitlines())) * CHAR_INCHES + 0.4)
    sheet = Sheet(sheet_width, 0.9 + height + 0.2)
    ax = sheet.axes((sheet_width - width - legend) / 2, 0.9, width, height)
    ax.imshow(photo, interpolation="bilinear")
    ax.set_axis_off()
    if explanation.task == "segment":
        _draw_mask(ax, prediction)
    else:
        _draw_detections(ax, prediction, photo.shape)
    sheet.title(title)
    return sheet.figure


def prediction_png(explanation) -> bytes | None:
    """``prediction.png``'s bytes, or ``None`` where the task draws none."""
    figure = prediction_figure(explanation)
    return None if figure is None else png_bytes(figure)


def _prediction_text(explanation) -> str:
    prediction = explanation.prediction
    if explanation.task == "segment":
        count = sum(1 for c in prediction.details["classes"] if c["index"] != 0)
        return f"predicted mask: {count} class{'es' if count != 1 else ''} besides background" if count else \
            "predicted mask: background only"
    return detections_text(prediction)


def _draw_mask(ax, prediction) -> str:
    from matplotlib.patches import Patch

    mask = prediction.mask
    colours = np.zeros((*mask.shape, 4))
    classes = [c for c in prediction.details["classes"] if c["index"] != 0]
    for entry in classes:
        colours[mask == entry["index"]] = class_colour(entry["index"])[:3] + (0.55,)
    ax.imshow(colours, interpolation="nearest")
    handles = [
        Patch(color=class_colour(c["index"]), label=f"{c['name'] or c['index']}  {100 * c['fraction']:.1f}%")
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
        colour = class_colour(detection.index)
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
