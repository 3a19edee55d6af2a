"""Gallery: ``OUT/index.html``, a static page over a run's pictures.

One row per image: the photo the model saw, the top-5, and per layer thumbnails of the
summary, channel grid and CAM that open full size. The run's failures are listed. The
page is one file with inline CSS and relative links, so it opens from disk (no server)
and keeps working when the folder is moved or archived.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from .outputs import REPORT, atomic_write, file_name

GALLERY = "index.html"
KINDS = (("summary", "summary"), ("channels", "channels"), ("cam", "CAM"), ("cam_topk", "top-K CAMs"))

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: .2em; }
.meta { color: #555; margin-bottom: 1em; }
table { border-collapse: collapse; }
td, th { border-top: 1px solid #ddd; padding: .6em; vertical-align: top; text-align: left; }
img { display: block; border: 1px solid #ccc; }
.photo img { width: 160px; height: auto; }
.thumb img { height: 150px; width: auto; }
.thumbs { display: flex; gap: .6em; flex-wrap: wrap; }
.thumb { font-size: .85em; color: #555; text-align: center; }
.layer { margin-bottom: .8em; }
.layer b { font-family: monospace; }
ol { margin: 0; padding-left: 1.4em; }
.failures li { color: #a00; }
code { font-size: .9em; }
"""


def write_gallery(out: Path, run: dict) -> Path:
    """Write ``out/index.html`` for the run described by ``run`` (run.json's document)."""
    rows = []
    for entry in run["images"]:
        if entry["status"] not in ("done", "skipped"):
            continue
        folder = out / entry["output"]
        try:
            report = json.loads((folder / REPORT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        rows.append(_row(entry["output"], report))
    failures = "".join(f"<li>{_e(f['error'] or f['image'])}</li>" for f in run.get("failures", []))
    counts = run.get("counts", {})
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>hookviz: {_e(run.get('model', ''))}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>hookviz: {_e(run.get('model', ''))}</h1>
<div class="meta">weights {_e(run.get('weights', ''))} · layers {_e(', '.join(run.get('layers', [])))} ·
{counts.get('done', 0)} done, {counts.get('skipped', 0)} skipped, {counts.get('failed', 0)} failed
{' · <b>interrupted</b>' if run.get('interrupted') else ''}<br>
<code>{_e(' '.join(run.get('command', [])))}</code></div>
{f'<h2>Failures</h2><ul class="failures">{failures}</ul>' if failures else ''}
<table>
<thead><tr><th>photo</th><th>image and top-5</th><th>layers</th></tr></thead>
<tbody>
{''.join(rows)}
</tbody>
</table>
</body>
</html>
"""
    return atomic_write(out / GALLERY, page.encode("utf-8"))


def _row(folder: str, report: dict) -> str:
    files = set(report.get("files", []))
    base = _href(folder)
    photo = f'<a href="{base}/input.jpg"><img src="{base}/input.jpg" alt="input"></a>' if "input.jpg" in files else ""
    top5 = "".join(
        f"<li>{_e(score['name'] or str(score['index']))} "
        f"({'nan' if score['probability'] is None else format(score['probability'], '.3f')})</li>"
        for score in report.get("top5", [])
    )
    layers = []
    for layer in report.get("layers", []):
        stem = file_name(layer["name"])
        thumbs = "".join(
            f'<a class="thumb" href="{base}/{_href(f"{stem}.{kind}.png")}">'
            f'<img loading="lazy" src="{base}/{_href(f"{stem}.{kind}.png")}" alt="{_e(label)}">{_e(label)}</a>'
            for kind, label in KINDS
            if f"{stem}.{kind}.png" in files
        )
        note = layer.get("cam", {}).get("skipped")
        layers.append(
            f'<div class="layer"><b>{_e(layer["name"])}</b> {_e(layer["module_type"])}'
            f'{f" · {_e(note)}" if note else ""}<div class="thumbs">{thumbs}</div></div>'
        )
    target = report.get("target", {})
    notes = "".join(f"<br><i>{_e(n)}</i>" for n in report.get("image_notes", []))
    return (
        f'<tr><td class="photo">{photo}</td>'
        f"<td><code>{_e(report.get('image') or folder)}</code>{notes}<br>"
        f"target: {_e(target.get('name') or str(target.get('index')))}<ol>{top5}</ol></td>"
        f"<td>{''.join(layers)}</td></tr>\n"
    )


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


def _href(path: str) -> str:
    from urllib.parse import quote

    return quote(path)
