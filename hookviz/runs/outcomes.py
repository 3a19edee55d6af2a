"""What became of a run's images: each one's status, told to the caller as it comes, the
``--fail-on`` findings, the notes (each said once) and the trust measures' tally."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hookviz.errors import HookvizError, arg, describe, display_path, first_line
from hookviz.explaining.checks import Finding
from hookviz.store.records import ImageStatus

__all__ = ["ImageOutcomes", "failure_reason", "writing_failure"]


def failure_reason(path: Path, error: Exception) -> str:
    """Why ``path`` failed when explaining it raised ``error``: a hookviz error's own message, or
    any other's (the model is foreign code: its failure costs this photo, not the run) as the
    model's, each after the photo's name."""
    reason = str(error) if isinstance(error, HookvizError) else f"the model failed on it ({describe(error)})"
    return f"{display_path(path)}: {reason}"


def writing_failure(path: Path, out: Path, error: OSError) -> str:
    """Why ``path`` failed when writing its files raised ``error`` (a folder it may not write, a
    name too long), for its status; a full disk stops the run instead: every photo after it
    would fail the same way.

    Raises:
        HookvizError: no space left on the device, or the disk quota reached.
    """
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        raise HookvizError(
            f"{arg('out', out)}: no space left on the device ({display_path(path)} was not written); free some space, "
            "then rerun with --skip-existing to resume"
        ) from None
    return f"{display_path(path)}: writing results failed ({first_line(error)})"


class ImageOutcomes:
    """The run's record as it goes. ``on_status`` is called with (status, images finished,
    ``total``) after each image; statuses come from the run's thread and, when it writes
    the files itself, from its writer thread, so they are counted under a lock."""

    def __init__(self, total: int, on_status: Callable[[ImageStatus, int, int], None] | None = None):
        from hookviz.trust.tally import TrustTally

        self.total, self.on_status = total, on_status
        self.statuses: dict[Path, ImageStatus] = {}
        self.findings: list[Finding] = []
        self.notes: list[str] = []
        self.trust = TrustTally()
        self.finished = 0
        self.lock = threading.Lock()
        self.started = time.time()

    def report(self, path: Path, status: ImageStatus) -> None:
        """Record ``path``'s status and tell the caller."""
        with self.lock:
            self.statuses[path] = status
            self.finished += 1
            count = self.finished
        if self.on_status:
            self.on_status(status, count, self.total)

    def note(self, note: str) -> None:
        """Say ``note`` once in the run, however many images give it."""
        if note not in self.notes:
            self.notes.append(note)

    def silence(self) -> None:
        """Tell the caller nothing more (the process is about to end)."""
        self.on_status = None
