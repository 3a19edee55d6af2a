"""What a finished (or stopped) run tells its caller: each image's status, the checks'
findings, the run file, and the exception that carries them when Ctrl-C stops the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hookviz.explaining.checks import Finding
from hookviz.store.records import ImageStatus

__all__ = ["RunSummary", "RunInterrupted"]


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

    @property
    def failed(self) -> list[ImageStatus]:
        return [s for s in self.statuses if s.status == "failed"]

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses if s.status == status)


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM stopped the run; ``summary`` holds what was finished."""

    def __init__(self, summary: RunSummary):
        super().__init__("interrupted")
        self.summary = summary
