"""How a detection is shown: its boxes labelled with rank, class and score over the photo,
one CAM panel per detection with its box, and the detections in the titles, the progress line
and the gallery."""

from __future__ import annotations

from hookviz.render.presentation import ClassPresentation, PredictionPanel, class_colour, probability_text, register_presentation

__all__ = ["DetectPresentation"]


@register_presentation("detect")
class DetectPresentation(ClassPresentation):
    def headline(self, explanation) -> str:
        return explanation.prediction.found

    def objective_text(self, explanation) -> str:
        count = len(explanation.prediction.detections)
        return f"gradients of the sum of the {count} detection scores" if count else "no gradients: nothing to explain"

    def cam_panel(self, explanation, target) -> tuple[str, tuple | None]:
        rank = explanation.prediction.detections.index(target) + 1
        return f"{rank}. {target.name or 'class'} ({target.index})\nscore {target.score:.3f}", target.box

    def panels_text(self, count: int) -> str:
        return f"{count} detection{'s' if count != 1 else ''}"

    def prediction_panel(self, explanation) -> PredictionPanel:
        return PredictionPanel(explanation.prediction.found)

    def draw_prediction(self, ax, explanation) -> None:
        """Each detection's box, labelled with its rank, class and score; a label that would
        cover an earlier one is moved off it."""
        from matplotlib.patches import Rectangle

        prediction, shape = explanation.prediction, explanation.image.shown.shape
        placed: list = []
        for rank, detection in enumerate(prediction.detections, start=1):
            x0, y0, x1, y1 = detection.box
            colour = class_colour(detection.index)
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=colour, linewidth=2))
            right = x0 > 0.6 * shape[1]  # a label near the right edge ends at its box's right side
            above = y0 > 0.05 * shape[0]
            score = f"{detection.score:.2f}" if detection.score >= 0.01 else f"{detection.score:.2g}"
            label = ax.annotate(
                f"{rank}. {detection.name or detection.index} {score}",
                (x1 if right else x0, y0 if above else y1),
                xytext=(0, 0),
                textcoords="offset points",
                fontsize=8,
                va="bottom" if above else "top",
                ha="right" if right else "left",
                color="black",
                bbox={"facecolor": colour, "alpha": 0.85, "pad": 1, "linewidth": 0},
                parse_math=False,
            )
            _clear_of(label, placed, upward=above)
        if not prediction.detections:
            of = f" of class {prediction.of_class}" if prediction.of_class is not None else ""
            ax.text(
                0.5,
                0.5,
                f"no detections{of} ≥ {prediction.score_threshold}",
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=14,
                color="white",
                bbox={"facecolor": "black", "alpha": 0.6},
                parse_math=False,
            )

    def prediction_lines(self, explanation) -> list[str]:
        return [f"detections: {', '.join(d.label for d in explanation.prediction.detections) or 'none'}"]

    def status_line(self, status) -> str:
        found = ", ".join(f"{s['name'] or s['index']} {probability_text(s['probability'])}" for s in status.top5)
        return f"{status.image}: detections: {found}" if found else f"{status.image}: no detections to explain"

    def gallery_list(self, report) -> tuple[str, list[str]]:
        prediction = report.prediction
        threshold = prediction.get("score_threshold")
        heading = f"detections with score ≥ {threshold}:"
        detections = prediction.get("detections")
        if not isinstance(detections, list):
            return heading, super().gallery_list(report)[1]
        items = [f"{d.get('name') or d.get('index')} {d.get('score') or 0:.2f}" for d in detections if isinstance(d, dict)]
        return heading, items or [f"no detections with score ≥ {threshold}"]


def _clear_of(label, placed: list, upward: bool) -> None:
    """Move ``label`` (an annotation) into the picture, then a line at a time, up or down (the
    other way once the picture ends), to the nearest place where it covers none of the
    ``placed`` labels' boxes (detections often share a corner); then add it to them."""
    renderer = getattr(label.figure.canvas, "get_renderer", lambda: None)()
    if renderer is None:
        return
    picture = label.axes.get_window_extent(renderer)
    extent = label.get_window_extent(renderer)
    points = 72 / label.figure.dpi  # xyann is in points, extents in pixels
    shift = min(0.0, picture.x1 - extent.x1) or max(0.0, picture.x0 - extent.x0)
    x, y = label.xyann[0] + shift * points, label.xyann[1]
    step = (label.get_size() + 4) * (1 if upward else -1)
    lines = len(placed) + 2
    for k in [*range(lines), *range(-1, -lines, -1)]:
        label.xyann = (x, y + k * step)
        extent = label.get_window_extent(renderer).padded(1)
        if _inside(extent, picture) and not any(extent.overlaps(other) for other in placed):
            break
    else:  # no clear place inside: where it was drawn first
        label.xyann = (x, y)
        extent = label.get_window_extent(renderer).padded(1)
    placed.append(extent)


def _inside(extent, picture) -> bool:
    return (
        extent.x0 >= picture.x0 - 1
        and extent.x1 <= picture.x1 + 1
        and extent.y0 >= picture.y0 - 1
        and extent.y1 <= picture.y1 + 1
    )
