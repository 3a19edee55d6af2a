"""Explorer: ``OUT/index.html``, one page to find, filter and look through a run's samples.

The page opens from ``file://`` with nothing but a browser: its script and style are inline,
and its data is JavaScript that it loads with ``<script src>`` (browsers refuse ``fetch`` of
local files), all with relative names, so a copied or zipped folder keeps working.

- ``explorer-data.js``: the run (what the page's heading says) and the sample table
  (``hookviz.runs.sample_table``) column by column: numbers as arrays, repeated text (a class)
  as a list of values and one code per sample. This is all the list view needs, so a run of
  100,000 samples opens at once; the list draws only the rows on screen.
- ``explorer-samples-K.js``: the details of samples ``K*CHUNK`` on (the pictures of each layer,
  the prediction's list, notes, the change from the baseline), loaded when a sample is opened.
- ``explorer-atlas.js``: the channels of the run's atlas (``hookviz atlas``), when it has one.
- ``samples.csv`` (and ``samples.parquet`` with pyarrow): the same table for programs.

Everything is written once, when the run (or ``hookviz diff``) ends.
"""

from __future__ import annotations

import json
import math
import os
from importlib import resources
from pathlib import Path

from hookviz.models.sources.hf_vlm import TASK as VLM_TASK
from hookviz.render import (
    INPUT_PICTURE,
    PIXEL_FAITHFULNESS_PICTURE,
    PIXEL_PICTURE,
    PIXEL_SANITY_PICTURE,
    PREDICTION_PICTURE,
)
from hookviz.render.inputs import ATTRIBUTIONS_SUFFIX, INPUT_PREFIX, MAPS_SUFFIX
from hookviz.render.kinds import kinds
from hookviz.render.presentation import presentation_of
from hookviz.runs.sample_table import SampleTable, imagefolder_classes, paths_in_data, row_of, table_csv, write_parquet
from hookviz.runs.vlm_rows import vlm_details, vlm_row
from hookviz.store.files import atomic_write
from hookviz.store.records import Report, RunRecord
from hookviz.store.vlm_files import VlmReport

__all__ = [
    "DATA",
    "DATA_TAG",
    "CHUNK",
    "SAMPLES_CSV",
    "SAMPLES_PARQUET",
    "ATLAS_DATA",
    "ExplorerRun",
    "write_explorer",
    "encoded_columns",
]

DATA = "explorer-data.js"
ATLAS_DATA = "explorer-atlas.js"
SAMPLES_CSV = "samples.csv"
SAMPLES_PARQUET = "samples.parquet"
#: How the page loads its data (``hookviz.runs.explorer_embed`` puts the data there inline).
DATA_TAG = f'<script src="{DATA}"></script>'
#: Samples per details file.
CHUNK = 500
SCHEMA = "hookviz/explorer/1"


class ExplorerRun:
    """What the explorer shows of one run: its rows, and each sample's details."""

    def __init__(self) -> None:
        self.table = SampleTable()
        self.details: list[dict | None] = []
        self.thumbs: list[str] = []

    def add(
        self,
        entry,
        report: Report | VlmReport | None,
        true_class: str | None,
        change: dict | None,
        dead_fraction: float,
        base: str | None,
    ):
        if isinstance(report, VlmReport) or (report is None and entry.task == VLM_TASK):
            self.table.rows.append(vlm_row(entry, report))
            details = vlm_details(report) if report is not None else None
        else:
            self.table.rows.append(row_of(entry, report, true_class, change, dead_fraction))
            details = _details(entry.output, report, change, base) if report is not None else None
        self.details.append(details)
        self.thumbs.append(_thumb(details))


def explorer_run(out: Path, documents: list[RunRecord], diff: dict | None, labels: dict[str, str], read) -> ExplorerRun:
    """The rows of every sample of ``documents`` (shards of one run), the most changed first
    when the run is compared (``diff``); ``read(folder)`` gives a sample's report (a
    ``VlmReport`` for a vision-language model's photo) or ``None``."""
    changes = {e.get("output"): e for e in (diff or {}).get("images", []) if isinstance(e, dict)}
    order = {output: rank for rank, output in enumerate(changes)}
    entries, seen = [], set()
    for document in documents:
        for entry in document.images:
            if entry.output not in seen:
                seen.add(entry.output)
                entries.append(entry)
    late = {"failed": 1, "not_done": 2}
    entries.sort(key=lambda e: (late.get(e.status, 0), order.get(e.output, len(order))))
    folders = imagefolder_classes([e.image for e in entries])
    base = _base_folder(out, diff)
    dead_fraction = next((d.checks.dead_fraction for d in documents if d.checks is not None), None) or 1.0
    found = ExplorerRun()
    for entry in entries:
        report = read(entry.output) if entry.status in ("done", "skipped") else None
        true_class = labels.get(entry.output) or folders.get(entry.image)
        found.add(entry, report, true_class, changes.get(entry.output), dead_fraction, base)
    return found


def _base_folder(out: Path, diff: dict | None) -> str | None:
    """The baseline's folder relative to ``out`` (for the before and after pictures), or ``None``."""
    folder = ((diff or {}).get("base") or {}).get("folder")
    if not folder:
        return None
    try:
        return Path(os.path.relpath(Path(folder).resolve(), out.resolve())).as_posix()
    except ValueError:  # another drive
        return None


def _details(folder: str, report: Report, change: dict | None, base: str | None) -> dict:
    """What a sample's page shows besides its row: pictures by layer, the prediction's list, notes, change."""
    files = set(report.files)
    photos = [
        [name, alt]
        for name, alt in (
            (INPUT_PICTURE, "input"),
            (PREDICTION_PICTURE, "prediction"),
            (PIXEL_PICTURE, "maps of the input"),
            (PIXEL_FAITHFULNESS_PICTURE, "faithfulness of the maps of the input"),
            (PIXEL_SANITY_PICTURE, "randomisation check of the maps of the input"),
        )
        if name in files
    ]
    photos += [
        [name, name]
        for name in report.files
        if (name.startswith(INPUT_PREFIX) and name != INPUT_PICTURE) or name.endswith((ATTRIBUTIONS_SUFFIX, MAPS_SUFFIX))
    ]
    animated = [layer.pictures.get("animation") for layer in report.layers]
    animated = [name for name in animated if name in files]
    heading, items = presentation_of(report.task).gallery_list(report)
    layers = []
    for layer in report.layers:
        pictures = [[kind.label, layer.pictures[kind.name]] for kind in kinds() if layer.pictures.get(kind.name) in files]
        note = layer.cam.skipped if layer.cam is not None else None
        found_layer = {"name": layer.name, "type": layer.module_type or "", "note": note or "", "pictures": pictures}
        if layer.top_channels is not None:  # --top-channels: each channel's page of the atlas (#/channel/LAYER/INDEX)
            found_layer["channels"] = _top_channels(layer.top_channels)
        layers.append(found_layer)
    found: dict = {
        "image": report.sample or folder,
        "heading": heading,
        "items": items,
        "notes": list(report.notes),
        "objective": report.objective or "",
        "photos": photos,
        "clip": animated[0] if animated else None,
        "layers": layers,
    }
    if change is not None:
        found["change"] = _change(change)
        found["base"] = base
    return found


def _top_channels(record: dict) -> list:
    """``[channel, share, concept]`` of each channel a layer's prediction rested on (``--top-channels``)."""
    found = []
    for channel in record.get("channels") or []:
        if isinstance(channel, dict) and isinstance(channel.get("channel"), int):
            label = channel.get("label")
            found.append([channel["channel"], channel.get("share"), label if isinstance(label, str) else None])
    return found


def _thumb(details: dict | None) -> str:
    """The picture the list shows of a sample: a clip's animation, else its input as the model saw it."""
    if details is None:
        return ""
    return details["clip"] or next((name for name, _ in details["photos"]), "")


def _change(change: dict) -> dict:
    """A sample's change from the baseline, as the page lists it."""
    before, after = ((change.get("target") or {}).get(k) or {} for k in ("before", "after"))
    names = [str(t.get("name") or t.get("index")) for t in (before, after)]
    findings = change.get("findings") or []
    first = change.get("first_change") or {}
    p_change = change.get("probability_change")
    lines = [
        f"target {names[0]} \u2192 {names[1]}" if change.get("target_changed") else f"target {names[1]} (unchanged)",
        f"first changed at: {_where(first)} ({first.get('figure')})" if first else "",
        f"P(target) change: {'n/a' if p_change is None else format(p_change, '+.3g')}",
        f"largest relative change: {_number(change.get('change'))}",
        f"lowest CAM correlation: {_number(change.get('lowest_cam_corr'))}",
        f"{len(findings)} drift findings" if findings else "no drift",
    ]
    return {
        "drifted": bool(findings or change.get("target_changed")),
        "lines": [line for line in lines if line],
        "findings": [
            f"{f.get('layer') or 'model'} {f.get('figure')}: {f.get('detail')}" for f in findings[:20] if isinstance(f, dict)
        ],
        "more": max(0, len(findings) - 20),
        "layers": [
            [str(layer.get("name")), layer["picture"]]
            for layer in change.get("layers") or []
            if isinstance(layer, dict) and layer.get("picture")
        ],
    }


def _where(finding: dict) -> str:
    if finding.get("layer"):
        return str(finding["layer"])
    return "the model's input" if str(finding.get("figure")).startswith("model_input") else "the logits"


def _number(value) -> str:
    return "n/a" if value is None else format(value, ".3g")


def encoded_columns(table: SampleTable, images: list[str] | None = None) -> list[dict]:
    """The table column by column for the page: numbers as arrays (``null``: none), text
    repeated across samples as ``values`` and a code per sample, other text as an array;
    ``images``: what the page shows as the ``image`` column (``None``: the table's)."""
    columns = []
    for name, kind in table.columns():
        values = images if name == "image" and images is not None else table.column(name)
        column: dict = {"name": name, "type": kind}
        if kind == "str":
            distinct = list(dict.fromkeys(v or "" for v in values))
            if name not in ("name", "image", "failure"):
                codes = {v: i for i, v in enumerate(distinct)}
                column.update(values=distinct, codes=[codes[v or ""] for v in values])
            else:
                column["data"] = [v or "" for v in values]
        elif kind == "float":
            column["data"] = [None if v is None else float(f"{v:.5g}") for v in values]
        elif kind == "bool":
            column["data"] = [None if v is None else int(v) for v in values]
        else:
            column["data"] = values
        columns.append(column)
    return columns


def _coded(values: list[str]) -> dict:
    distinct = list(dict.fromkeys(values))
    codes = {v: i for i, v in enumerate(distinct)}
    return {"values": distinct, "codes": [codes[v] for v in values]}


def _script(target: str, document) -> bytes:
    """A data file: ``TARGET=<json>;`` with the JSON kept to ASCII (no ``</script>`` can end it early).
    A report may hold NaN or an infinity (issue 37): ``NaN`` and ``Infinity`` are JavaScript's own
    numbers, and the page reads this file as a script, never with ``JSON.parse``."""
    text = json.dumps(document, ensure_ascii=True, separators=(",", ":"), allow_nan=True).replace("</", "<\\/")
    return f"{target}={text};\n".encode("ascii")


def write_explorer(out: Path, found: ExplorerRun, run_info: dict, atlas: dict | None, heading_html: str) -> Path:
    """Write the page, its data files and the sample table into ``out``; return the page's path."""
    shown = paths_in_data(found.table.column("image"))  # the page names a sample as it lies in the data
    details = [d if d is None else {**d, "image": where or d["image"]} for d, where in zip(found.details, shown, strict=True)]
    chunks = math.ceil(len(details) / CHUNK)
    for k in range(chunks):
        atomic_write(
            out / f"explorer-samples-{k}.js",
            _script(f"(window.HOOKVIZ_SAMPLES=window.HOOKVIZ_SAMPLES||{{}})[{k}]", details[k * CHUNK : (k + 1) * CHUNK]),
        )
    _remove_stale_chunks(out, chunks)
    if atlas is not None:
        atomic_write(out / ATLAS_DATA, _script("window.HOOKVIZ_ATLAS", _page_atlas(atlas)))
    data = {
        "schema": SCHEMA,
        "run": {**run_info, "atlas": atlas is not None, "fixed": [name for name, _ in found.table.value_columns()]},
        "count": len(found.details),
        "chunk": CHUNK,
        "columns": encoded_columns(found.table, shown),
        "thumbs": _coded(found.thumbs),
    }
    atomic_write(out / DATA, _script("window.HOOKVIZ_DATA", data))
    atomic_write(out / SAMPLES_CSV, table_csv(found.table))
    _write_parquet(out, found.table)
    return atomic_write(out / "index.html", _page(run_info.get("title") or "", heading_html).encode("utf-8"))


def _page_atlas(atlas: dict) -> dict:
    """The atlas as the page holds it: each example by its path as it lies in the data (``shown``),
    not its source path, and not its failed samples' paths, so that a published run folder names
    no folder above the data (atlas.json keeps them)."""
    layers = []
    for layer in atlas.get("layers") or []:
        if isinstance(layer, dict):
            items = [_page_item(item) if isinstance(item, dict) else item for item in layer.get("items") or []]
            layer = {**layer, "items": items}
        layers.append(layer)
    return {**{key: value for key, value in atlas.items() if key != "failed"}, "layers": layers}


def _page_item(item: dict) -> dict:
    found = dict(item)
    for key in ("top", "relevance_top"):
        if isinstance(item.get(key), list):
            found[key] = [_page_example(example) if isinstance(example, dict) else example for example in item[key]]
    return found


def _page_example(example: dict) -> dict:
    """An example without its source: ``shown``, or (an atlas written before it had one) its file name."""
    found = {key: value for key, value in example.items() if key != "source"}
    found["shown"] = example.get("shown") or str(example.get("source") or "").replace("\\", "/").rsplit("/", 1)[-1]
    return found


def _write_parquet(out: Path, table: SampleTable) -> None:
    import io

    stream = io.BytesIO()
    if write_parquet(table, stream):
        atomic_write(out / SAMPLES_PARQUET, stream.getvalue())


def _remove_stale_chunks(out: Path, chunks: int) -> None:
    """Details files of an earlier, longer run in this folder."""
    for path in out.glob("explorer-samples-*.js"):
        index = path.stem.rsplit("-", 1)[1]
        if index.isdigit() and int(index) >= chunks:
            path.unlink(missing_ok=True)


def _asset(name: str) -> str:
    return resources.files("hookviz.runs").joinpath("explorer_assets").joinpath(name).read_text(encoding="utf-8")


def _page(title: str, heading_html: str) -> str:
    import html

    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hookviz: {html.escape(title)}</title>
<style>{_asset("explorer.css")}</style>
</head>
<body>
<header id="run">{heading_html}</header>
<noscript><p>This page needs JavaScript to list the samples: samples.csv lists them, and each folder holds a sample's pictures.</p></noscript>
<main id="app"><p id="loading">Loading the run&hellip;</p></main>
{DATA_TAG}
<script>{_asset("explorer.js")}</script>
</body>
</html>
"""
