"""``report.json``, one image's results, as typed records (see ``records``): the report, its
layers, their CAMs and maps, and what the image was explained with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hookviz.anatomy.featuremaps import Layout
from hookviz.inputs.identity import ReferenceIdentity, SampleIdentity
from hookviz.store.documents import (
    REPORT_SCHEMA,
    SCHEMA_KEY,
    read_document,
    read_int,
    read_list,
    read_mapping,
    read_number,
    read_shape,
    read_text,
    read_texts,
    schema_version,
)

__all__ = ["Score", "FrameFigures", "CamRecord", "MapRecord", "LayerRecord", "Asked", "Report", "read_report"]


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
            read_int(entry.get("index")),
            read_text(entry.get("name")),
            read_number(entry.get("score")),
            read_number(entry.get("probability")),
            read_number(entry.get("fraction")),
        )

    @property
    def label(self) -> str:
        """Its name, or its index where it has none."""
        return self.name or str(self.index)


@dataclass(frozen=True)
class FrameFigures:
    """A clip's map at one of its frames: its peak (largest finite value) and its share of the
    map's mass (the frame's sum over the sum of every frame's; ``None`` where the map's mass is
    not above 0, or the frame has no finite value). A map of fewer time slices than the clip
    has frames (a temporal stride over 1) is read at each frame as the ``frames`` strip reads it."""

    peak: float | None
    share: float | None

    def to_json(self) -> dict:
        return {"peak": self.peak, "share": self.share}

    @classmethod
    def from_json(cls, entry) -> "FrameFigures | None":
        if not isinstance(entry, dict):
            return None
        return cls(read_number(entry.get("peak")), read_number(entry.get("share")))


def _frames(value) -> tuple[FrameFigures, ...]:
    return tuple(f for f in map(FrameFigures.from_json, value if isinstance(value, list) else ()) if f is not None)


@dataclass(frozen=True)
class CamRecord:
    """A layer's CAM in a report: its method and shape and statistics, or why it was skipped;
    a clip's, also its figures at each frame (``frames``; empty: not a clip's)."""

    method: str | None
    shape: tuple[int, ...] | None = None
    stats: dict = field(default_factory=dict)
    skipped: str | None = None
    frames: tuple[FrameFigures, ...] = ()

    def to_json(self) -> dict:
        if self.shape is None and self.skipped is not None:
            return {"method": self.method, "skipped": self.skipped}
        entry = {"method": self.method, "shape": read_list(self.shape), **self.stats}
        return {**entry, "frames": [f.to_json() for f in self.frames]} if self.frames else entry

    @classmethod
    def from_json(cls, entry) -> "CamRecord | None":
        if not isinstance(entry, dict):
            return None
        stats = {k: v for k, v in entry.items() if k not in ("method", "shape", "skipped", "frames")}
        return cls(
            read_text(entry.get("method")),
            read_shape(entry.get("shape")),
            stats,
            read_text(entry.get("skipped")),
            _frames(entry.get("frames")),
        )


@dataclass(frozen=True)
class MapRecord:
    """A map of the target a report describes: its shape and statistics (and a note about it),
    or why there is none (``skipped``); for a map at the input's resolution, the layer whose
    CAM it used (guided Grad-CAM) and the trust measures of its relevance map (``trust``, as
    ``trust.records.LayerTrust.to_json`` writes them; ``None``: not measured); a clip's map
    of a layer, its figures at each frame (``frames``, as ``CamRecord``'s); a sample of several
    inputs', each other input's map's shape and statistics by input name (``inputs``)."""

    shape: tuple[int, ...] | None = None
    stats: dict = field(default_factory=dict)
    note: str | None = None
    skipped: str | None = None
    layer: str | None = None
    trust: dict | None = None
    frames: tuple[FrameFigures, ...] = ()
    inputs: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        if self.shape is None:
            found: dict = {"skipped": self.skipped}
        else:
            found = {"shape": list(self.shape), **self.stats}
            if self.note is not None:
                found["note"] = self.note
            if self.trust is not None:
                found["trust"] = self.trust
            if self.frames:
                found["frames"] = [f.to_json() for f in self.frames]
            if self.inputs:
                found["inputs"] = self.inputs
        return found if self.layer is None else {**found, "layer": self.layer}

    @classmethod
    def from_json(cls, entry) -> "MapRecord | None":
        if not isinstance(entry, dict):
            return None
        stats = {k: v for k, v in entry.items() if k not in ("shape", "note", "skipped", "layer", "trust", "frames", "inputs")}
        return cls(
            read_shape(entry.get("shape")),
            stats,
            read_text(entry.get("note")),
            read_text(entry.get("skipped")),
            read_text(entry.get("layer")),
            entry.get("trust") if isinstance(entry.get("trust"), dict) else None,
            _frames(entry.get("frames")),
            {k: v for k, v in read_mapping(entry.get("inputs")).items() if isinstance(v, dict)},
        )


def _maps(value) -> dict[str, MapRecord]:
    return {k: m for k, m in ((k, MapRecord.from_json(v)) for k, v in read_mapping(value).items()) if m is not None}


@dataclass(frozen=True)
class LayerRecord:
    """One recorded layer in a report.

    Attributes:
        shapes, stats: per tensor (``input``, ``output``, ``grad_input``, ``grad_output``)
            its shape and its statistics (``summaries.tensor_stats``), ``None`` where not recorded.
        pictures: per picture kind asked for, the file drawn (``None``: it does not apply).
        cams: each CAM method's map of the target, by method (``None``: a report without them).
        cam_topk: the classes (or detections) of the extra CAMs, as their JSON.
        top_channels: the channels that gave most to the target (``--top-channels``), as their JSON.
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
    top_channels: dict | None = None

    def to_json(self) -> dict:
        entry: dict = {
            "name": self.name,
            "requested": self.requested,
            "module_type": self.module_type,
            "shapes": {k: read_list(v) for k, v in self.shapes.items()},
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
        if self.top_channels is not None:
            entry["top_channels"] = self.top_channels
        return entry

    @classmethod
    def from_json(cls, entry: dict) -> "LayerRecord":
        pictures = {k: v for k, v in read_mapping(entry.get("pictures")).items() if v is None or isinstance(v, str)}
        return cls(
            name=str(entry.get("name")),
            requested=read_text(entry.get("requested")),
            module_type=read_text(entry.get("module_type")),
            shapes={k: read_shape(v) for k, v in read_mapping(entry.get("shapes")).items()},
            stats={k: (v if isinstance(v, dict) else None) for k, v in read_mapping(entry.get("stats")).items()},
            layout=Layout.from_json(entry.get("layout")),
            pictures=pictures,
            cam=CamRecord.from_json(entry.get("cam")),
            cams=_maps(entry["cams"]) if isinstance(entry.get("cams"), dict) else None,
            cam_topk=tuple(v for v in entry.get("cam_topk") or () if isinstance(v, dict)),
            notes=read_texts(entry.get("notes")),
            trust=entry.get("trust") if isinstance(entry.get("trust"), dict) else None,
            top_channels=entry.get("top_channels") if isinstance(entry.get("top_channels"), dict) else None,
        )


@dataclass(frozen=True)
class Asked:
    """What an image was explained with (what ``--skip-existing`` compares): the target
    options (``options.TargetOptions`` as JSON), the pictures and their options, whether
    ``tensors.npz`` was saved, the trust measures (``options.TrustOptions`` as JSON; ``{}``: none),
    the text prompts of a model with a text tower, the references an embedding was compared with,
    and how the maps of the input were drawn (``pixel_clip``, ``pixel_sign``; ``None``: not drawn,
    or by a hookviz that did not keep them).

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
    pixel_clip: float | None = None
    pixel_sign: str | None = None

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
            "pixel_clip": self.pixel_clip,
            "pixel_sign": self.pixel_sign,
        }

    @classmethod
    def from_json(cls, entry) -> "Asked":
        entry = read_mapping(entry)
        return cls(
            entry.get("target") if isinstance(entry.get("target"), dict) else None,
            read_texts(entry.get("pictures")),
            entry.get("channels"),
            entry.get("scale"),
            entry.get("grad_channels") is True,
            entry.get("tensors") is True,
            read_mapping(entry.get("trust")),
            read_texts(entry["prompts"]) if isinstance(entry.get("prompts"), list) else None,
            _references(entry["references"]) if isinstance(entry.get("references"), list) else None,
            _number(entry.get("pixel_clip")),
            entry.get("pixel_sign") if isinstance(entry.get("pixel_sign"), str) else None,
        )


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _references(value: list) -> tuple[ReferenceIdentity, ...]:
    return tuple(r for r in map(ReferenceIdentity.from_json, value) if r is not None)


@dataclass(frozen=True)
class Report:
    """One image's ``report.json``: what was explained, with what, and the files written.

    Attributes:
        preprocessing: ``images.Preprocessing`` as JSON.
        cam_methods: every CAM method asked for, in order; ``pixel_maps``: the maps of those
            that map the input (guided backprop, integrated gradients), by method.
        prediction: the task's part (``tasks.base.ImagePrediction.to_json()``).
        declared_layout: ``featuremaps.DeclaredLayout`` as JSON, or ``None``.
        logits: how many scores the model gave, and how many were NaN or infinite (``logits_count``,
            ``logits_nonfinite``).
        sample: the sample as the run was given it (a photo's path, a clip's ``VIDEO#k``); ``None``
            for one given in memory. ``sample_identity``: what it was made from (``--skip-existing``
            compares it).
        fingerprint: ``fingerprints.description()``: its file and how it was made.
        schema: the version it was written in (0: before reports named one).
        (A report of schema 2 and older keeps its sample as ``image`` and ``photo``: read as these.)
    """

    hookviz: str | None = None
    sample: str | None = None
    sample_identity: SampleIdentity | None = None
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
    logits: tuple[int | None, int | None] = (None, None)
    layer_choice: str | None = None
    declared_layout: dict | None = None
    layers: tuple[LayerRecord, ...] = ()
    skipped_layers: tuple[str, ...] = ()
    asked: Asked = Asked()
    files: tuple[str, ...] = ()
    fingerprint: dict | None = None
    schema: int = 1
    times: tuple[float, ...] | None = None

    @property
    def logits_count(self) -> int | None:
        return self.logits[0]

    @property
    def logits_nonfinite(self) -> int | None:
        return self.logits[1]

    def to_json(self) -> dict:
        times = {} if self.times is None else {"times": list(self.times)}
        return {
            SCHEMA_KEY: REPORT_SCHEMA,
            "hookviz": self.hookviz,
            "sample": self.sample,
            "sample_identity": self.sample_identity.to_json() if self.sample_identity is not None else None,
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
            **times,
        }

    @classmethod
    def from_json(cls, document, source="report.json") -> "Report | None":
        """The report ``document`` holds, or ``None`` when it is not one.

        Raises:
            SchemaError: written by a newer hookviz (``source`` names the file).
        """
        if not isinstance(document, dict) or not isinstance(document.get("layers"), list):
            return None
        schema = schema_version(document, REPORT_SCHEMA, source)
        if schema is None:
            return None
        logits = read_mapping(document.get("logits"))
        words_of_2 = "sample_identity" not in document  # schema 2 and older: "image" and "photo"
        return cls(
            hookviz=read_text(document.get("hookviz")),
            sample=read_text(document.get("image" if words_of_2 else "sample")),
            sample_identity=SampleIdentity.from_json(document.get("photo" if words_of_2 else "sample_identity")),
            task=read_text(document.get("task")),
            notes=read_texts(document.get("notes")),
            model=read_text(document.get("model")),
            weights=read_text(document.get("weights")),
            weights_sha256=read_text(document.get("weights_sha256")),
            preprocessing=read_mapping(document.get("preprocessing")),
            objective=read_text(document.get("objective")),
            cam_methods=read_texts(document.get("cam_methods")),
            pixel_maps=_maps(document.get("pixel_maps")),
            target=Score.from_json(document.get("target")),
            top5=tuple(s for s in map(Score.from_json, document.get("top5") or ()) if s is not None),
            prediction=read_mapping(document.get("prediction")),
            logits=(read_int(logits.get("count")), read_int(logits.get("nonfinite"))),
            layer_choice=read_text(document.get("layer_choice")),
            declared_layout=document.get("declared_layout") if isinstance(document.get("declared_layout"), dict) else None,
            layers=tuple(LayerRecord.from_json(layer) for layer in document["layers"] if isinstance(layer, dict)),
            skipped_layers=read_texts(document.get("skipped_layers")),
            asked=Asked.from_json(document.get("asked")),
            files=read_texts(document.get("files")),
            fingerprint=document.get("fingerprint") if isinstance(document.get("fingerprint"), dict) else None,
            schema=schema,
            times=_times(document.get("times")),
        )

    # -- what readers ask of it

    @property
    def older_words(self) -> bool:
        """Whether it was written in schema 1 or 2, whose words for the sample were ``image`` and
        ``photo``: ``--skip-existing`` redoes it once, so that a run folder holds one schema (a
        report without a schema, of an older hookviz, is resumed as it always was)."""
        return self.schema in (1, 2)

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
        return read_int((self.fingerprint or {}).get("format")) if self.fingerprint_file is not None else None

    @property
    def input_hw(self) -> tuple[int, ...] | None:
        """The model's input size, when every photo became the same square (``None``: each its own);
        a signal's (L,) or a clip's (T, H, W), as its ``input_size`` says."""
        real = self.preprocessing.get("input_size")
        if isinstance(real, list) and 1 <= len(real) <= 3 and all(isinstance(v, int) and v > 0 for v in real):
            return tuple(real)
        size = self.preprocessing.get("size")
        if isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size):
            return size[0], size[1]
        return None

    @property
    def input_channels(self) -> int | None:
        return read_int(self.preprocessing.get("channels"))


def read_report(path: Path) -> Report | None:
    """An image's ``report.json``, or ``None`` when it is missing, empty, truncated or not a report.

    Raises:
        SchemaError: written by a newer hookviz.
    """
    return read_document(path, Report)


def _times(value) -> tuple[float, ...] | None:
    """A clip's frame times as report.json keeps them, or ``None`` (a photo's report, or none readable)."""
    if not isinstance(value, list) or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in value):
        return None
    return tuple(float(t) for t in value)
