"""Run files: a finished run's output folder, read back for a comparison.

``open_run`` reads what ``hookviz run`` wrote: ``run.json`` (or a sharded run's
``run-K-of-N.json``), and each finished image's ``report.json``; ``ImageFiles.load`` then
reads one image's ``fingerprint.npz`` and opens its ``tensors.npz``. Every problem is one
``ComparisonError`` naming the folder or file at fault. Nothing here writes: a baseline
is only ever read.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hookviz.errors import ComparisonError, arg, display_path, first_line
from hookviz.models.sources.hf_vlm import TASK as VLM_TASK
from hookviz.store.files import REPORT, TENSORS
from hookviz.store.fingerprints import FORMAT, Fingerprint, looks_whole, read_fingerprint
from hookviz.store.records import LayerRecord, Report, RunRecord, read_report

__all__ = ["RunFolder", "ImageFiles", "ImageData", "open_run", "version_tuple"]

_RUN_FILE = re.compile(r"^run(-\d+-of-\d+)?\.json$")


@dataclass(frozen=True)
class ImageFiles:
    """One finished image of a run: its folder (``output``, under the run's) and report."""

    output: str
    folder: Path
    report: Report

    @property
    def image(self) -> str:
        return self.report.sample or self.output

    @property
    def layer_names(self) -> list[str]:
        return [layer.name for layer in self.report.layers]

    @property
    def fingerprint_format(self) -> int | None:
        """The format of its fingerprint, ``None`` for a run that wrote none (before hookviz kept them)."""
        return self.report.fingerprint_format

    @property
    def has_tensors(self) -> bool:
        return TENSORS in self.report.files

    @contextlib.contextmanager
    def load(self):
        """Yield an ``ImageData``: the fingerprint read (when its format is known) and
        ``tensors.npz`` open (when the run saved it), closed afterwards.

        Raises:
            ComparisonError: a file the report lists is missing or corrupt.
        """
        fingerprint = None
        if self.fingerprint_format is not None and self.fingerprint_format <= FORMAT:
            path = self.folder / self.report.fingerprint_file
            try:
                fingerprint = read_fingerprint(path, self.layer_names)
            except (OSError, ValueError) as exc:
                raise self._damaged(path, exc) from None
        with contextlib.ExitStack() as stack:
            tensors = None
            if self.has_tensors:
                path = self.folder / TENSORS
                try:
                    if not looks_whole(path):
                        raise ValueError("not a whole .npz archive: truncated, or other bytes")
                    tensors = stack.enter_context(np.load(path, allow_pickle=False))
                except (OSError, ValueError, EOFError) as exc:
                    raise self._damaged(path, exc) from None
            yield ImageData(self, fingerprint, tensors)

    def _damaged(self, path: Path, exc: BaseException) -> ComparisonError:
        state = "missing" if isinstance(exc, FileNotFoundError) else f"damaged, cannot be read ({first_line(exc)})"
        if looks_whole(path):  # damaged inside: --skip-existing, which looks at its ends only, would keep it
            what = f"remove {display_path(self.folder)}, then rerun the run that wrote it with {arg('skip_existing')}"
        else:
            what = f"rerun the run that wrote it with {arg('skip_existing')}, which redoes the images whose files are missing or damaged"
        return ComparisonError(f"{display_path(path)}: {state}; {what}")


@dataclass(frozen=True)
class ImageData:
    """One image's files as a comparison reads them (see ``ImageFiles.load``)."""

    files: ImageFiles
    fingerprint: Fingerprint | None
    tensors: object | None = field(default=None, repr=False)  # an open numpy NpzFile

    @property
    def report(self) -> Report:
        return self.files.report

    @property
    def input_hw(self) -> tuple[int, ...] | None:
        return self.report.input_hw

    @property
    def layers(self) -> dict[str, LayerRecord]:
        """The report's layers by name, in the run's order."""
        return self.report.layers_by_name

    def full(self, key: str) -> np.ndarray | None:
        """An array of ``tensors.npz`` (``features.3/output``, ``logits``), or ``None``.

        Raises:
            ComparisonError: the archive's member is corrupt.
        """
        if self.tensors is None or key not in self.tensors.files:
            return None
        try:
            return np.asarray(self.tensors[key], dtype=np.float32)
        except Exception as exc:  # zlib, zipfile and numpy each raise their own on a damaged member
            path = self.files.folder / TENSORS
            raise ComparisonError(
                f"{display_path(path)}: {key} cannot be read ({first_line(exc)}); rerun the run that wrote it"
            ) from None


@dataclass(frozen=True)
class RunFolder:
    """A run's output folder, read.

    Attributes:
        path: the folder.
        argument: how messages name it (``base``, ``new``, ``baseline``, ``out``).
        run: its run description (the first shard's, for a sharded run).
        images: each finished image by its folder's name.
        failed: the images the run could not explain.
    """

    path: Path
    argument: str
    run: RunRecord
    images: dict = field(default_factory=dict)
    failed: tuple[str, ...] = ()

    @property
    def named(self) -> str:
        """The folder as messages name it: ``--baseline ci/base`` or ``base='ci/base'``."""
        return arg(self.argument, display_path(self.path))

    @property
    def version(self) -> str:
        return self.run.hookviz or "unknown"

    def describe(self) -> dict:
        """Who wrote it, with what: the lines a diff keeps of each run."""
        return {"folder": display_path(self.path), **self.run.describe()}


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.10.1"`` -> (0, 10, 1); what is not a number counts as 0."""
    return tuple(int(part) if part.isdigit() else 0 for part in re.split(r"[.+-]", str(text))[:3])


def open_run(path, argument: str, documents: list[RunRecord] | None = None) -> RunFolder:
    """Read the output folder of ``hookviz run`` at ``path``.

    Args:
        argument: how errors name the folder (``base``, ``new``, ``baseline``).
        documents: the run's descriptions, when the caller holds them (a run comparing
            itself as it ends); otherwise ``run.json`` and any shards' files are read.

    Raises:
        ComparisonError: no such folder, not a run's output, or a finished image's
            ``report.json`` missing or corrupt.
    """
    path = Path(path)
    if not path.is_dir():
        reason = "is a file, not a folder" if path.exists() else "no such folder"
        raise ComparisonError(f"{arg(argument, display_path(path))}: {reason}; give the --out folder of a hookviz run")
    if documents is None:
        documents = _run_documents(path, argument)
    if documents[0].task == VLM_TASK:
        raise ComparisonError(
            f"{arg(argument, display_path(path))}: a vision-language model's run; hookviz diff does not compare those yet"
        )
    images: dict[str, ImageFiles] = {}
    failed: list[str] = []
    for document in documents:
        for entry in document.images:
            output = entry.output
            if entry.status == "failed":
                failed.append(entry.image)
            if entry.status not in ("done", "skipped") or output in images:
                continue
            if Path(output).name != output or output in ("", ".", ".."):
                raise ComparisonError(
                    f"{arg(argument, display_path(path))}: its run.json names an image folder {output!r} outside the run"
                )
            images[output] = ImageFiles(output, path / output, _report(path / output / REPORT))
    return RunFolder(path, argument, documents[0], images, tuple(failed))


def _run_documents(path: Path, argument: str) -> list[RunRecord]:
    files = sorted(p for p in path.iterdir() if _RUN_FILE.match(p.name) and p.is_file())
    if not files:
        raise ComparisonError(f"{arg(argument, display_path(path))}: no run.json here; give the --out folder of a hookviz run")
    documents = []
    for file in files:
        try:
            document = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ComparisonError(f"{display_path(file)}: not readable JSON ({first_line(exc)}); rerun that run") from None
        record = RunRecord.from_json(document, file)
        if record is None:
            raise ComparisonError(f"{display_path(file)}: not a run description of hookviz; rerun that run")
        documents.append(record)
    return documents


def _report(path: Path) -> Report:
    report = read_report(path)
    if report is None:
        state = "missing" if not path.exists() else "truncated or not a report of hookviz"
        raise ComparisonError(f"{display_path(path)}: {state}, though run.json lists the image as done; rerun that run")
    return report
