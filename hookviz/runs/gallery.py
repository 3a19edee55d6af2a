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
from hookviz.store.files import DIFF, REPORT
from hookviz.store.records import ImageStatus, Report, RunRecord, read_report, read_run
from hookviz.store.vlm_files import VlmReport, read_vlm_report

__all__ = ["GALLERY", "write_gallery", "run_documents", "read_atlas"]

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


def _report(path: Path) -> Report | VlmReport | None:
    """A sample's report.json: a run's, or a vision-language model's photo's (``None``: neither)."""
    try:
        return read_report(path) or read_vlm_report(path)
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
        return _page(out, run, documents, diff)


def read_atlas(out: Path) -> dict | None:
    """The atlas of the run (``hookviz atlas``'s ``atlas.json``, schema ``hookviz/atlas/1``) with
    ``folder``, its folder relative to ``out``; ``None``: the run has none. Its folder is the one
    run.json names (``atlas``, or ``asked.atlas``), else ``out/atlas``."""
    folder = _atlas_folder(out)
    try:
        atlas = json.loads((folder / "atlas.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(atlas, dict) or atlas.get("schema") != "hookviz/atlas/1" or not isinstance(atlas.get("layers"), list):
        return None
    try:
        relative = Path(os.path.relpath(folder.resolve(), out.resolve())).as_posix()
    except ValueError:  # another drive: the page cannot link it
        return None
    return {**atlas, "folder": relative}


def _atlas_folder(out: Path) -> Path:
    try:
        document = json.loads((out / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        document = {}
    named = document.get("atlas") if isinstance(document, dict) else None
    if named is None and isinstance(document, dict) and isinstance(document.get("asked"), dict):
        named = document["asked"].get("atlas")
    if isinstance(named, dict):
        named = named.get("folder") or named.get("path")
    if isinstance(named, str) and named:
        path = Path(named)
        return path if path.is_absolute() else out / path if (out / path / "atlas.json").exists() else path
    return out / "atlas"


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


def _page(out: Path, run: RunRecord, documents: list[RunRecord], diff: dict | None = None) -> Path:
    """Write the explorer of ``documents`` (shards of one run) into ``out``."""
    from hookviz.runs.explorer import explorer_run, write_explorer

    labels = {entry.output: entry.label for document in documents for entry in document.images if entry.label}
    found = explorer_run(out, documents, diff, labels, lambda folder: _report(out / folder / REPORT))
    atlas = read_atlas(out)
    return write_explorer(out, found, _run_info(run, documents, diff, atlas), atlas, _heading(run, documents, diff))


def _run_info(run: RunRecord, documents: list[RunRecord], diff: dict | None, atlas: dict | None) -> dict:
    return {
        "title": run.model or "",
        "model": run.model or "",
        "task": run.task or "",
        "layers": list(run.layers),
        "shards": len(documents),
        "compared": diff is not None,
        "atlas_folder": (atlas or {}).get("folder"),
    }


def _heading(run: RunRecord, documents: list[RunRecord], diff: dict | None) -> str:
    """The page's heading, as HTML: the run, its failures, its trust and its comparison."""
    failures: list[ImageStatus] = []
    counts = {"done": 0, "skipped": 0, "failed": 0, "not_done": 0}
    for document in documents:
        for key in counts:
            counts[key] += getattr(document.counts, key)
        failures += document.failures
    failure_items = "".join(f"<li>{_e(f.error or f.image)}</li>" for f in failures)
    shards = f" · {len(documents)} shards" if len(documents) > 1 else ""
    interrupted = " · <b>interrupted</b>" if any(d.interrupted for d in documents) else ""
    not_done = f", {counts['not_done']} not done" if counts["not_done"] else ""
    return f"""<h1>hookviz: {_e(run.model or "")}</h1>
<div class="meta">weights {_e(run.weights or "")} · {_e("layers " + ", ".join(run.layers) if run.layers else "no layer")} ·
{counts["done"]} done, {counts["skipped"]} skipped, {counts["failed"]} failed{not_done}{shards}{interrupted}<br>
<code>{_e(" ".join(run.command))}</code></div>
<details class="heading"><summary>the run's failures, notes and comparison</summary>
{f'<h2>Failures</h2><ul class="failures">{failure_items}</ul>' if failure_items else ""}
{_trust_heading(documents)}
{_diff_heading(diff) if diff is not None else ""}
</details>"""


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


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
