"""How an embedding's similarity is shown: the cosine similarity to each reference, in the
titles, the CAM panels (one per reference), a notebook and the progress line."""

from __future__ import annotations

from pathlib import Path

from hookviz.render.presentation import ClassPresentation, probability_text, register_presentation

__all__ = ["EmbedPresentation"]


@register_presentation("embed")
class EmbedPresentation(ClassPresentation):
    def headline(self, explanation) -> str:
        target = explanation.target
        return "no target" if target is None else f"similarity to {target.name}: cos={target.logit:.3f}"

    def objective_text(self, explanation) -> str:
        return "objective: cosine similarity to the concept"

    def cam_panel(self, explanation, target) -> tuple[str, tuple | None]:
        return f"{Path(target.name).name if target.name else target.index}\ncos={target.logit:.3f}", None

    def panels_text(self, count: int) -> str:
        return f"{count} reference{'s' if count != 1 else ''}"

    def prediction_lines(self, explanation) -> list[str]:
        return ["cosine similarity: " + " · ".join(f"{c.name} {c.logit:.3f}" for c in explanation.top5)]

    def status_line(self, status) -> str:
        found = " · ".join(f"{s['name']} {probability_text(s['score'])}" for s in status.top5)
        return f"{status.image}: cosine similarity to {found}"
