"""Outputs: the files of a run, each written atomically, under names that never clash.

Every file is written under a temporary name in its own folder and renamed into place,
so an interrupted run (Ctrl-C, SIGTERM, a kill) leaves complete files or none. A
temporary name says which host and process writes it, so a later run removes only the
leftovers of writers that are gone, never those of a run still writing into the same
folder. ``report.json`` is written last in each image's folder: a complete one marks the
image done.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from hookviz.errors import OutputError, SchemaError, arg, display_path
from hookviz.explaining.summaries import tensor_stats
from hookviz.inputs.identity import Match, file_sha256, match_photo
from hookviz.render import INPUT_PICTURE, PIXEL_PICTURE, PREDICTION_PICTURE
from hookviz.store.fingerprints import FINGERPRINT, description, fingerprint_of, write_fingerprint
from hookviz.store.records import Asked, CamRecord, LayerRecord, MapRecord, Report, Score, read_report

if TYPE_CHECKING:
    from hookviz.options import PictureOptions

__all__ = [
    "REPORT",
    "TENSORS",
    "DIFF",
    "RUN_FILE_PATTERN",
    "atomic_write",
    "write_json",
    "sweep_stale_files",
    "display_path",
    "existing_ancestor",
    "output_names",
    "plain_name",
    "distinct_name",
    "Placement",
    "place",
    "Recipe",
    "Folders",
    "plan_folders",
    "layer_stems",
    "report_of",
    "save_explanation",
]

REPORT = "report.json"
TENSORS = "tensors.npz"
#: A run's comparison with a baseline, at the top of its output folder (``hookviz.compare.diffing``).
DIFF = "diff.json"
#: Files a run writes at the top of its output folder; no image's folder may take these names.
RUN_FILE_PATTERN = re.compile(r"^(run(-\d+-of-\d+)?\.json|index\.html|diff\.json)$", re.IGNORECASE)
#: A leftover temporary file older than this is removed whoever wrote it.
STALE_SECONDS = 24 * 3600
_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"


def atomic_write(path: Path, data: bytes | Callable[[BinaryIO], object]) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    ``data`` is the bytes, or a function that writes them into the open file (large
    arrays then go to the file without first being gathered in memory). The file gets the
    mode ``open()`` would give it (the process's umask applies, as the kernel applies it).
    A symbolic link is followed (its target is replaced, the link kept); a path that is a
    device or a pipe (``/dev/null``) is written into, never replaced.
    """
    path = Path(os.path.realpath(path)) if os.path.islink(path) else path
    if path.exists() and not path.is_file():
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
        with open(path, "wb") as stream:  # a device or a pipe: there is nothing to replace
            data(stream) if callable(data) else stream.write(data)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}~{_HOST}~{os.getpid()}~{secrets.token_hex(4)}.part"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "wb") as stream:
            if callable(data):
                data(stream)
            else:
                stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def existing_ancestor(path: Path) -> Path:
    """``path`` if it exists, else its nearest parent that does: where writing ``path`` would
    have to create folders, so where writability is checked before a run creates anything."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _writer_gone(path: Path, now: float) -> bool:
    """Whether the temporary file ``path`` is a leftover: its writer (a process on this
    host) no longer runs, or it is older than a day."""
    try:
        if now - path.stat().st_mtime > STALE_SECONDS:
            return True
    except OSError:
        return False
    parts = path.name[: -len(".part")].rsplit("~", 3)
    if len(parts) != 4 or parts[1] != _HOST or not parts[2].isdigit():
        return False  # another host's, or an older hookviz's: only age tells
    pid = int(parts[2])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, under another user
        return False
    return False


def sweep_stale_files(out: Path) -> int:
    """Delete the temporary files that killed runs left in ``out`` and its image folders,
    and only those: a run still writing into ``out`` (another shard) keeps its own."""
    removed = 0
    now = time.time()
    for pattern in (".*.part", "*/.*.part"):
        for path in out.glob(pattern):
            if _writer_gone(path, now):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed += 1
    return removed


def write_json(path: Path, document: dict) -> Path:
    return atomic_write(path, (json.dumps(document, indent=2, allow_nan=False, default=_jsonable) + "\n").encode())


_WRITTEN_SUFFIXES = (".png", ".jpg", ".npz")  # pictures, the photo, tensors and fingerprint


def _listed_files(directory: Path) -> list[str]:
    """The files the ``report.json`` in ``directory`` says hookviz wrote there: plain names of
    the kinds hookviz writes, never a path out of the folder (none for a report of a newer
    hookviz, whose list this one cannot vouch for)."""
    try:
        report = read_report(directory / REPORT)
    except SchemaError:
        return []
    return [
        name
        for name in (report.files if report is not None else ())
        if name == Path(name).name and "\\" not in name and not name.startswith(".") and name.lower().endswith(_WRITTEN_SUFFIXES)
    ]


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, Path):
        return display_path(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# ----------------------------------------------------------------------------- names


def _digest(text: str, length: int = 8) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:length]


def _safe(name: str) -> str:
    cleaned = "".join(c if (c.isalnum() and c.isprintable()) or c in "-_.+ " else "_" for c in name).strip(" .")
    return cleaned or "image"


def output_names(paths: Sequence[Path]) -> dict[Path, str]:
    """A folder name per image: its stem, made safe; with a short hash of its full path
    (``distinct_name``) when two images of the run share a stem, or when the stem would take
    the name of a run-level file (``run.json``, ``index.html``). Depends only on the run's
    full input list, so every ``--shard`` of it agrees."""
    plain = {path: plain_name(path) for path in paths}
    counts = Counter(name.lower() for name in plain.values() if name is not None)
    return {path: name if name is not None and counts[name.lower()] == 1 else distinct_name(path) for path, name in plain.items()}


def plain_name(path: Path) -> str | None:
    """An image's folder name when no other image takes it: its stem, or ``None`` when the
    stem needs characters replaced or would take a run-level file's name."""
    stem = _safe(path.stem)[:120]
    return None if RUN_FILE_PATTERN.match(stem) or stem != path.stem[:120] else stem


def distinct_name(path: Path) -> str:
    """The folder name of an image whose stem is taken: the stem and a short hash of its full path."""
    return f"{_safe(path.stem)[:120]}-{_digest(display_path(path.resolve()))}"


@dataclass(frozen=True)
class Placement:
    """Where one photo's results go: ``name``, its folder under the output folder; the
    ``report`` already there (``None``: none, or not a whole one); and how the photo that
    report was made from relates to this one (``identity.Match``)."""

    name: str
    report: Report | None
    match: Match


def place(out: Path, path: Path, name: str, taken: Collection[str] = (), present: Collection[str] | None = None) -> Placement:
    """The folder for the photo at ``path`` in ``out``, which earlier runs may have filled.

    Of its possible names, ``name`` (from ``output_names``), ``plain_name`` and
    ``distinct_name``, it is the one whose report was made from this photo (the same bytes,
    or this file before it was rewritten); else the first that holds no other photo's
    results; else the distinct name. So a photo of another folder with the same file name (a
    camera's ``IMG_0001``) never takes, or overwrites, another photo's results, and an
    earlier run's results are found whichever other photos it ran with. A name in ``taken``
    (lower case: another image's of this run) is never used. ``present``, the lower-case
    names of the folders in ``out`` when the caller listed them, spares looking into the others.
    """
    names = (name, plain_name(path), distinct_name(path))
    candidates = [c for c in dict.fromkeys(n for n in names if n) if c == name or c.lower() not in taken]
    free = None
    for candidate in candidates:
        there = present is None or candidate.lower() in present
        report = read_report(out / candidate / REPORT) if there else None
        match = Match.UNKNOWN if report is None else match_photo(report.photo, path, file_sha256)
        if match in (Match.SAME, Match.CHANGED):
            return Placement(candidate, report, match)
        if match is Match.UNKNOWN and free is None:  # nothing there, or a report of an older hookviz
            free = Placement(candidate, report, match)
    return free or Placement(candidates[-1], None, Match.OTHER)


@dataclass(frozen=True)
class Recipe:
    """What a run makes of each photo, as ``--skip-existing`` compares it with a report
    already in the photo's folder: the model, its weights (and their bytes), the
    preprocessing and target options, the layers, the pictures and whether tensors are saved.

    Attributes:
        target: the target options as report.json keeps them (``Explainer.asked``).
        layers: the run's layer selections (``layers.LayerSpec``: ``path``, ``call``, ``label``).
        pictures: a ``PictureOptions``.
    """

    model: str
    weights: str
    weights_sha256: str | None
    preprocessing: dict
    target: dict
    layers: tuple
    pictures: PictureOptions
    save_tensors: bool = False
    trust: dict = field(default_factory=dict)
    prompts: tuple[str, ...] = ()
    references: tuple = ()

    @classmethod
    def of(cls, explainer, pictures, save_tensors: bool, trust) -> Recipe:
        """The recipe of a run with ``explainer`` and these ``PictureOptions`` and ``TrustOptions``."""
        model = explainer.model
        return cls(
            model.name,
            model.weights,
            model.weights_sha256,
            explainer.preprocessing.to_json(),
            explainer.asked,
            tuple(explainer.layers),
            pictures,
            save_tensors,
            trust.to_json() if trust.any else {},
            tuple(model.prompts),
            tuple(explainer.references),
        )

    def made(self, folder: Path, report: Report) -> bool:
        """Whether ``report`` (``folder``'s) is of this recipe's results: the same model, weights,
        preprocessing and target options, listing every layer of this recipe with every
        picture it draws (and tensors.npz when asked), each file there."""
        if not self._same(report):
            return False
        if self.save_tensors and not (folder / TENSORS).exists():
            return False
        if FINGERPRINT not in report.files:
            return False  # written before hookviz kept fingerprints: a later comparison needs one
        wanted = [kind.name for kind in self.pictures.kinds]
        for spec in self.layers:
            matching = [layer for layer in report.layers if _names_spec(layer.name, spec)]
            if not matching and spec.label not in report.skipped_layers:
                return False
            for layer in matching:
                if any(k not in layer.pictures or not _there(folder, layer.pictures[k]) for k in wanted):
                    return False
        return True

    def _same(self, report: Report) -> bool:
        asked = report.asked
        grids = any(kind.group == "channels" for kind in self.pictures.kinds)
        return (
            report.model == self.model
            and report.weights == self.weights
            and report.weights_sha256 == self.weights_sha256  # a file rewritten in place
            and report.preprocessing == self.preprocessing
            and asked.target == self.target
            and asked.trust == self.trust
            and _known_same(asked.prompts, self.prompts)
            and _known_same(_contents(asked.references), _contents(self.references))
            and (not grids or (asked.channels, asked.scale) == (str(self.pictures.channels), self.pictures.scale))
        )


def _known_same(recorded, wanted: tuple) -> bool:
    """Whether a report's prompts (or references) are the recipe's. An older report kept none
    (``None``): unknown, so a recipe that has some redoes it; one that has none (a model
    without a text tower, no reference) could not have had any then either."""
    return tuple(recorded) == wanted if recorded is not None else not wanted


def _contents(references) -> tuple | None:
    """References as compared: name and content, not where or when the file lies (a copied
    folder of references is the same concept)."""
    return None if references is None else tuple((r.name, r.sha256) for r in references)


def _there(folder: Path, name: str | None) -> bool:
    """Whether a picture a report lists is in ``folder`` (``None``: it does not apply, nothing to find)."""
    return name is None or (folder / name).exists()


def _names_spec(name: str, spec) -> bool:
    """Whether a report's layer ``name`` (``relu:1``) is a call of the module ``spec`` selects."""
    path, _, call = name.partition(":")
    return path == spec.path and (spec.call is None or call == str(spec.call))


@dataclass(frozen=True)
class Folders:
    """Where each photo of a run goes (``names``), and which of them are ``done`` already or still ``todo``."""

    names: dict
    done: tuple[Path, ...] = ()
    todo: tuple[Path, ...] = ()


def plan_folders(out: Path, paths: Sequence[Path], names: dict[Path, str], recipe: Recipe | None = None) -> Folders:
    """Give each photo of ``paths`` its folder in ``out`` (``place``: never another photo's),
    starting from ``names`` (``output_names`` of the run's full list).

    With a ``recipe`` (``--skip-existing``), a photo whose folder holds a complete result of
    this photo made by this recipe is done already; the others are still to do.

    Raises:
        SchemaError: a report there was written by a newer hookviz.
    """
    names = dict(names)
    taken = {name.lower() for name in names.values()}  # as a case-insensitive file system sees them
    present = {entry.lower() for entry in os.listdir(out)}  # one listing, not a look per image
    done, todo = [], []
    for path in paths:
        placement = place(out, path, names[path], taken=taken, present=present)
        names[path] = placement.name
        report = placement.report if placement.match is Match.SAME else None
        if recipe is not None and report is not None and recipe.made(out / placement.name, report):
            done.append(path)
        else:
            todo.append(path)
    return Folders(names, tuple(done), tuple(todo))


def layer_stems(names: Sequence[str]) -> dict[str, str]:
    """A file-name stem per layer name, unique among ``names``: ``layer3.5.relu:1`` ->
    ``layer3.5.relu-1``. A name with characters a file name cannot hold (``a/b``) gets a
    short hash of the name, so it never takes another layer's files (``a_b``)."""
    stems = {}
    for name in names:
        plain = name.replace(":", "-")
        stem = _safe(plain)
        if stem != plain or len(stem) > 150:
            stem = f"{stem[:150]}-{_digest(name, 6)}"
        stems[name] = stem
    counts = Counter(stems.values())
    return {name: (f"{stem}-{_digest(name, 6)}" if counts[stem] > 1 else stem) for name, stem in stems.items()}


# ----------------------------------------------------------------------------- files


def report_of(
    explanation,
    pictures_by_layer: dict[str, dict[str, str | None]],
    files: Sequence[str],
    pictures=None,
    save_tensors: bool = False,
) -> Report:
    """The machine-readable ``report.json`` of one image.

    ``pictures_by_layer`` maps each layer to the pictures asked of it: the file written,
    or ``None`` where the picture does not apply (a CAM of a vector).
    """
    from hookviz import __version__

    source = explanation.image.source
    logits_nonfinite = int(np.size(explanation.logits) - np.isfinite(explanation.logits).sum())
    return Report(
        hookviz=__version__,
        image=display_path(source.path) if source.path is not None else None,
        photo=source.identity,
        task=explanation.task,
        notes=tuple(explanation.notes),
        model=explanation.model,
        weights=explanation.weights,
        weights_sha256=explanation.weights_sha256,
        preprocessing=explanation.preprocessing.to_json(),
        objective=explanation.objective,
        cam_methods=tuple(explanation.cam_methods),
        pixel_maps={name: _pixel_record(pixels) for name, pixels in explanation.pixel_maps.items()},
        target=Score.of(explanation.target) if explanation.target is not None else None,
        top5=tuple(Score.of(score) for score in explanation.top5),
        prediction=explanation.prediction.to_json() if explanation.prediction is not None else {},
        logits_count=int(np.size(explanation.logits)),
        logits_nonfinite=logits_nonfinite,
        layer_choice=explanation.layer_choice,
        declared_layout=explanation.declared_layout.to_json() if explanation.declared_layout is not None else None,
        layers=tuple(_layer_record(explanation, layer, pictures_by_layer.get(layer.name, {})) for layer in explanation.layers),
        skipped_layers=tuple(explanation.skipped_layers),
        asked=Asked(
            target=explanation.asked,
            pictures=tuple(pictures.pictures) if pictures is not None else (),
            channels=str(pictures.channels) if pictures is not None else None,
            scale=pictures.scale if pictures is not None else None,
            grad_channels=bool(pictures.grad_channels) if pictures is not None else False,
            tensors=save_tensors,
            trust=explanation.trust,
            prompts=tuple(explanation.prompts),
            references=tuple(explanation.references),
        ),
        files=tuple(files),
        fingerprint=description(),
    )


def _layer_record(explanation, layer, pictures: dict[str, str | None]) -> LayerRecord:
    cam = None
    if layer.cam is not None:
        cam = CamRecord(explanation.cam_method, tuple(layer.cam.shape), _map_stats(layer.cam))
    elif layer.cam_note:
        cam = CamRecord(explanation.cam_method, skipped=layer.cam_note)
    return LayerRecord(
        name=layer.name,
        requested=layer.requested,
        module_type=layer.module_type,
        shapes={k: (tuple(v) if v is not None else None) for k, v in layer.shapes.items()},
        stats=layer.stats,
        layout=layer.layout,
        pictures=pictures,
        cam=cam,
        cams=_method_maps(layer) if explanation.cam_methods else None,
        cam_topk=tuple(score.to_json() for score, _ in layer.topk_cams),
        notes=tuple(layer.notes or ()),
        trust=layer.trust.to_json() if layer.trust is not None else None,
    )


def _map_stats(array) -> dict:
    return {k: v for k, v in tensor_stats(array).items() if k != "zero_fraction"}


def _method_maps(layer) -> dict[str, MapRecord]:
    """Per layer method, its map's shape and statistics (and a note), or why it has none."""
    found = {}
    for method in (*layer.cams, *(name for name in layer.cam_notes if name not in layer.cams)):
        if method in layer.cams:
            cam = layer.cams[method]
            found[method] = MapRecord(tuple(cam.shape), _map_stats(cam), note=layer.cam_notes.get(method))
        else:
            found[method] = MapRecord(skipped=layer.cam_notes[method])
    return found


def _pixel_record(pixels) -> MapRecord:
    """An input-resolution map's shape and statistics (and the layer it used), or why it has none."""
    if pixels.map is None:
        return MapRecord(skipped=pixels.note, layer=pixels.layer)
    return MapRecord(tuple(pixels.map.shape), _map_stats(pixels.map), layer=pixels.layer)


def write_tensors_npz(explanation, stream: BinaryIO) -> None:
    """``tensors.npz``: ``<layer>/input|output|grad_input|grad_output|cam``, ``<layer>/cam_K`` (the
    K-th top class's or detection's CAM), ``<layer>/cam.<method>`` (each layer method's map of
    the target; ``cam`` is the first's), ``input/<method>`` (each input-resolution map, (C, H, W)),
    ``logits``, ``input``.

    Needs the full tensors (``SummaryOptions(keep_tensors=True)``).
    """
    arrays: dict[str, np.ndarray] = {
        "logits": np.asarray(explanation.logits, dtype=np.float32)[None],
        "input": np.asarray(explanation.image.tensor, dtype=np.float32)[None],
    }
    for layer in explanation.layers:
        for key, value in layer.tensors().items():
            if value is not None:
                arrays[f"{layer.name}/{key}"] = np.asarray(value, dtype=np.float32)
        if layer.cam is not None:
            arrays[f"{layer.name}/cam"] = np.asarray(layer.cam, dtype=np.float32)
        for k, (_, cam) in enumerate(layer.topk_cams, start=1):  # each top class's, or each detection's
            arrays[f"{layer.name}/cam_{k}"] = np.asarray(cam, dtype=np.float32)
        for method, cam in layer.cams.items():
            arrays[f"{layer.name}/cam.{method}"] = np.asarray(cam, dtype=np.float32)
    for method, pixels in explanation.pixel_maps.items():
        if pixels.map is not None:
            arrays[f"input/{method}"] = np.asarray(pixels.map, dtype=np.float32)
    np.savez(stream, **arrays)


def _jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def save_explanation(explanation, directory: Path, pictures, *, save_tensors: bool = False) -> list[Path]:
    """Write one image's pictures, optional ``tensors.npz``, ``fingerprint.npz`` and, last, ``report.json``.

    The files an earlier result's report in ``directory`` lists and this one does not write
    are removed (before the new report): its pictures of other layers would pass for this
    result's. Files the report does not name are left alone.

    Args:
        pictures: a ``PictureOptions``.

    Returns:
        The files written, report last.
    """
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{arg('directory', directory)}: is a file, not a folder; choose a folder")
    earlier = _listed_files(directory)
    written: list[Path] = []
    kinds = pictures.kinds
    stems = layer_stems([layer.name for layer in explanation.layers])
    by_layer: dict[str, dict[str, str | None]] = {}
    if kinds:
        # matplotlib: ~0.3 s to import, only for pictures
        from hookviz.render import render_png
        from hookviz.render.figures import photo_of
        from hookviz.render.pixels import pixels_png
        from hookviz.render.prediction import prediction_png
        from hookviz.render.worker import worker_cache

        written.append(atomic_write(directory / INPUT_PICTURE, _jpeg(photo_of(explanation))))
        prediction = prediction_png(explanation)
        if prediction is not None:
            written.append(atomic_write(directory / PREDICTION_PICTURE, prediction))
        pixels = pixels_png(explanation) if "cam" in pictures.pictures else None
        if pixels is not None:
            written.append(atomic_write(directory / PIXEL_PICTURE, pixels))
        cache = worker_cache()
    for layer in explanation.layers:
        entry = by_layer.setdefault(layer.name, {})
        for kind in kinds:
            data = render_png(kind, explanation, layer, cache, **kind.options(pictures))
            entry[kind.name] = None
            if data is None:  # not this time: an earlier run's picture of it would mislead
                with contextlib.suppress(OSError):
                    (directory / kind.file_name(stems[layer.name])).unlink()
            else:
                path = atomic_write(directory / kind.file_name(stems[layer.name]), data)
                written.append(path)
                entry[kind.name] = path.name
    if save_tensors:
        written.append(atomic_write(directory / TENSORS, lambda stream: write_tensors_npz(explanation, stream)))
    # Always, and before the report that marks the image complete: a later run compares
    # itself with this one through it (``hookviz diff``, ``--baseline``).
    fingerprint = fingerprint_of(explanation)
    written.append(atomic_write(directory / FINGERPRINT, lambda stream: write_fingerprint(fingerprint, stream)))
    for name in set(earlier) - {p.name for p in written}:
        with contextlib.suppress(OSError):
            (directory / name).unlink()
    report = report_of(explanation, by_layer, [p.name for p in written], pictures, save_tensors)
    written.append(write_json(directory / REPORT, report.to_json()))
    return written
