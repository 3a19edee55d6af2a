"""How a segmentation is shown: the predicted mask over the photo with each class's share of
pixels, the titles' mean probability over the target's pixels, and the classes' shares in the
progress line and the gallery."""

from __future__ import annotations

from hookviz.render.presentation import ClassPresentation, PredictionPanel, class_colour, probability_text, register_presentation
from hookviz.tasks.segment import BACKGROUND

__all__ = ["SegmentPresentation"]


@register_presentation("segment")
class SegmentPresentation(ClassPresentation):
    measure = "mean p over its pixels"

    def prediction_panel(self, explanation) -> PredictionPanel:
        count = sum(1 for share in explanation.prediction.classes if share.index != BACKGROUND)
        heading = (
            f"predicted mask: {count} class{'es' if count != 1 else ''} besides background"
            if count
            else "predicted mask: background only"
        )
        return PredictionPanel(heading, legend=2.6)

    def draw_prediction(self, ax, explanation) -> None:
        """The mask over the photo, and a legend of the classes present with their shares."""
        import numpy as np
        from matplotlib.patches import Patch

        prediction = explanation.prediction
        mask = prediction.mask
        colours = np.zeros((*mask.shape, 4))
        classes = [share for share in prediction.classes if share.index != BACKGROUND]
        for share in classes:
            colours[mask == share.index] = class_colour(share.index)[:3] + (0.55,)
        ax.imshow(colours, interpolation="nearest")
        handles = [
            Patch(color=class_colour(share.index), label=f"{share.name or share.index}  {100 * share.fraction:.1f}%")
            for share in classes[:14]
        ]
        background = next((share for share in prediction.classes if share.index == BACKGROUND), None)
        if background is not None:
            handles.append(
                Patch(facecolor="none", edgecolor="0.5", label=f"{background.name or 0}  {100 * background.fraction:.1f}%")
            )
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            fontsize=8,
            frameon=False,
            title="predicted classes (share of pixels)",
            title_fontsize=8,
        )

    def gallery_list(self, report) -> tuple[str, list[str]]:
        heading, items = super().gallery_list(report)
        classes = report.prediction.get("classes")
        if isinstance(classes, list):
            items = [
                f"{c.get('name') or c.get('index')} ({100 * (c.get('fraction') or 0):.1f}% of pixels)"
                for c in classes[:8]
                if isinstance(c, dict)
            ]
        return heading, items

    def status_line(self, status) -> str:
        if status.target is None:
            return super().status_line(status)
        shares = " · ".join(
            f"{s['name'] or s['index']} {100 * s['fraction']:.1f}% {probability_text(s['probability'])}" for s in status.top5
        )
        return (
            f"{status.image}: target {status.target.get('name') or status.target.get('index')}; "
            f"largest classes (share of pixels, mean probability there): {shares}"
        )
