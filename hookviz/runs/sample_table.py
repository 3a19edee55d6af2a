"""The table of a run's samples: one row per sample with what the explorer filters and sorts on.

``OUT/samples.csv`` (and ``OUT/samples.parquet`` when pyarrow is installed) is this table for
programs, and the explorer (``hookviz.runs.explorer``) carries the same columns. A row holds
the sample's names, its true class (``--labels``, or its folder in an ImageFolder layout), what the
model predicted and how sure it was, each map's faithfulness figures and randomisation verdict
(columns ``LAYER:METHOD:FIGURE``), the health checks (layers dead, without gradient, with
non-finite values), its change against a baseline (``diff.json``), its notes and its failure.
The columns and their types are listed in docs/files.md.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from hookviz.store.records import ImageStatus, Report

__all__ = [
    "ANSWER_COLUMNS",
    "FIXED_COLUMNS",
    "FIGURES",
    "SampleRow",
    "SampleTable",
    "imagefolder_classes",
    "data_root",
    "paths_in_data",
    "read_labels",
    "label_of",
    "table_csv",
    "write_parquet",
]

#: The columns every table has, with their types: ``str``, ``float`` (empty: none),
#: ``int`` and ``bool`` (empty: unknown).
FIXED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "str"),
    ("image", "str"),
    ("status", "str"),
    ("task", "str"),
    ("true_class", "str"),
    ("predicted", "str"),
    ("target", "str"),
    ("confidence", "float"),
    ("target_probability", "float"),
    ("correct", "bool"),
    ("dead", "int"),
    ("zero_grad", "int"),
    ("nonfinite", "int"),
    ("drift", "float"),
    ("target_changed", "bool"),
    ("drift_findings", "int"),
    ("notes", "int"),
    ("failure", "str"),
)

#: The columns of a vision-language model's photos, present only in a table that has one (after
#: the fixed columns): the prompt. Its answer is ``predicted``, its tokens explained ``target``.
ANSWER_COLUMNS: tuple[tuple[str, str], ...] = (("prompt", "str"),)

_VALUE_NAMES = frozenset(name for name, _ in (*FIXED_COLUMNS, *ANSWER_COLUMNS))

#: Each map's figures, as columns ``LAYER:METHOD:FIGURE`` (the input's maps: layer ``input``).
FIGURES: tuple[tuple[str, str], ...] = (
    ("deletion_auc", "float"),
    ("insertion_auc", "float"),
    ("road", "float"),
    ("sanity", "str"),
)


@dataclass
class SampleRow:
    """One sample's row; ``figures`` maps ``LAYER:METHOD:FIGURE`` to its value."""

    values: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)


@dataclass
class SampleTable:
    """The rows of a run, in the order the explorer lists them, and its figure columns."""

    rows: list[SampleRow] = field(default_factory=list)

    def figure_columns(self) -> list[tuple[str, str]]:
        kinds = dict(FIGURES)
        names = dict.fromkeys(name for row in self.rows for name in row.figures)
        return [(name, kinds[name.rsplit(":", 1)[1]]) for name in names]

    def value_columns(self) -> list[tuple[str, str]]:
        """The columns of ``SampleRow.values``: the fixed ones, and the answer's where a row has them."""
        extra = [(name, kind) for name, kind in ANSWER_COLUMNS if any(name in row.values for row in self.rows)]
        return [*FIXED_COLUMNS, *extra]

    def columns(self) -> list[tuple[str, str]]:
        return [*self.value_columns(), *self.figure_columns()]

    def column(self, name: str) -> list:
        fixed = name in _VALUE_NAMES
        return [(row.values if fixed else row.figures).get(name) for row in self.rows]


def imagefolder_classes(images: Sequence[str]) -> dict[str, str]:
    """Each image's true class when the run's images lie in an ImageFolder layout
    (``ROOT/CLASS/photo.png``): their folders' names, when they lie in at least two folders of
    one parent; else none."""
    parents = {image: PurePath(image).parent for image in images}
    folders = set(parents.values())
    if len(folders) < 2 or len({folder.parent for folder in folders}) != 1 or any(not f.name for f in folders):
        return {}
    return {image: parent.name for image, parent in parents.items()}


def data_root(images: Sequence[str]) -> str:
    """The folder that holds every one of ``images`` (as given), with its separator: what the
    explorer strips off a sample's path to show and search it as it lies in the data
    (``tabby/1.png``, not ``/tmp/run/photos/tabby/1.png``); ``""``: none (no image, or paths
    relative to different places)."""
    parents = [os.path.dirname(image) for image in images]
    try:
        root = os.path.commonpath(parents) if parents else ""
    except ValueError:  # absolute and relative paths mixed, or another drive
        return ""
    return root if not root or root.endswith(("/", os.sep)) else root + os.sep


def paths_in_data(images: Sequence[str | None]) -> list[str]:
    """Each of ``images`` as the explorer names it: its path as given less ``data_root`` of them all
    (``tabby/1.png``); an absolute path outside that folder, its file name. A run folder copied
    or published does not show the folders above the data (``/home/them/...``)."""
    given = [image or "" for image in images]
    root = data_root([image for image in given if image])
    return [image[len(root) :] if root and image.startswith(root) else _unrooted(image) for image in given]


def _unrooted(image: str) -> str:
    return os.path.basename(image) if os.path.isabs(image) or PurePath(image).anchor else image


def read_labels(path: Path) -> dict[str, str]:
    """``--labels``: a CSV of rows ``image,class`` (an image's path as given, its file name, its
    stem or its folder in the run; a header row ``image,label`` or ``image,class`` is skipped).

    Raises:
        UsageError: the file cannot be read, a row has no class, or two rows give one image two classes.
    """
    from hookviz.errors import UsageError, arg

    try:
        with open(path, encoding="utf-8-sig", newline="") as stream:
            rows = [row for row in csv.reader(stream) if row and any(cell.strip() for cell in row)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{arg('labels', path)}: cannot be read as a CSV of image,class rows ({exc})") from None
    if rows and [c.strip().lower() for c in rows[0][:2]] in (["image", "label"], ["image", "class"]):
        rows = rows[1:]
    labels: dict[str, str] = {}
    first: dict[str, int] = {}  # each image's first row
    for number, row in enumerate(rows, 1):
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise UsageError(f"{arg('labels', path)}: row {number} is not image,class ({','.join(row)[:80]})")
        image, label = row[0].strip(), row[1].strip()
        if labels.get(image, label) != label:  # the last would win silently
            raise UsageError(
                f"{arg('labels', path)}: rows {first[image]} and {number} give {image} two classes "
                f"({labels[image]}, {label}); keep one"
            )
        labels[image] = label
        first.setdefault(image, number)
    return labels


def label_of(labels: dict[str, str], image: str, output: str) -> str | None:
    """An image's class in ``labels`` (``read_labels``): by its path as given, file name, stem or folder."""
    path = PurePath(image)
    for key in (image, path.as_posix(), path.name, path.stem, output):
        if key in labels:
            return labels[key]
    return None


def row_of(
    entry: ImageStatus, report: Report | None, true_class: str | None, change: dict | None, dead_fraction: float
) -> SampleRow:
    """A sample's row from its run.json entry, its report (``None``: failed, not done) and its
    change from the baseline (a diff.json entry, ``None``: not compared)."""
    top = report.top5 if report is not None else ()
    target = report.target if report is not None else None
    predicted = top[0].label if top else ""
    values = {
        "name": entry.output,
        "image": entry.image,
        "status": entry.status,
        "task": entry.task,
        "true_class": true_class or "",
        "predicted": predicted,
        "target": target.label if target is not None else "",
        "confidence": top[0].probability if top else None,
        "target_probability": target.probability if target is not None else None,
        "correct": (predicted == true_class) if true_class and predicted else None,
        "notes": len(report.notes) if report is not None else 0,
        "failure": entry.error or "" if entry.status == "failed" else "",
    }
    values.update(_health(report, entry.image, dead_fraction))
    values.update(_drift(change))
    return SampleRow(values, _figures(report) if report is not None else {})


def _health(report: Report | None, image: str, dead_fraction: float) -> dict:
    """How many layers (or maps) each health check flags."""
    if report is None:
        return {"dead": None, "zero_grad": None, "nonfinite": None}
    from hookviz.explaining.checks import report_checks

    findings = report_checks(report, image, ("dead", "zero-grad", "nonfinite"), dead_fraction)
    return {
        key: sum(f.check == check for f in findings)
        for key, check in (("dead", "dead"), ("zero_grad", "zero-grad"), ("nonfinite", "nonfinite"))
    }


def _drift(change: dict | None) -> dict:
    if change is None:
        return {"drift": None, "target_changed": None, "drift_findings": None}
    return {
        "drift": _float(change.get("change")),
        "target_changed": bool(change.get("target_changed")),
        "drift_findings": len(change.get("findings") or []),
    }


def _figures(report: Report) -> dict:
    """``LAYER:METHOD:FIGURE`` -> value for every map whose trust was measured."""
    found: dict = {}
    for layer in report.layers:
        trust = layer.trust or {}
        method = layer.cam.method if layer.cam is not None else "cam"
        found.update(_trust_figures(f"{layer.name}:{method}", trust))
        for other, measured in (trust.get("methods") or {}).items():
            if isinstance(measured, dict):
                found.update(_trust_figures(f"{layer.name}:{other}", measured))
    for method, pixel in report.pixel_maps.items():
        found.update(_trust_figures(f"input:{method}", pixel.trust or {}))
    return found


def _trust_figures(prefix: str, trust: dict) -> dict:
    found: dict = {}
    faithfulness = trust.get("faithfulness") or {}
    deletion = faithfulness.get("deletion_insertion") or {}
    road = faithfulness.get("road") or {}
    if deletion:
        found[f"{prefix}:deletion_auc"] = _float(deletion.get("deletion_auc"))
        found[f"{prefix}:insertion_auc"] = _float(deletion.get("insertion_auc"))
    if road:
        found[f"{prefix}:road"] = _float(road.get("combined"))
    sanity = trust.get("sanity")
    if isinstance(sanity, dict) and sanity.get("explains_model") is not None:
        found[f"{prefix}:sanity"] = "passes" if sanity.get("explains_model") else "fails"
    return found


def _float(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def table_csv(table: SampleTable) -> bytes:
    """``samples.csv``: a header of the columns, one row per sample (empty cell: none)."""
    columns = [name for name, _ in table.columns()]
    stream = io.StringIO()
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(columns)
    fixed = _VALUE_NAMES
    for row in table.rows:
        writer.writerow([_cell((row.values if name in fixed else row.figures).get(name)) for name in columns])
    return stream.getvalue().encode("utf-8")


def write_parquet(table: SampleTable, stream) -> bool:
    """Write ``samples.parquet`` to ``stream`` with typed columns; ``False``: pyarrow is not installed."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    columns = table.columns()
    arrays = [_arrow_array(pa, table.column(name), kind) for name, kind in columns]
    pq.write_table(pa.Table.from_arrays(arrays, names=[name for name, _ in columns]), stream)
    return True


def _arrow_array(pa, values: list, kind: str):
    """One column as an arrow array built from its buffers (validity bits, then the values; a string's
    offsets and bytes): ``pa.array`` would import pandas to ask whether the list is a pandas object,
    0.4 s of CPU and 45 MB at the end of every run."""
    import numpy as np

    present = np.array([value is not None for value in values], dtype=bool)
    validity = pa.py_buffer(np.packbits(present, bitorder="little").tobytes())
    count = len(values)
    nulls = count - int(present.sum())
    if kind == "str":
        encoded = [str(value).encode("utf-8") if value is not None else b"" for value in values]
        offsets = np.cumsum([0, *map(len, encoded)], dtype=np.int32)
        buffers = [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(pa.string(), count, buffers, null_count=nulls)
    if kind == "bool":
        data = np.packbits(np.array([bool(value) for value in values], dtype=bool), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), count, [validity, pa.py_buffer(data.tobytes())], null_count=nulls)
    dtype, arrow = (np.float64, pa.float64()) if kind == "float" else (np.int64, pa.int64())
    data = np.array([value if value is not None else 0 for value in values], dtype=dtype)
    return pa.Array.from_buffers(arrow, count, [validity, pa.py_buffer(data.tobytes())], null_count=nulls)
