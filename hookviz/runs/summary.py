"""What a run tells its caller: the line saying what will run, and once it has finished (or
stopped) each image's status, the checks' findings, the run file, and the exception that
carries them when Ctrl-C stops the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hookviz.errors import arg
from hookviz.explaining.checks import Finding
from hookviz.store.records import ImageStatus

__all__ = ["RunSummary", "RunInterrupted", "start_line"]


@dataclass(frozen=True)
class RunSummary:
    """A run's outcome: each selected image's status, the ``--fail-on`` findings, its run file."""

    statuses: tuple[ImageStatus, ...]
    findings: tuple[Finding, ...]
    run_json: Path
    interrupted: bool = False
    layers: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    trust: dict | None = None
    #: What the lines that count the samples call one (``samples.counted_noun``).
    noun: str = "image"

    @property
    def failed(self) -> list[ImageStatus]:
        return [s for s in self.statuses if s.status == "failed"]

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses if s.status == status)

    def _repr_html_(self) -> str | None:
        """In a notebook: the run's explorer (``hookviz.runs.explorer_embed``), when it wrote one."""
        from hookviz.runs.explorer import DATA
        from hookviz.runs.explorer_embed import explorer_html

        folder = self.run_json.parent
        if not ((folder / "index.html").is_file() and (folder / DATA).is_file()):
            return None  # Jupyter then shows repr()
        return explorer_html(folder)


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM stopped the run; ``summary`` holds what was finished."""

    def __init__(self, summary: RunSummary):
        super().__init__("interrupted")
        self.summary = summary


def start_line(explainer, device: str, batch_size: int, run_file: str) -> str:
    """What will run: the model, its weights, the device, the batch size and the layers."""
    line = f"model {explainer.model.name}, weights {explainer.model.weights}, on {device}, batches of up to {batch_size}; "
    if explainer.layer_choice and not explainer.layers:
        return line + f"no {arg('layers')} given: {explainer.layer_choice}"
    if explainer.layer_choice:
        return line + f"no {arg('layers')} given: using {explainer.layer_choice}"
    labels = [spec.label for spec in explainer.layers]
    if len(labels) <= 4:
        return line + "layers: " + ", ".join(labels)
    # densenet121's 58 ReLUs would take 4,886 characters: the run file lists them all
    return line + f"{len(labels)} layers: {', '.join(labels[:3])}, and {len(labels) - 3} more; all in {run_file}"
