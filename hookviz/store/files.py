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
import io
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from hookviz.errors import OutputError, SchemaError, arg, display_path
from hookviz.explaining.summaries import tensor_stats
from hookviz.render import (
    INPUT_PICTURE,
    PIXEL_FAITHFULNESS_PICTURE,
    PIXEL_PICTURE,
    PIXEL_SANITY_PICTURE,
    PREDICTION_PICTURE,
)
from hookviz.store.fingerprints import FINGERPRINT, description, fingerprint_of, write_fingerprint
from hookviz.store.folders import (
    DIFF,
    REPORT,
    RUN_FILE_PATTERN,
    TENSORS,
    Folders,
    Placement,
    Recipe,
    distinct_name,
    layer_stems,
    output_names,
    place,
    plain_name,
    plan_folders,
)
from hookviz.store.records import Asked, CamRecord, FrameFigures, LayerRecord, MapRecord, Report, Score, read_report

__all__ = [
    "REPORT",
    "remove_reports_since",
    "TENSORS",
    "DIFF",
    "RUN_FILE_PATTERN",
    "atomic_write",
    "write_json",
    "list_files",
    "remove_unfinished",
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
    _UNFINISHED.add(temporary)  # before it exists: a worker ending at once (``remove_unfinished``) sees it then
    try:
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except BaseException:
        _UNFINISHED.discard(temporary)
        raise
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
    finally:
        _UNFINISHED.discard(temporary)
    return path


_UNFINISHED: set[Path] = set()  # this process's temporary files being written, by any thread


def remove_unfinished() -> None:
    """Delete the temporary files this process is writing: it is about to end at once
    (``os._exit``), and nothing will finish them."""
    for temporary in list(_UNFINISHED):
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def existing_ancestor(path: Path) -> Path:
    """``path`` if it exists, else its nearest parent that does: where writing ``path`` would
    have to create folders, so where writability is checked before a run creates anything."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _writer_of(path: Path) -> int | None:
    """The process id of the writer of the temporary file ``path``, if it is on this host."""
    parts = path.name[: -len(".part")].rsplit("~", 3)
    if len(parts) != 4 or parts[1] != _HOST or not parts[2].isdigit():
        return None  # another host's, or an older hookviz's
    return int(parts[2])


def _writer_gone(path: Path, now: float) -> bool:
    """Whether the temporary file ``path`` is a leftover: its writer (a process on this
    host) no longer runs, or it is older than a day."""
    try:
        if now - path.stat().st_mtime > STALE_SECONDS:
            return True
    except OSError:
        return False
    pid = _writer_of(path)
    if pid is None or pid == os.getpid():
        return False  # another host's, or an older hookviz's: only age tells
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, under another user
        return False
    return False


def sweep_stale_files(out: Path, writers: Collection[int] = ()) -> int:
    """Delete the temporary files that killed runs left in ``out`` and its image folders,
    and only those: a run still writing into ``out`` (another shard) keeps its own. Those
    of the processes ``writers`` (on this host) go too: a run ending at once, its own and
    its killed workers'."""
    removed = 0
    now = time.time()
    for pattern in (".*.part", "*/.*.part"):
        for path in out.glob(pattern):
            if _writer_gone(path, now) or _writer_of(path) in writers:
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


def list_files(directory: Path, names: Sequence[str]) -> None:
    """Add ``names``, files written into ``directory`` after its ``report.json`` (the diff
    pictures), to the files that report lists: the folder's next save removes them unless it
    writes them again. A folder without a readable report is left as it is; the rest of the
    report is written back as it was read, a NaN another writer left in it included."""
    path = directory / REPORT
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return
    files = document.get("files") if isinstance(document, dict) else None
    if isinstance(files, list) and any(name not in files for name in names):
        document["files"] = [*files, *(name for name in dict.fromkeys(names) if name not in files)]
        atomic_write(path, (json.dumps(document, indent=2, default=_jsonable) + "\n").encode())


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, Path):
        return display_path(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


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
        sample=display_path(source.path) if source.path is not None else None,
        sample_identity=source.identity,
        task=explanation.task,
        notes=tuple(explanation.notes),
        model=explanation.model,
        weights=explanation.weights,
        weights_sha256=explanation.weights_sha256,
        preprocessing=_preprocessing_json(explanation),
        objective=explanation.objective,
        cam_methods=tuple(explanation.cam_methods),
        pixel_maps={name: _pixel_record(pixels) for name, pixels in explanation.pixel_maps.items()},
        target=Score.of(explanation.target) if explanation.target is not None else None,
        top5=tuple(Score.of(score) for score in explanation.top5),
        prediction=explanation.prediction.to_json() if explanation.prediction is not None else {},
        logits=(int(np.size(explanation.logits)), logits_nonfinite),
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
            pixel_clip=float(pictures.pixel_clip) if pictures is not None else None,
            pixel_sign=pictures.pixel_sign if pictures is not None else None,
            tensors=save_tensors,
            trust=explanation.trust,
            prompts=tuple(explanation.prompts),
            references=tuple(explanation.references),
        ),
        files=tuple(files),
        fingerprint=description(),
        times=_times(explanation.image),
    )


def _times(sample) -> tuple[float, ...] | None:
    """A clip's frames' timestamps in seconds (a folder of frames': frame numbers), ``None`` for a photo."""
    times = getattr(sample, "times", None)
    return tuple(round(float(t), 6) for t in times) if times else None


def _unfit_notes(explanation, layer, pictures: dict[str, str | None]) -> tuple[str, ...]:
    """One note per asked picture kind that does not draw this layer's map's rank."""
    from hookviz.render.kinds import KINDS

    return tuple(note for name in pictures if name in KINDS and (note := KINDS.get(name).unfit(layer, explanation)))


def _layer_record(explanation, layer, pictures: dict[str, str | None]) -> LayerRecord:
    cam = None
    if layer.cam is not None:
        frames = _frame_figures(explanation, layer.cam)
        cam = CamRecord(explanation.cam_method, tuple(layer.cam.shape), _map_stats(layer.cam), frames=frames)
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
        cams=_method_maps(explanation, layer) if explanation.cam_methods else None,
        cam_topk=tuple(score.to_json() for score, _ in layer.topk_cams),
        notes=(*(layer.notes or ()), *_unfit_notes(explanation, layer, pictures)),
        trust=layer.trust.to_json() if layer.trust is not None else None,
        top_channels=layer.top_channels.record() if layer.top_channels is not None else None,
    )


def _map_stats(array) -> dict:
    return {k: v for k, v in tensor_stats(array).items() if k != "zero_fraction"}


def _frame_figures(explanation, cam) -> tuple[FrameFigures, ...]:
    """A clip's (T', H', W') map's peak and share of its mass at each of the clip's T frames
    (``slices.per_frame``: read as the ``frames`` strip reads it); none for a photo's map."""
    from hookviz.anatomy.slices import per_frame

    clip = np.shape(explanation.image.tensor)
    if len(clip) != 4 or np.ndim(cam) != 3:
        return ()
    peaks, masses = per_frame(cam, clip[1])
    total = float(masses.sum())
    shares = masses / total if np.isfinite(total) and total > 0 else np.full_like(masses, np.nan)
    return tuple(FrameFigures(_finite(p), _finite(s)) for p, s in zip(peaks, shares))


def _finite(value) -> float | None:
    return float(value) if np.isfinite(value) else None


def _method_maps(explanation, layer) -> dict[str, MapRecord]:
    """Per layer method, its map's shape and statistics (and a note, and a clip's figures at
    each frame), or why it has none."""
    found = {}
    for method in (*layer.cams, *(name for name in layer.cam_notes if name not in layer.cams)):
        if method in layer.cams:
            cam = layer.cams[method]
            found[method] = MapRecord(
                tuple(cam.shape),
                _map_stats(cam),
                note=layer.cam_notes.get(method),
                frames=_frame_figures(explanation, cam),
            )
        else:
            found[method] = MapRecord(skipped=layer.cam_notes[method])
    return found


def _pixel_pictures(explanation, directory: Path, pictures, kinds: set[str]) -> list[Path]:
    """The input methods' pictures that have something to draw: their maps (``pixel_maps.png``,
    with the ``cam`` pictures) and their trust (``pixel_maps.faithfulness.png``,
    ``pixel_maps.sanity.png``, where ``kinds`` asks for them)."""
    from hookviz.render.figures import png_bytes
    from hookviz.render.kinds import faithfulness, sanity
    from hookviz.render.pixels import pixels_png

    cams = "cam" in pictures.pictures
    pixels = pixels_png(explanation, pictures.pixel_clip, pictures.pixel_sign) if cams else None
    written = [atomic_write(directory / PIXEL_PICTURE, pixels)] if pixels is not None else []
    for kind, module, name in (
        ("faithfulness", faithfulness, PIXEL_FAITHFULNESS_PICTURE),
        ("sanity", sanity, PIXEL_SANITY_PICTURE),
    ):
        figure = module.input_figure(explanation) if kind in kinds else None
        if figure is not None:
            written.append(atomic_write(directory / name, png_bytes(figure)))
    return written


def _pixel_record(pixels) -> MapRecord:
    """An input-resolution map's shape and statistics (and the layer it used), or why it has none."""
    if pixels.map is None:
        return MapRecord(skipped=pixels.note, layer=pixels.layer)
    stats = _map_stats(pixels.map)
    if pixels.figures:  # a NaN (a score of 0 makes conservation undefined) is written null, as stats are
        stats["figures"] = {name: (float(v) if np.isfinite(v) else None) for name, v in pixels.figures.items()}
    trust = pixels.trust.to_json() if pixels.trust is not None else None
    others = {name: {"shape": list(np.shape(value)), **_map_stats(value)} for name, value in (pixels.inputs or {}).items()}
    return MapRecord(tuple(pixels.map.shape), stats, layer=pixels.layer, trust=trust, inputs=others)


def write_tensors_npz(explanation, stream: BinaryIO) -> None:
    """``tensors.npz``: ``<layer>/input|output|grad_input|grad_output|cam``, ``<layer>/cam_K`` (the
    K-th top class's or detection's CAM), ``<layer>/cam.<method>`` (each layer method's map of
    the target; ``cam`` is the first's), ``input/<method>`` (each input-resolution map, (C, H, W)),
    ``input/<method>/<NAME>`` (a sample of several inputs': each other input's map, at its own
    shape), ``logits``, ``input`` (the main input as the model saw it, a batch of one) and, for a
    sample of several inputs, ``inputs/<NAME>`` (each other input as the model saw it, the same way).

    Needs the full tensors (``SummaryOptions(keep_tensors=True)``).
    """
    image = explanation.image
    arrays: dict[str, np.ndarray] = {
        "logits": np.asarray(explanation.logits, dtype=np.float32)[None],
        "input": np.asarray(image.tensor, dtype=np.float32)[None],
    }
    for name, value in (getattr(image, "tensors", None) or {}).items():
        if name != getattr(image, "main", None):
            arrays[f"inputs/{name}"] = np.asarray(value, dtype=np.float32)[None]
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
        for name, value in (pixels.inputs or {}).items():
            arrays[f"input/{method}/{name}"] = np.asarray(value, dtype=np.float32)
    np.savez(stream, **arrays)


def _jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def remove_reports_since(folders, since: float) -> None:
    """Remove the report.json of each of ``folders`` written at ``since`` or later: a render
    worker killed after it wrote one, before its result reached the run, which then says the
    image is not done; a report there would say otherwise (and ``--skip-existing`` would skip an
    image whose pictures may be missing). An earlier run's report is left as it is."""
    for folder in folders:
        report = Path(folder) / REPORT
        with contextlib.suppress(OSError):
            if report.stat().st_mtime >= since:
                report.unlink()


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
        from hookviz.render.prediction import prediction_png
        from hookviz.render.worker import worker_cache

        written.append(atomic_write(directory / INPUT_PICTURE, _jpeg(photo_of(explanation))))
        written += _other_inputs(explanation, directory)
        prediction = prediction_png(explanation)
        if prediction is not None:
            written.append(atomic_write(directory / PREDICTION_PICTURE, prediction))
        written += _pixel_pictures(explanation, directory, pictures, {kind.name for kind in kinds})
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
    inputs = getattr(explanation.image, "inputs_record", None)  # a sample of several inputs: each one's file and identity
    written.append(write_json(directory / REPORT, {**report.to_json(), **({"inputs": inputs} if inputs else {})}))
    return written


def _other_inputs(explanation, directory: Path) -> list[Path]:
    """The pictures of a sample's other inputs, and of a vector's attributions (``render.inputs``)."""
    from hookviz.render.inputs import input_pictures

    return [atomic_write(directory / name, data) for name, data in input_pictures(explanation)]


def _preprocessing_json(explanation) -> dict:
    """The preprocessing as report.json keeps it; for a main input of another rank than a
    photo's (a signal's (L,), a clip's (T, H, W)), with ``input_size``, its real spatial size,
    which ``preprocessing.size`` does not say (``diff`` scales peak shifts by it)."""
    found = explanation.preprocessing.to_json()
    shape = tuple(np.shape(explanation.image.tensor))[1:]
    if len(shape) != 2:
        found["input_size"] = [int(side) for side in shape]
    return found
