"""Gallery: ``OUT/index.html``, a static page over a run's pictures.

One row per image (a clip's row leads with its CAM animated): the photo the model saw, what its task lists of the prediction (the
top-5, a segmentation's classes, the detections), and per layer thumbnails of every
picture the run drew (``hookviz.render.kinds``), which open full size. The run's failures are
listed. A run compared with a baseline (``OUT/diff.json``, written by ``--baseline`` or
``hookviz diff``) gets a column of its change beside its pictures, and its most changed
images come first, in the diff's order. Shards of one run that share an output folder (``--shard K/N``) each describe
themselves in ``run-K-of-N.json``; the page shows all of them. It is one file with inline
CSS and relative links, so it opens from disk (no server) and keeps working when the
folder is moved or archived.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
from collections.abc import Iterator
from pathlib import Path

from hookviz.errors import SchemaError
from hookviz.render import (
    INPUT_PICTURE,
    PIXEL_FAITHFULNESS_PICTURE,
    PIXEL_PICTURE,
    PIXEL_SANITY_PICTURE,
    PREDICTION_PICTURE,
)
from hookviz.render.inputs import ATTRIBUTIONS_SUFFIX, INPUT_PREFIX, MAPS_SUFFIX
from hookviz.render.kinds import kinds
from hookviz.store.files import DIFF, REPORT, atomic_write
from hookviz.store.records import ImageStatus, Report, RunRecord, read_report, read_run
from hookviz.tasks import reported_task

__all__ = ["GALLERY", "write_gallery", "run_documents"]

GALLERY = "index.html"
_LOCK = ".hookviz-gallery.lock"

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: .2em; }
.meta { color: #555; margin-bottom: 1em; }
table { border-collapse: collapse; }
td, th { border-top: 1px solid #ddd; padding: .6em; vertical-align: top; text-align: left; }
img { display: block; border: 1px solid #ccc; }
.photo img { width: 160px; height: auto; }
.photo img.clip { width: 240px; }
.thumb img { height: 150px; width: auto; }
.thumbs { display: flex; gap: .6em; flex-wrap: wrap; }
.thumb { font-size: .85em; color: #555; text-align: center; }
.layer { margin-bottom: .8em; }
.layer b { font-family: monospace; }
ol { margin: 0; padding-left: 1.4em; }
.failures li { color: #a00; }
.drift { color: #a00; font-weight: bold; }
.steady { color: #070; }
.figures { font-size: .85em; color: #444; }
code { font-size: .9em; }
"""


def run_documents(out: Path) -> list[RunRecord]:
    """Every run description in ``out``: ``run.json`` and the shards' ``run-K-of-N.json``
    (but those of a newer hookviz, which this page cannot show)."""
    documents = []
    for path in sorted(out.glob("run*.json")):
        if path.name != "run.json" and not (path.name.startswith("run-") and "-of-" in path.name):
            continue
        with contextlib.suppress(SchemaError):
            document = read_run(path)
            if document is not None:
                documents.append(document)
    return documents


def _report(path: Path) -> Report | None:
    try:
        return read_report(path)
    except SchemaError:  # another shard's, of a newer hookviz: not shown
        return None


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Shards finishing at once take turns to rewrite the page, so none drops another's images."""
    try:
        import fcntl
    except ImportError:  # not on POSIX: the last writer wins
        yield
        return
    handle = os.open(out / _LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def write_gallery(out: Path, run: RunRecord, diff: dict | None = None) -> Path:
    """Write ``out/index.html`` for the run described by ``run`` (its run.json record)
    and every other shard of it found in ``out``.

    Args:
        diff: the run's comparison with a baseline (a diff.json document); by default
            ``out/diff.json`` when it compares this run (the one a rerun left is stale).
    """
    with _locked(out):
        documents = [run]
        if run.shard:
            count = run.shard[1]
            others = [d for d in run_documents(out) if d.shard and d.shard[1] == count and d.shard != run.shard]
            documents = sorted([run, *others], key=lambda d: d.shard[0] if d.shard else 0)
        if diff is None:
            diff = _diff_of(out, documents)
        return atomic_write(out / GALLERY, _page(out, run, documents, diff).encode("utf-8"))


def _diff_of(out: Path, documents: list[RunRecord]) -> dict | None:
    """``out/diff.json`` when it compares the run these documents describe (same start)."""
    try:
        diff = json.loads((out / DIFF).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(diff, dict) or not isinstance(diff.get("images"), list):
        return None
    started = (diff.get("new") or {}).get("started")
    return diff if started and started in {d.started for d in documents} else None


def _page(out: Path, run: RunRecord, documents: list[RunRecord], diff: dict | None = None) -> str:
    changes = {e.get("output"): e for e in (diff or {}).get("images", []) if isinstance(e, dict)}
    order = {output: rank for rank, output in enumerate(changes)}
    rows, seen = [], set()
    failures: list[ImageStatus] = []
    counts = {"done": 0, "skipped": 0, "failed": 0, "not_done": 0}
    for document in documents:
        for key in counts:
            counts[key] += getattr(document.counts, key)
        failures += document.failures
        for entry in document.images:
            if entry.status not in ("done", "skipped") or entry.output in seen:
                continue
            seen.add(entry.output)
            report = _report(out / entry.output / REPORT)
            if report is not None:
                rows.append(
                    (order.get(entry.output, len(order)), _row(entry.output, report, changes.get(entry.output), diff is not None))
                )
    rows = [row for _, row in sorted(rows, key=lambda item: item[0])]  # stable: the run's order otherwise
    failure_items = "".join(f"<li>{_e(f.error or f.image)}</li>" for f in failures)
    shards = f" · {len(documents)} shards" if len(documents) > 1 else ""
    interrupted = " · <b>interrupted</b>" if any(d.interrupted for d in documents) else ""
    not_done = f", {counts['not_done']} not done" if counts["not_done"] else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>hookviz: {_e(run.model or "")}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>hookviz: {_e(run.model or "")}</h1>
<div class="meta">weights {_e(run.weights or "")} · layers {_e(", ".join(run.layers))} ·
{counts["done"]} done, {counts["skipped"]} skipped, {counts["failed"]} failed{not_done}{shards}{interrupted}<br>
<code>{_e(" ".join(run.command))}</code></div>
{f'<h2>Failures</h2><ul class="failures">{failure_items}</ul>' if failure_items else ""}
{_trust_heading(documents)}
{_diff_heading(diff) if diff is not None else ""}
<table>
<thead><tr><th>photo</th><th>image and top-5</th><th>layers</th>{"<th>change from the baseline</th>" if diff is not None else ""}</tr></thead>
<tbody>
{"".join(rows)}
</tbody>
</table>
</body>
</html>
"""


def _trust_heading(documents: list[RunRecord]) -> str:
    """What the trust measures say over the run (run.json's ``trust``), one line each."""
    lines = [line for document in documents for line in ((document.trust or {}).get("summary") or [])]
    if not lines:
        return ""
    items = "".join(f"<li>{_e(line)}</li>" for line in dict.fromkeys(lines))
    return f"<h2>How far to trust the maps</h2><ul>{items}</ul>"


def _diff_heading(diff: dict) -> str:
    base = diff.get("base") or {}
    drift = diff.get("drift") or {}
    findings = len(drift.get("findings") or [])
    verdict = (
        f'<span class="drift">{findings} drift findings</span>'
        if findings
        else '<span class="steady">no drift beyond the tolerances</span>'
    )
    checked = "" if drift.get("checked") else " (drift not checked: the run does not fail on it)"
    tolerances = ", ".join(f"{k} {v}" for k, v in (diff.get("tolerances") or {}).items())
    notes = "".join(f"<li>{_e(note)}</li>" for note in diff.get("notes") or [])
    return (
        f"<h2>Compared with the baseline <code>{_e(base.get('folder', ''))}</code></h2>"
        f'<div class="meta">{verdict}{checked} · tolerances: {_e(tolerances)}<br>'
        f"Images are sorted most changed first: those whose target changed, then by the largest "
        f"relative change (max |after &minus; before| / max |before|) of any compared forward tensor "
        f"(the model's input, a layer's input or output, the logits).</div>"
        f"{f'<ul>{notes}</ul>' if notes else ''}"
    )


def _diff_cell(base: str, change: dict | None) -> str:
    """One image's change from the baseline: target, numbers and each layer's diff picture."""
    if change is None:
        return "<td><i>not compared</i></td>"
    before, after = ((change.get("target") or {}).get(k) or {} for k in ("before", "after"))
    names = [_e(t.get("name") or str(t.get("index"))) for t in (before, after)]
    target = (
        f'<span class="drift">target {names[0]} &rarr; {names[1]}</span>'
        if change.get("target_changed")
        else f"target {names[1]} (unchanged)"
    )
    p_change = change.get("probability_change")
    findings = change.get("findings") or []
    first = change.get("first_change") or {}
    lines = [
        target,
        f"first changed at: <b>{_e(_where(first))}</b> ({_e(first.get('figure'))})" if first else "",
        f"P(target) change: {'n/a' if p_change is None else format(p_change, '+.3g')}",
        f"largest relative change: {_number(change.get('change'))}",
        f"lowest CAM correlation: {_number(change.get('lowest_cam_corr'))}",
        f'<span class="drift">{len(findings)} drift findings</span>' if findings else '<span class="steady">no drift</span>',
    ]
    thumbs = "".join(
        f'<a class="thumb" href="{base}/{_href(layer["picture"])}"><img loading="lazy" '
        f'src="{base}/{_href(layer["picture"])}" alt="change of {_e(layer.get("name"))}">{_e(layer.get("name"))}</a>'
        for layer in change.get("layers") or []
        if isinstance(layer, dict) and layer.get("picture")
    )
    items = "".join(
        f"<li>{_e(f.get('layer') or 'model')} {_e(f.get('figure'))}: {_e(f.get('detail'))}</li>" for f in findings[:8]
    )
    more = f"<li>and {len(findings) - 8} more in diff.json</li>" if len(findings) > 8 else ""
    return (
        f'<td><div class="figures">{"<br>".join(line for line in lines if line)}</div>'
        f'{f"<ul class=figures>{items}{more}</ul>" if items else ""}<div class="thumbs">{thumbs}</div></td>'
    )


def _where(finding: dict) -> str:
    if finding.get("layer"):
        return str(finding["layer"])
    return "the model's input" if str(finding.get("figure")).startswith("model_input") else "the logits"


def _number(value) -> str:
    return "n/a" if value is None else format(value, ".3g")


def _row(folder: str, report: Report, change: dict | None = None, compared: bool = False) -> str:
    files = set(report.files)
    base = _href(folder)
    photo = "".join(
        f'<a href="{base}/{name}"><img src="{base}/{name}" alt="{alt}"></a>'
        for name, alt in (
            (INPUT_PICTURE, "input"),
            (PREDICTION_PICTURE, "prediction"),
            (PIXEL_PICTURE, "maps of the input"),
            (PIXEL_FAITHFULNESS_PICTURE, "faithfulness of the maps of the input"),
            (PIXEL_SANITY_PICTURE, "randomisation check of the maps of the input"),
        )
        if name in files
    )
    photo += "".join(  # a sample's other inputs, side by side with the first (``hookviz.render.inputs``)
        f'<a href="{base}/{_href(name)}"><img src="{base}/{_href(name)}" alt="{_e(name)}" title="{_e(name)}"></a>'
        for name in report.files
        if (name.startswith(INPUT_PREFIX) and name != INPUT_PICTURE) or name.endswith((ATTRIBUTIONS_SUFFIX, MAPS_SUFFIX))
    )
    # A clip's row leads with its first animated CAM, which plays in the page.
    animated = [layer.pictures.get("animation") for layer in report.layers]
    animated = [name for name in animated if name in files]
    if animated:
        photo = (
            f'<a href="{base}/{_href(animated[0])}"><img class="clip" src="{base}/{_href(animated[0])}" '
            f'alt="the CAM over the clip, animated"></a>{photo}'
        )
    heading, predicted = reported_task(report.task).gallery_list(report)
    top5 = "".join(f"<li>{_e(item)}</li>" for item in predicted)
    layers = []
    for layer in report.layers:
        pictures = layer.pictures
        thumbs = "".join(
            f'<a class="thumb" href="{base}/{_href(pictures[kind.name])}">'
            f'<img loading="lazy" src="{base}/{_href(pictures[kind.name])}" alt="{_e(kind.label)}">{_e(kind.label)}</a>'
            for kind in kinds()
            if pictures.get(kind.name) in files
        )
        note = layer.cam.skipped if layer.cam is not None else None
        layers.append(
            f'<div class="layer"><b>{_e(layer.name)}</b> {_e(layer.module_type)}'
            f'{f" · {_e(note)}" if note else ""}<div class="thumbs">{thumbs}</div></div>'
        )
    notes = "".join(f"<br><i>{_e(n)}</i>" for n in report.notes)
    return (
        f'<tr><td class="photo">{photo}</td>'
        f"<td><code>{_e(report.image or folder)}</code>{notes}<br>"
        f"{_e(heading)}<ol>{top5}</ol></td>"
        f"<td>{''.join(layers)}</td>{_diff_cell(base, change) if compared else ''}</tr>\n"
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _href(path: str) -> str:
    from urllib.parse import quote

    return quote(path)
