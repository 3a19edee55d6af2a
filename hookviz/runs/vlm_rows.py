"""A vision-language model's photo in the explorer (``hookviz.runs.explorer``): its row of the
sample table, and what its sample page shows.

The row reads as any sample's: its answer is what the model ``predicted`` (its probability,
the tokens' product, the ``confidence``), the tokens explained its ``target``, and the prompt
has a column of its own (``sample_table.ANSWER_COLUMNS``). The page lists each explained token
with its probability, and shows the strip (``tokens.png``) and each token's picture under one
tab, ``tokens``, as a run's layer shows its pictures.
"""

from __future__ import annotations

from hookviz.runs.sample_table import SampleRow
from hookviz.store.records import ImageStatus
from hookviz.store.vlm_files import VlmReport, VlmTarget

__all__ = ["TOKENS_TAB", "vlm_details", "vlm_row"]

#: The tab of the sample page that holds the strip and every token's picture.
TOKENS_TAB = "tokens"


def _explained(target: VlmTarget) -> str:
    """A target as the row and the page name it: its words, its probability."""
    p = "" if target.probability is None else f" p={target.probability:.3f}"
    return f"{target.label.strip()!r}{p}"


def vlm_row(entry: ImageStatus, report: VlmReport | None) -> SampleRow:
    """The row of a photo of a vision-language model's run (``report``: ``None`` when it failed)."""
    values: dict = {
        "name": entry.output,
        "image": entry.image,
        "status": entry.status,
        "task": entry.task,
        "true_class": "",
        "predicted": report.text if report is not None else "",
        "target": " · ".join(t.label.strip() for t in report.targets) if report is not None else "",
        "confidence": report.answer_probability if report is not None else None,
        "target_probability": report.targets[0].probability if report is not None and len(report.targets) == 1 else None,
        "correct": None,
        "dead": None,
        "zero_grad": None,
        "nonfinite": None,
        "drift": None,
        "target_changed": None,
        "drift_findings": None,
        "notes": 0,
        "failure": entry.error or "" if entry.status == "failed" else "",
        "prompt": report.prompt if report is not None else "",
    }
    return SampleRow(values)


def vlm_details(report: VlmReport) -> dict:
    """What the sample page shows of the photo (the explorer's details of a sample): the photo as
    the model saw it, the answer and each explained token's probability, and one tab of pictures,
    the strip first, then each token's."""
    pictures = [["all tokens", report.strip]] if report.strip else []
    pictures += [[_explained(t), t.picture] for t in report.targets if t.picture]
    return {
        "image": report.image,
        "heading": f"answer: {report.text}",
        "items": [
            f"{_explained(t)} (token{'s' if len(t.tokens) > 1 else ''} {', '.join(map(str, t.tokens))})" for t in report.targets
        ],
        "notes": [],
        "objective": report.objective or "",
        "photos": [[report.photo, "the photo as the model saw it"]] if report.photo else [],
        "clip": None,
        "layers": [{"name": TOKENS_TAB, "type": "", "note": f"prompt: {report.prompt}", "pictures": pictures}],
    }
