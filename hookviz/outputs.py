"""Outputs: the files of a run, each written atomically.

Every file is written under a temporary name in its own folder and renamed into place,
so an interrupted run (Ctrl-C, SIGTERM, a kill) leaves complete files or none.
``report.json`` is written last in each image's folder: its presence marks the image done.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .summaries import tensor_stats

REPORT = "report.json"
TENSORS = "tensors.npz"
INPUT_PICTURE = "input.jpg"  # the photo as the model saw it (the whole photo with --no-crop)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp alone makes files 0600


def atomic_write(path: Path, data: bytes | Callable[[BinaryIO], object]) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    ``data`` is the bytes, or a function that writes them into the open file (large
    arrays then go to the file without first being gathered in memory).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as stream:
            if callable(data):
                data(stream)
            else:
                stream.write(data)
        os.chmod(temporary, _FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def sweep_partial_files(out: Path) -> int:
    """Delete the temporary files a killed run left in ``out`` and its image folders."""
    removed = 0
    for pattern in (".*.part", "*/.*.part"):
        for path in out.glob(pattern):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed


def write_json(path: Path, document: dict) -> Path:
    return atomic_write(path, (json.dumps(document, indent=2, allow_nan=False, default=_jsonable) + "\n").encode())


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def output_names(paths: Sequence[Path]) -> dict[Path, str]:
    """A folder name per image: its stem, or stem plus a short hash of its full path when
    two images of the run share a stem. Depends only on the run's full input list, so
    every ``--shard`` of it agrees."""
    stems = Counter(_safe(p.stem) for p in paths)
    names = {}
    for path in paths:
        stem = _safe(path.stem)
        if stems[stem] > 1:
            digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
            stem = f"{stem}-{digest}"
        names[path] = stem
    return names


def _safe(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_.+ " else "_" for c in name).strip(" .")
    return cleaned or "image"


def file_name(layer_name: str) -> str:
    """A layer name as a file name part (``layer3.5.relu:1`` -> ``layer3.5.relu-1``)."""
    return layer_name.replace(":", "-").replace("/", "_")


def report_of(explanation, files: Sequence[str]) -> dict:
    """The machine-readable ``report.json`` of one image."""
    from . import __version__

    source = explanation.image.source
    layers = []
    for layer in explanation.layers:
        entry = {
            "name": layer.name,
            "requested": layer.requested,
            "module_type": layer.module_type,
            "shapes": {k: (list(v) if v is not None else None) for k, v in layer.shapes.items()},
            "stats": layer.stats,
        }
        if layer.cam is not None:
            cam_stats = {k: v for k, v in tensor_stats(layer.cam).items() if k != "zero_fraction"}
            entry["cam"] = {"method": explanation.cam_method, "shape": list(layer.cam.shape), **cam_stats}
        elif layer.cam_note:
            entry["cam"] = {"method": explanation.cam_method, "skipped": layer.cam_note}
        if layer.topk_cams:
            entry["cam_topk"] = [score.to_json() for score, _ in layer.topk_cams]
        layers.append(entry)
    logits_nonfinite = int(np.size(explanation.logits) - np.isfinite(explanation.logits).sum())
    return {
        "hookviz": __version__,
        "image": str(source.path) if source.path is not None else None,
        "image_notes": list(explanation.notes),
        "model": explanation.model,
        "weights": explanation.weights,
        "preprocessing": explanation.preprocessing.to_json(),
        "objective": explanation.objective,
        "target": explanation.target.to_json(),
        "top5": [score.to_json() for score in explanation.top5],
        "logits": {"count": int(np.size(explanation.logits)), "nonfinite": logits_nonfinite},
        "layers": layers,
        "files": list(files),
    }


def write_tensors_npz(explanation, stream: BinaryIO) -> None:
    """``tensors.npz``: ``<layer>/input|output|grad_input|grad_output|cam``, ``logits``, ``input``.

    Needs the full tensors (``explain_batch(keep_tensors=True)``).
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
    np.savez(stream, **arrays)


def _jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def save_explanation(
    explanation,
    directory: Path,
    *,
    pictures: Sequence[str] = ("summary", "channels", "cam"),
    save_tensors: bool = False,
    scale: str = "tile",
    grad_channels: bool = False,
) -> list[Path]:
    """Write one image's pictures, optional ``tensors.npz`` and, last, ``report.json``.

    Returns:
        The files written, report last.
    """
    written: list[Path] = []
    if pictures:
        from . import rendering  # matplotlib: ~0.3 s to import, only for pictures

        written.append(atomic_write(directory / INPUT_PICTURE, _jpeg(rendering.photo_of(explanation))))
    for layer in explanation.layers:
        stem = file_name(layer.name)
        jobs = []
        if "summary" in pictures:
            jobs.append(("summary", "summary", {}))
        if "channels" in pictures:
            jobs.append(("channels", "channels", {"which": "output", "scale": scale}))
            if grad_channels:
                jobs.append(("grad_channels", "channels", {"which": "grad_output", "scale": scale}))
        if "cam" in pictures:
            jobs.extend([("cam", "cam", {}), ("cam_topk", "cam_topk", {})])
        for name, kind, options in jobs:
            data = rendering.render_png(kind, explanation, layer, **options)
            if data is not None:
                written.append(atomic_write(directory / f"{stem}.{name}.png", data))
    if save_tensors:
        written.append(atomic_write(directory / TENSORS, lambda stream: write_tensors_npz(explanation, stream)))
    report = report_of(explanation, [p.name for p in written])
    written.append(write_json(directory / REPORT, report))
    return written
