"""Records: the files other programs read, ``report.json`` and ``run.json``, as typed records.

This module alone knows their keys. Each record is a frozen dataclass with ``to_json``
(the document written) and ``from_json`` (a document read back, as forgiving as a file
that an older hookviz wrote, or a person edited, needs). Values whose class elsewhere owns
their JSON (``PhotoIdentity``, ``Layout``) are read back as those classes; the few that
only their writer interprets (the preprocessing, a task's prediction details, statistics)
stay JSON values.

Each file names its schema: ``"schema": "hookviz/report/1"`` or ``"hookviz/run/1"``. A
file without one was written before hookviz kept it (version 0) and is read as it always
was; one of a newer version than this hookviz knows is refused with one line
(``SchemaError``). The schemas are published as JSON Schema in ``hookviz/schemas/``
(``schema_path``); the tests check every file a run writes against them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from hookviz.anatomy.featuremaps import Layout
from hookviz.errors import SchemaError, display_path
from hookviz.explaining.checks import Finding
from hookviz.inputs.identity import PhotoIdentity, ReferenceIdentity
from hookviz.tasks import DEFAULT_TASK

__all__ = [
    "REPORT_SCHEMA",
    "RUN_SCHEMA",
    "Score",
    "CamRecord",
    "MapRecord",
    "LayerRecord",
    "Asked",
    "Report",
    "ImageStatus",
    "Counts",
    "Checks",
    "DiffEntry",
    "RunRecord",
    "read_report",
    "read_run",
    "schema_path",
]

#: The schema of the files this hookviz writes.
REPORT_SCHEMA = "hookviz/report/1"
RUN_SCHEMA = "hookviz/run/1"
_SCHEMA = "schema"
_NAMED = re.compile(r"^hookviz/(\w+)/(\d+)$")


def schema_path(kind: str) -> Path:
    """The published JSON Schema of ``kind``, shipped with the package: ``report``, ``run``, or
    ``diff`` (``diff.json``, whose records are ``changes.RunDiff``'s and whose version is its ``format``)."""
    return Path(__file__).parent.parent / "schemas" / f"{kind}.schema.json"  # hookviz/schemas/


def _version(document: dict, current: str, source) -> int | None:
    """The schema version ``document`` was written in: 0 without one (an older hookviz's),
    ``None`` for another kind of file.

    Raises:
        SchemaError: a newer version than ``current``, or a schema this hookviz does not know.
    """
    named = document.get(_SCHEMA)
    if named is None:
        return 0
    kind = current.split("/")[1]
    match = _NAMED.match(named) if isinstance(named, str) else None
    if match is not None and match.group(1) != kind:
        return None
    known = int(current.rsplit("/", 1)[1])
    if match is None or int(match.group(2)) > known:
        raise SchemaError(
            f"{display_path(source)}: written by a newer hookviz (schema {named!r}; this one reads {current} "
            "and older); upgrade hookviz to read it"
        )
    return int(match.group(2))


# ----------------------------------------------------------------------------- forgiving readers


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _shape(value) -> tuple[int, ...] | None:
    return tuple(value) if isinstance(value, list) else None


def _list(value) -> list | None:
    return list(value) if value is not None else None


# ----------------------------------------------------------------------------- report.json


@dataclass(frozen=True)
class Score:
    """A class's score as a report keeps it (a ``tasks.base.ClassScore``, read back): its
    logit (``score``) and probability; a segmentation's also its share of the pixels (``fraction``)."""

    index: int | None
    name: str | None = None
    score: float | None = None
    probability: float | None = None
    fraction: float | None = None

    @classmethod
    def of(cls, class_score) -> "Score":
        # ClassScore says how its numbers become JSON (a NaN becomes null): keep its word.
        entry = class_score.to_json()
        return cls(entry["index"], entry["name"], entry["score"], entry["probability"], entry.get("fraction"))

    def to_json(self) -> dict:
        entry = {"index": self.index, "name": self.name, "score": self.score, "probability": self.probability}
        return entry if self.fraction is None else {**entry, "fraction": self.fraction}

    @classmethod
    def from_json(cls, entry) -> "Score | None":
        if not isinstance(entry, dict):
            return None
        return cls(
            _int(entry.get("index")),
            _text(entry.get("name")),
            _number(entry.get("score")),
            _number(entry.get("probability")),
            _number(entry.get("fraction")),
        )

    @property
    def label(self) -> str:
        """Its name, or its index where it has none."""
        return self.name or str(self.index)


@dataclass(frozen=True)
class CamRecord:
    """A layer's CAM in a report: its method and shape and statistics, or why it was skipped."""

    method: str | None
    shape: tuple[int, ...] | None = None
    stats: dict = field(default_factory=dict)
    skipped: str | None = None

    def to_json(self) -> dict:
        if self.shape is None and self.skipped is not None:
            return {"method": self.method, "skipped": self.skipped}
        return {"method": self.method, "shape": _list(self.shape), **self.stats}

    @classmethod
    def from_json(cls, entry) -> "CamRecord | None":
        if not isinstance(entry, dict):
            return None
        stats = {k: v for k, v in entry.items() if k not in ("method", "shape", "skipped")}
        return cls(_text(entry.get("method")), _shape(entry.get("shape")), stats, _text(entry.get("skipped")))


@dataclass(frozen=True)
class MapRecord:
    """A map of the target a report describes: its shape and statistics (and a note about it),
    or why there is none (``skipped``); for a map at the input's resolution, the layer whose
    CAM it used (guided Grad-CAM)."""

    shape: tuple[int, ...] | None = None
    stats: dict = field(default_factory=dict)
    note: str | None = None
    skipped: str | None = None
    layer: str | None = None

    def to_json(self) -> dict:
        if self.shape is None:
            found: dict = {"skipped": self.skipped}
        else:
            found = {"shape": list(self.shape), **self.stats}
            if self.note is not None:
                found["note"] = self.note
        return found if self.layer is None else {**found, "layer": self.layer}

    @classmethod
    def from_json(cls, entry) -> "MapRecord | None":
        if not isinstance(entry, dict):
            return None
        stats = {k: v for k, v in entry.items() if k not in ("shape", "note", "skipped", "layer")}
        return cls(
            _shape(entry.get("shape")), stats, _text(entry.get("note")), _text(entry.get("skipped")), _text(entry.get("layer"))
        )


def _maps(value) -> dict[str, MapRecord]:
    return {k: m for k, m in ((k, MapRecord.from_json(v)) for k, v in _mapping(value).items()) if m is not None}


@dataclass(frozen=True)
class LayerRecord:
    """One recorded layer in a report.

    Attributes:
        shapes, stats: per tensor (``input``, ``output``, ``grad_input``, ``grad_output``)
            its shape and its statistics (``summaries.tensor_stats``), ``None`` where not recorded.
        pictures: per picture kind asked for, the file drawn (``None``: it does not apply).
        cams: each CAM method's map of the target, by method (``None``: a report without them).
        cam_topk: the classes (or detections) of the extra CAMs, as their JSON.
    """

    name: str
    requested: str | None = None
    module_type: str | None = None
    shapes: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    stats: dict[str, dict | None] = field(default_factory=dict)
    layout: Layout | None = None
    pictures: dict[str, str | None] = field(default_factory=dict)
    cam: CamRecord | None = None
    cams: dict[str, MapRecord] | None = None
    cam_topk: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()
    trust: dict | None = None

    def to_json(self) -> dict:
        entry: dict = {
            "name": self.name,
            "requested": self.requested,
            "module_type": self.module_type,
            "shapes": {k: _list(v) for k, v in self.shapes.items()},
            "stats": self.stats,
            "layout": self.layout.to_json() if self.layout is not None else None,
            "pictures": self.pictures,
        }
        if self.cam is not None:
            entry["cam"] = self.cam.to_json()
        if self.cams is not None:
            entry["cams"] = {method: found.to_json() for method, found in self.cams.items()}
        if self.cam_topk:
            entry["cam_topk"] = list(self.cam_topk)
        if self.notes:
            entry["notes"] = list(self.notes)
        if self.trust is not None:
            entry["trust"] = self.trust
        return entry

    @classmethod
    def from_json(cls, entry: dict) -> "LayerRecord":
        pictures = {k: v for k, v in _mapping(entry.get("pictures")).items() if v is None or isinstance(v, str)}
        return cls(
            name=str(entry.get("name")),
            requested=_text(entry.get("requested")),
            module_type=_text(entry.get("module_type")),
            shapes={k: _shape(v) for k, v in _mapping(entry.get("shapes")).items()},
            stats={k: (v if isinstance(v, dict) else None) for k, v in _mapping(entry.get("stats")).items()},
            layout=Layout.from_json(entry.get("layout")),
            pictures=pictures,
            cam=CamRecord.from_json(entry.get("cam")),
            cams=_maps(entry["cams"]) if isinstance(entry.get("cams"), dict) else None,
            cam_topk=tuple(v for v in entry.get("cam_topk") or () if isinstance(v, dict)),
            notes=_texts(entry.get("notes")),
            trust=entry.get("trust") if isinstance(entry.get("trust"), dict) else None,
        )


@dataclass(frozen=True)
class Asked:
    """What an image was explained with (what ``--skip-existing`` compares): the target
    options (``options.TargetOptions`` as JSON), the pictures and their options, whether
    ``tensors.npz`` was saved, the trust measures (``options.TrustOptions`` as JSON; ``{}``: none),
    the text prompts of a model with a text tower, and the references an embedding was compared with.

    ``prompts`` and ``references`` are ``None`` in a report of a hookviz that did not keep them:
    unknown, so ``--skip-existing`` redoes such a result of a model that takes them.
    """

    target: dict | None = None
    pictures: tuple[str, ...] = ()
    channels: str | None = None
    scale: str | None = None
    grad_channels: bool = False
    tensors: bool = False
    trust: dict = field(default_factory=dict)
    prompts: tuple[str, ...] | None = ()
    references: tuple[ReferenceIdentity, ...] | None = ()

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "pictures": list(self.pictures),
            "channels": self.channels,
            "scale": self.scale,
            "grad_channels": self.grad_channels,
            "tensors": self.tensors,
            "trust": self.trust,
            "prompts": list(self.prompts or ()),
            "references": [reference.to_json() for reference in self.references or ()],
        }

    @classmethod
    def from_json(cls, entry) -> "Asked":
        entry = _mapping(entry)
        return cls(
            entry.get("target") if isinstance(entry.get("target"), dict) else None,
            _texts(entry.get("pictures")),
            entry.get("channels"),
            entry.get("scale"),
            entry.get("grad_channels") is True,
            entry.get("tensors") is True,
            _mapping(entry.get("trust")),
            _texts(entry["prompts"]) if isinstance(entry.get("prompts"), list) else None,
            _references(entry["references"]) if isinstance(entry.get("references"), list) else None,
        )


def _references(value: list) -> tuple[ReferenceIdentity, ...]:
    return tuple(r for r in map(ReferenceIdentity.from_json, value) if r is not None)


@dataclass(frozen=True)
class Report:
    """One image's ``report.json``: what was explained, with what, and the files written.

    Attributes:
        preprocessing: ``images.Preprocessing`` as JSON.
        cam_methods: every CAM method asked for, in order; ``pixel_maps``: the maps of those
            that map the input (guided backprop, integrated gradients), by method.
        prediction: the task's part (``tasks.base.ImagePrediction.details``).
        declared_layout: ``featuremaps.DeclaredLayout`` as JSON, or ``None``.
        logits_count, logits_nonfinite: how many scores the model gave, and how many were NaN or infinite.
        fingerprint: ``fingerprints.description()``: its file and how it was made.
        schema: the version it was written in (0: before reports named one).
    """

    hookviz: str | None = None
    image: str | None = None
    photo: PhotoIdentity | None = None
    task: str | None = None
    notes: tuple[str, ...] = ()
    model: str | None = None
    weights: str | None = None
    weights_sha256: str | None = None
    preprocessing: dict = field(default_factory=dict)
    objective: str | None = None
    cam_methods: tuple[str, ...] = ()
    pixel_maps: dict[str, MapRecord] = field(default_factory=dict)
    target: Score | None = None
    top5: tuple[Score, ...] = ()
    prediction: dict = field(default_factory=dict)
    logits_count: int | None = None
    logits_nonfinite: int | None = None
    layer_choice: str | None = None
    declared_layout: dict | None = None
    layers: tuple[LayerRecord, ...] = ()
    skipped_layers: tuple[str, ...] = ()
    asked: Asked = Asked()
    files: tuple[str, ...] = ()
    fingerprint: dict | None = None
    schema: int = 1

    def to_json(self) -> dict:
        return {
            _SCHEMA: REPORT_SCHEMA,
            "hookviz": self.hookviz,
            "image": self.image,
            "photo": self.photo.to_json() if self.photo is not None else None,
            "task": self.task,
            "notes": list(self.notes),
            "model": self.model,
            "weights": self.weights,
            "weights_sha256": self.weights_sha256,
            "preprocessing": self.preprocessing,
            "objective": self.objective,
            "cam_methods": list(self.cam_methods),
            "pixel_maps": {method: found.to_json() for method, found in self.pixel_maps.items()},
            "target": self.target.to_json() if self.target is not None else None,
            "top5": [score.to_json() for score in self.top5],
            "prediction": self.prediction,
            "logits": {"count": self.logits_count, "nonfinite": self.logits_nonfinite},
            "layer_choice": self.layer_choice,
            "declared_layout": self.declared_layout,
            "layers": [layer.to_json() for layer in self.layers],
            "skipped_layers": list(self.skipped_layers),
            "asked": self.asked.to_json(),
            "files": list(self.files),
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, document, source="report.json") -> "Report | None":
        """The report ``document`` holds, or ``None`` when it is not one.

        Raises:
            SchemaError: written by a newer hookviz (``source`` names the file).
        """
        if not isinstance(document, dict) or not isinstance(document.get("layers"), list):
            return None
        schema = _version(document, REPORT_SCHEMA, source)
        if schema is None:
            return None
        logits = _mapping(document.get("logits"))
        return cls(
            hookviz=_text(document.get("hookviz")),
            image=_text(document.get("image")),
            photo=PhotoIdentity.from_json(document.get("photo")),
            task=_text(document.get("task")),
            notes=_texts(document.get("notes")),
            model=_text(document.get("model")),
            weights=_text(document.get("weights")),
            weights_sha256=_text(document.get("weights_sha256")),
            preprocessing=_mapping(document.get("preprocessing")),
            objective=_text(document.get("objective")),
            cam_methods=_texts(document.get("cam_methods")),
            pixel_maps=_maps(document.get("pixel_maps")),
            target=Score.from_json(document.get("target")),
            top5=tuple(s for s in map(Score.from_json, document.get("top5") or ()) if s is not None),
            prediction=_mapping(document.get("prediction")),
            logits_count=_int(logits.get("count")),
            logits_nonfinite=_int(logits.get("nonfinite")),
            layer_choice=_text(document.get("layer_choice")),
            declared_layout=document.get("declared_layout") if isinstance(document.get("declared_layout"), dict) else None,
            layers=tuple(LayerRecord.from_json(layer) for layer in document["layers"] if isinstance(layer, dict)),
            skipped_layers=_texts(document.get("skipped_layers")),
            asked=Asked.from_json(document.get("asked")),
            files=_texts(document.get("files")),
            fingerprint=document.get("fingerprint") if isinstance(document.get("fingerprint"), dict) else None,
            schema=schema,
        )

    # -- what readers ask of it

    @property
    def layers_by_name(self) -> dict[str, LayerRecord]:
        """Its layers by name, in the run's order."""
        return {layer.name: layer for layer in self.layers}

    @property
    def fingerprint_file(self) -> str | None:
        """The fingerprint file it lists, ``None`` for a report without one (before hookviz kept them)."""
        name = (self.fingerprint or {}).get("file")
        return name if isinstance(name, str) and name in self.files else None

    @property
    def fingerprint_format(self) -> int | None:
        return _int((self.fingerprint or {}).get("format")) if self.fingerprint_file is not None else None

    @property
    def input_hw(self) -> tuple[int, int] | None:
        """The model's input size, when every photo became the same square (``None``: each its own)."""
        size = self.preprocessing.get("size")
        if isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size):
            return size[0], size[1]
        return None

    @property
    def input_channels(self) -> int | None:
        return _int(self.preprocessing.get("channels"))


def read_report(path: Path) -> Report | None:
    """An image's ``report.json``, or ``None`` when it is missing, empty, truncated or not a report.

    Raises:
        SchemaError: written by a newer hookviz.
    """
    return _read(path, Report)


# ----------------------------------------------------------------------------- run.json


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
            error=_text(entry.get("error")),
            target=entry.get("target") if isinstance(entry.get("target"), dict) else None,
            files=_texts(entry.get("files")),
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
        entry = _mapping(entry)
        return cls(*(_int(entry.get(key)) or 0 for key in ("images", "done", "failed", "skipped", "not_done")))


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
        entry = _mapping(entry)
        findings = tuple(f for f in map(_finding, entry.get("findings") or ()) if f is not None)
        return cls(
            _texts(entry.get("enabled")),
            _number(entry.get("dead_fraction")),
            entry.get("passed") is not False,
            findings,
            _text(entry.get("baseline")),
            entry.get("tolerances") if isinstance(entry.get("tolerances"), dict) else None,
        )


def _finding(entry) -> Finding | None:
    if not isinstance(entry, dict):
        return None
    return Finding(
        str(entry.get("check")),
        str(entry.get("image")),
        _text(entry.get("layer")),
        str(entry.get("detail")),
        _text(entry.get("figure")),
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
        return cls(entry["file"], _int(entry.get("images")) or 0, _int(entry.get("drift_findings")) or 0)


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
            _SCHEMA: RUN_SCHEMA,
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
        schema = _version(document, RUN_SCHEMA, source)
        if schema is None:
            return None
        shard = document.get("shard")
        return cls(
            hookviz=_text(document.get("hookviz")),
            torch=_text(document.get("torch")),
            torchvision=_text(document.get("torchvision")),
            python=_text(document.get("python")),
            command=_texts(document.get("command")),
            model=_text(document.get("model")),
            weights=_text(document.get("weights")),
            weights_sha256=_text(document.get("weights_sha256")),
            task=_text(document.get("task")),
            device=_text(document.get("device")),
            layers=_texts(document.get("layers")),
            layer_choice=_text(document.get("layer_choice")),
            shard=(shard[0], shard[1]) if isinstance(shard, list) and len(shard) == 2 and all(map(_int, shard)) else None,
            started=_text(document.get("started")),
            seconds=_number(document.get("seconds")),
            interrupted=document.get("interrupted") is True,
            error=_text(document.get("error")),
            counts=Counts.from_json(document.get("counts")),
            images=tuple(s for s in map(ImageStatus.from_json, document["images"]) if s is not None),
            checks=Checks.from_json(document.get("checks")),
            notes=_texts(document.get("notes")),
            tensorboard=_text(document.get("tensorboard")),
            trust=document.get("trust") if isinstance(document.get("trust"), dict) else None,
            diff=DiffEntry.from_json(document.get("diff")),
            schema=schema,
        )


def read_run(path: Path) -> RunRecord | None:
    """A run's description, or ``None`` when it is missing, unreadable or not a run's of hookviz.

    Raises:
        SchemaError: written by a newer hookviz.
    """
    return _read(path, RunRecord)


def _read(path: Path, record):
    """``record.from_json`` of the JSON file at ``path``, or ``None`` when it cannot be read as JSON."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.from_json(document, path)
