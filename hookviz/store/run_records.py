"""``run.json``, a run as a whole, as typed records (see ``records``): the run, each image's
status, the counts, the checks and the comparison with a baseline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hookviz.errors import display_path
from hookviz.explaining.checks import Finding
from hookviz.store.documents import (
    RUN_SCHEMA,
    SCHEMA_KEY,
    read_document,
    read_int,
    read_mapping,
    read_number,
    read_text,
    read_texts,
    schema_version,
)
from hookviz.tasks import DEFAULT_TASK

__all__ = ["ImageStatus", "Counts", "Checks", "DiffEntry", "RunRecord", "read_run"]


@dataclass(frozen=True)
class ImageStatus:
    """What became of one image: ``done``, ``failed``, ``skipped`` or ``not_done`` (interrupted)."""

    image: str
    output: str
    status: str
    error: str | None = None
    target: dict | None = None
    files: tuple[str, ...] = ()
    top5: tuple[dict, ...] = ()
    task: str = DEFAULT_TASK

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "output": self.output,
            "status": self.status,
            "error": self.error,
            "task": self.task,
            "target": self.target,
            "top5": list(self.top5),
            "files": list(self.files),
        }

    @classmethod
    def from_json(cls, entry) -> "ImageStatus | None":
        if not isinstance(entry, dict):
            return None
        output = entry.get("output")
        return cls(
            image=str(entry.get("image") or output),
            output=output if isinstance(output, str) else "",
            status=str(entry.get("status")),
            error=read_text(entry.get("error")),
            target=entry.get("target") if isinstance(entry.get("target"), dict) else None,
            files=read_texts(entry.get("files")),
            top5=tuple(s for s in entry.get("top5") or () if isinstance(s, dict)),
            task=str(entry.get("task") or DEFAULT_TASK),
        )


@dataclass(frozen=True)
class Counts:
    """How many images a run had, and what became of them."""

    images: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    not_done: int = 0

    def to_json(self) -> dict:
        return {
            "images": self.images,
            "done": self.done,
            "failed": self.failed,
            "skipped": self.skipped,
            "not_done": self.not_done,
        }

    @classmethod
    def from_json(cls, entry) -> "Counts":
        entry = read_mapping(entry)
        return cls(*(read_int(entry.get(key)) or 0 for key in ("images", "done", "failed", "skipped", "not_done")))


@dataclass(frozen=True)
class Checks:
    """A run's checks (``--fail-on``): which, and what they found; with ``--baseline``, the
    baseline and its tolerances (``options.Tolerances`` as JSON)."""

    enabled: tuple[str, ...] = ()
    dead_fraction: float | None = None
    passed: bool = True
    findings: tuple[Finding, ...] = ()
    baseline: str | None = None
    tolerances: dict | None = None

    def to_json(self) -> dict:
        entry: dict = {
            "enabled": list(self.enabled),
            "dead_fraction": self.dead_fraction,
            "passed": self.passed,
            "findings": [f.to_json() for f in self.findings],
        }
        if self.baseline is not None:
            entry.update(baseline=self.baseline, tolerances=self.tolerances)
        return entry

    @classmethod
    def from_json(cls, entry) -> "Checks":
        entry = read_mapping(entry)
        findings = tuple(f for f in map(_finding, entry.get("findings") or ()) if f is not None)
        return cls(
            read_texts(entry.get("enabled")),
            read_number(entry.get("dead_fraction")),
            entry.get("passed") is not False,
            findings,
            read_text(entry.get("baseline")),
            entry.get("tolerances") if isinstance(entry.get("tolerances"), dict) else None,
        )


def _finding(entry) -> Finding | None:
    if not isinstance(entry, dict):
        return None
    return Finding(
        str(entry.get("check")),
        str(entry.get("image")),
        read_text(entry.get("layer")),
        str(entry.get("detail")),
        read_text(entry.get("figure")),
    )


@dataclass(frozen=True)
class DiffEntry:
    """Where a run's comparison with its baseline is, and what it found."""

    file: str
    images: int
    drift_findings: int

    def to_json(self) -> dict:
        return {"file": self.file, "images": self.images, "drift_findings": self.drift_findings}

    @classmethod
    def from_json(cls, entry) -> "DiffEntry | None":
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            return None
        return cls(entry["file"], read_int(entry.get("images")) or 0, read_int(entry.get("drift_findings")) or 0)


@dataclass(frozen=True)
class RunRecord:
    """A run's ``run.json`` (``run-K-of-N.json`` for a shard): who ran what, with what, and
    what became of each image.

    Attributes:
        shard: (K, N) for ``--shard K/N``.
        started: when it started (local time, ISO 8601); ``seconds``: how long it took.
        error: the error that stopped it, if one did.
        trust: what the trust measures found over the run (``trust.tally``), ``None`` without them.
        schema: the version it was written in (0: before run files named one).
    """

    hookviz: str | None = None
    torch: str | None = None
    torchvision: str | None = None
    python: str | None = None
    command: tuple[str, ...] = ()
    model: str | None = None
    weights: str | None = None
    weights_sha256: str | None = None
    task: str | None = None
    device: str | None = None
    layers: tuple[str, ...] = ()
    layer_choice: str | None = None
    shard: tuple[int, int] | None = None
    started: str | None = None
    seconds: float | None = None
    interrupted: bool = False
    error: str | None = None
    counts: Counts = Counts()
    images: tuple[ImageStatus, ...] = ()
    checks: Checks = Checks()
    notes: tuple[str, ...] = ()
    tensorboard: str | None = None
    trust: dict | None = None
    diff: DiffEntry | None = None
    schema: int = 1

    @classmethod
    def of(cls, summary, *, explainer, device: str, options, checks, started: float, error: str | None, images: int) -> RunRecord:
        """The description of a run: ``summary`` (a ``runner.RunSummary``), the ``explainer``
        it ran on ``device`` with these ``RunOptions`` and ``CheckOptions``, started at
        ``started`` (``time.time()``), stopped by ``error`` if one did, over ``images`` photos."""
        import platform
        import time

        import torch
        import torchvision

        from hookviz import __version__

        return cls(
            hookviz=__version__,
            torch=torch.__version__,
            torchvision=torchvision.__version__,
            python=platform.python_version(),
            command=tuple(display_path(a) for a in options.command),
            model=explainer.model.name,
            weights=explainer.model.weights,
            weights_sha256=explainer.model.weights_sha256,
            task=explainer.model.task,
            device=device,
            layers=tuple(summary.layers),
            layer_choice=explainer.layer_choice,
            shard=options.shard,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            seconds=round(time.time() - started, 3),
            interrupted=summary.interrupted,
            error=error,
            counts=Counts(images, *(summary.count(s) for s in ("done", "failed", "skipped", "not_done"))),
            images=tuple(summary.statuses),
            checks=Checks(tuple(checks.fail_on), checks.dead_fraction, not summary.findings, tuple(summary.findings)),
            notes=tuple(summary.notes),
            tensorboard=display_path(options.tensorboard) if options.tensorboard else None,
            trust=summary.trust,
        )

    @property
    def failures(self) -> tuple[ImageStatus, ...]:
        return tuple(s for s in self.images if s.status == "failed")

    @property
    def unfinished(self) -> bool:
        """Whether it stopped before every image was done (interrupted, or on an error)."""
        return self.interrupted or bool(self.counts.not_done) or bool(self.error)

    def describe(self) -> dict:
        """Who wrote it, with what: the lines a diff keeps of each run."""
        return {
            "hookviz": self.hookviz,
            "torch": self.torch,
            "torchvision": self.torchvision,
            "python": self.python,
            "model": self.model,
            "weights": self.weights,
            "weights_sha256": self.weights_sha256,
            "device": self.device,
            "started": self.started,
        }

    def to_json(self) -> dict:
        document = {
            SCHEMA_KEY: RUN_SCHEMA,
            "hookviz": self.hookviz,
            "torch": self.torch,
            "torchvision": self.torchvision,
            "python": self.python,
            "command": list(self.command),
            "model": self.model,
            "weights": self.weights,
            "weights_sha256": self.weights_sha256,
            "task": self.task,
            "device": self.device,
            "layers": list(self.layers),
            "layer_choice": self.layer_choice,
            "shard": list(self.shard) if self.shard else None,
            "started": self.started,
            "seconds": self.seconds,
            "interrupted": self.interrupted,
            "error": self.error,
            "counts": self.counts.to_json(),
            "images": [s.to_json() for s in self.images],
            "failures": [{"image": s.image, "error": s.error} for s in self.failures],
            "checks": self.checks.to_json(),
            "notes": list(self.notes),
            "tensorboard": self.tensorboard,
            "trust": self.trust,
        }
        if self.diff is not None:
            document["diff"] = self.diff.to_json()
        return document

    @classmethod
    def from_json(cls, document, source="run.json") -> "RunRecord | None":
        """The run description ``document`` holds, or ``None`` when it is not one of hookviz.

        Raises:
            SchemaError: written by a newer hookviz (``source`` names the file).
        """
        if not isinstance(document, dict) or "hookviz" not in document or not isinstance(document.get("images"), list):
            return None
        schema = schema_version(document, RUN_SCHEMA, source)
        if schema is None:
            return None
        shard = document.get("shard")
        return cls(
            hookviz=read_text(document.get("hookviz")),
            torch=read_text(document.get("torch")),
            torchvision=read_text(document.get("torchvision")),
            python=read_text(document.get("python")),
            command=read_texts(document.get("command")),
            model=read_text(document.get("model")),
            weights=read_text(document.get("weights")),
            weights_sha256=read_text(document.get("weights_sha256")),
            task=read_text(document.get("task")),
            device=read_text(document.get("device")),
            layers=read_texts(document.get("layers")),
            layer_choice=read_text(document.get("layer_choice")),
            shard=(shard[0], shard[1]) if isinstance(shard, list) and len(shard) == 2 and all(map(read_int, shard)) else None,
            started=read_text(document.get("started")),
            seconds=read_number(document.get("seconds")),
            interrupted=document.get("interrupted") is True,
            error=read_text(document.get("error")),
            counts=Counts.from_json(document.get("counts")),
            images=tuple(s for s in map(ImageStatus.from_json, document["images"]) if s is not None),
            checks=Checks.from_json(document.get("checks")),
            notes=read_texts(document.get("notes")),
            tensorboard=read_text(document.get("tensorboard")),
            trust=document.get("trust") if isinstance(document.get("trust"), dict) else None,
            diff=DiffEntry.from_json(document.get("diff")),
            schema=schema,
        )


def read_run(path: Path) -> RunRecord | None:
    """A run's description, or ``None`` when it is missing, unreadable or not a run's of hookviz.

    Raises:
        SchemaError: written by a newer hookviz.
    """
    return read_document(path, RunRecord)
