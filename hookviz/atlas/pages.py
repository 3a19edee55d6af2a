"""The atlas's pages: ``index.html``, every layer's channels in a table sortable by any
statistic (a click on a column's heading), and ``channels/<layer>/<i>.html``, a channel's top
examples (the channel's map over each crop), the histogram of its maximum and its classes.
Plain HTML with a few lines of script; nothing is fetched from elsewhere."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from hookviz.atlas.state import AtlasState

__all__ = ["write_pages"]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.2em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.1em;margin:1em 0 .3em}
.note{color:#555;font-size:.9em;margin:.2em 0 .8em}
table{border-collapse:collapse;font-size:.9em;background:#fff}
th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
th{cursor:pointer;background:#eee;position:sticky;top:0;user-select:none}
th.sorted-desc::after{content:" \\25BC"}th.sorted-asc::after{content:" \\25B2"}
td.name,th.name{text-align:left}td img{width:48px;height:48px;object-fit:cover;image-rendering:pixelated;vertical-align:middle}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(var(--side),1fr));gap:8px;max-width:1100px}
figure{margin:0;background:#fff;border:1px solid #ddd;padding:4px;text-align:center}
figure img{width:100%;aspect-ratio:1;object-fit:contain;image-rendering:pixelated;background:#222}
figure.plain img.map{display:none}figure.plain img.raw{display:block}figure img.raw{display:none}
figcaption{font-size:.75em;line-height:1.25;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.score{font-weight:600;font-size:1.05em;white-space:normal}
.row{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start;margin-top:1em}
nav a{margin-right:1em}
.rankings{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:1.5em;max-width:1400px}
.rankings .grid{grid-template-columns:repeat(var(--columns),minmax(0,1fr))}.rankings h2{margin-top:.4em}.label{color:#245;font-weight:600}
.visual{display:flex;gap:1em;align-items:center;margin:.6em 0}.visual img{width:180px;height:180px;image-rendering:pixelated;border:1px solid #ddd}
"""

_SORT = """
document.querySelectorAll('table.sortable').forEach(function(table){
  table.querySelectorAll('th').forEach(function(th,col){th.addEventListener('click',function(){
    var body=table.tBodies[0],rows=Array.from(body.rows),down=!th.classList.contains('sorted-desc');
    table.querySelectorAll('th').forEach(function(h){h.classList.remove('sorted-desc','sorted-asc')});
    th.classList.add(down?'sorted-desc':'sorted-asc');
    rows.sort(function(a,b){var x=a.cells[col].dataset.v,y=b.cells[col].dataset.v;
      var nx=parseFloat(x),ny=parseFloat(y);if(isNaN(nx)&&isNaN(ny))return down?(y||'').localeCompare(x||''):(x||'').localeCompare(y||'');
      if(isNaN(nx))return 1;if(isNaN(ny))return -1;return down?ny-nx:nx-ny});
    rows.forEach(function(r){body.appendChild(r)});});});});
"""

_COLUMNS = ("channel", "top example", "mean", "dead", "max q50", "max q90", "max q99", "top class", "selectivity")


def _page(title: str, body: str, script: str = "") -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body>{body}<script>{script}</script></body></html>\n"
    )


def _number(value) -> str:
    return "–" if value is None else f"{value:.3g}"


def _cell(value, shown: str | None = None, name: bool = False) -> str:
    data = "" if value is None else html.escape(str(value))
    text = html.escape(shown if shown is not None else _number(value))
    return f'<td data-v="{data}"{" class=name" if name else ""}>{text}</td>'


def _index_row(item: dict, extra: tuple[str, ...] = ()) -> str:
    stats, top = item["stats"], item.get("top") or []
    quantiles = stats["max_quantiles"]
    thumb = f'<img src="{html.escape(top[0]["overlay"])}" alt="">' if top else ""
    best = stats["classes"][0]["class"] if stats["classes"] else None
    cells = [
        f'<td data-v="{item["index"]}" class=name><a href="{html.escape(item["page"])}">{item["index"]}</a></td>',
        f'<td data-v="{top[0]["score"] if top else ""}">{thumb}</td>',
        _cell(stats["mean"]),
        _cell(stats["dead"], f"{stats['dead']:.0%}"),
        *(_cell(quantiles[q]) for q in ("0.5", "0.9", "0.99")),
        _cell(best, best or "–", name=True),
        _cell(stats["selectivity"]),
    ]
    if "relevance" in extra:
        relevant = item.get("relevance_top") or []
        cells.append(_cell(relevant[0]["score"] if relevant else None))
    if "label" in extra:
        label = (item.get("label") or {}).get("concept")
        cells.append(_cell(label, label or "–", name=True))
    return "<tr>" + "".join(cells) + "</tr>"


def _extra_columns(document: dict) -> tuple[str, ...]:
    """The index's columns beyond the statistics: the best relevance, the name, when the atlas has them."""
    items = [item for layer in document["layers"] for item in layer["items"]]
    extra = ("relevance",) if document.get("relevance") is not None else ()
    return extra + (("label",) if any("label" in item for item in items) else ())


def index_html(document: dict) -> str:
    extra = _extra_columns(document)
    titles = {"relevance": "best relevance", "label": "name"}
    columns = _COLUMNS + tuple(titles[c] for c in extra)
    heading = "".join(
        f'<th class="{"name" if c in ("channel", "top class", "name") else ""}">{html.escape(c)}</th>' for c in columns
    )
    sections = []
    for layer in document["layers"]:
        rows = "".join(_index_row(item, extra) for item in layer["items"])
        grid = "×".join(map(str, layer["grid"]))
        sections.append(
            f"<h2>{html.escape(layer['name'])}: {layer['channels']} channels on a {grid} grid</h2>"
            f'<table class="sortable"><thead><tr>{heading}</tr></thead><tbody>{rows}</tbody></table>'
        )
    note = (
        f"{document['samples']} samples; each channel's top {document['top']} by the {document['rank']} of its map"
        f"{'; classes: ' + document['classes_from'] if document['classes_from'] else ''}. "
        "Click a column's heading to sort by it; click a channel to see its examples."
    )
    if document.get("relevance") is not None:
        target = "its predicted class" if document["relevance"] == "predicted" else f"class {document['relevance']}"
        note += (
            f" <b>best relevance</b>: the channel's largest contribution to a sample's score for {html.escape(str(target))} "
            f"({html.escape(str(document.get('relevance_rule')))})."
        )
    body = f"<h1>Atlas of {html.escape(document['model'])}</h1><p class=note>{note}</p>" + "".join(sections)
    return _page(f"Atlas of {document['model']}", body, _SORT)


_TOGGLE = """
document.getElementById('plain').addEventListener('change',function(e){
  document.querySelectorAll('figure').forEach(function(f){f.classList.toggle('plain',e.target.checked)});});
"""


def _figure(rank: int, example: dict, measure: str = "") -> str:
    source = example["source"]
    where = ", ".join(map(str, example["position"]))
    frame = f" · frame {example['frame']}" if example.get("frame") is not None else ""
    box = example["box"]
    return (
        f'<figure><img class=map src="../../{html.escape(example["overlay"])}" alt="">'
        f'<img class=raw src="../../{html.escape(example["crop"])}" alt="">'
        f"<figcaption><span class=score>#{rank + 1} · {measure}{example['score']:.3g}</span><br>"
        f'<span title="{html.escape(source)}">{html.escape(example.get("shown") or Path(source).name)}</span><br>'
        f'<span title="crop {box[2] - box[0]}×{box[3] - box[1]} px at ({box[0]}, {box[1]})">at ({where}){frame}</span>'
        "</figcaption></figure>"
    )


def histogram_svg(state: AtlasState, layer: str, channel: int, quantiles: dict, bins: int = 30) -> str:
    """The distribution of the channel's maximum over the samples, with its quantiles marked."""
    stats = state.layers[layer].statistics
    low, high = float(stats.low[channel]), float(stats.high[channel])
    if not (np.isfinite(low) and np.isfinite(high)):
        return "<p class=note>no sample</p>"
    counts = stats.sketch.histogram(channel, low, high, bins)
    width, height, left, bottom = 360, 150, 34, 26
    tallest = max(int(counts.max()), 1)
    step = (width - left - 6) / bins
    bars = "".join(
        f'<rect x="{left + i * step:.1f}" y="{height - bottom - c / tallest * (height - bottom - 8):.1f}" '
        f'width="{max(step - 1, 1):.1f}" height="{c / tallest * (height - bottom - 8):.1f}" fill="#4a6fa5"/>'
        for i, c in enumerate(counts)
    )
    marks = ""
    for number, (q, value) in enumerate(quantiles.items()):
        if value is not None and high > low:
            x = left + (value - low) / (high - low) * (width - left - 6)
            marks += f'<line x1="{x:.1f}" x2="{x:.1f}" y1="8" y2="{height - bottom}" stroke="#d33" stroke-dasharray="3,2"/>'
            anchor = "end" if x > width - 40 else "start"
            marks += (
                f'<text x="{x + (-2 if anchor == "end" else 2):.1f}" y="{16 + 12 * number}" font-size="10" fill="#d33" '
                f'text-anchor="{anchor}">q{float(q) * 100:g}</text>'
            )
    axis = (
        f'<line x1="{left}" x2="{width - 6}" y1="{height - bottom}" y2="{height - bottom}" stroke="#333"/>'
        f'<text x="{left}" y="{height - bottom + 13}" font-size="11">{low:.3g}</text>'
        f'<text x="{width - 6}" y="{height - bottom + 13}" font-size="11" text-anchor="end">{high:.3g}</text>'
        f'<text x="{(width + left) / 2}" y="{height - 2}" font-size="11" text-anchor="middle">the channel\'s maximum, per sample</text>'
        f'<text x="{left - 4}" y="14" font-size="11" text-anchor="end">{tallest}</text>'
        f'<text x="{left - 4}" y="{height - bottom}" font-size="11" text-anchor="end">0</text>'
    )
    return f'<svg width="{width}" height="{height}" role="img" aria-label="histogram">{bars}{marks}{axis}</svg>'


def _classes_table(classes: list[dict], source: str | None) -> str:
    if not classes:
        return "<p class=note>no classes (neither ImageFolder sub-folders nor a classifier's categories)</p>"
    rows = "".join(
        f"<tr><td class=name>{html.escape(c['class'])}</td><td>{c['mean_max']:.3g}</td><td>{c['count']}</td></tr>"
        for c in classes
    )
    return (
        f"<table><thead><tr><th class=name>{source} class</th><th>mean max</th><th>samples</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def channel_html(document: dict, layer: dict, item: dict, state: AtlasState) -> str:
    index, stats = item["index"], item["stats"]
    quantiles = stats["max_quantiles"]
    links = ['<a href="../../index.html">all channels</a>']
    if index > 0:
        links.append(f'<a href="{index - 1}.html">← channel {index - 1}</a>')
    if index + 1 < layer["channels"]:
        links.append(f'<a href="{index + 1}.html">channel {index + 1} →</a>')
    summary = (
        f"mean {_number(stats['mean'])} · dead on {stats['dead']:.0%} of samples · maximum: median "
        f"{_number(quantiles['0.5'])}, q90 {_number(quantiles['0.9'])}, q99 {_number(quantiles['0.99'])}"
        f" · selectivity {_number(stats['selectivity'])}"
    )
    body = (
        f"<nav>{''.join(links)}</nav><h1>{html.escape(layer['name'])} · channel {index}{_name(item)}</h1>"
        f"<p class=note>{summary}</p>{_label_note(item)}{_visualization(item)}{_examples(document, item)}"
        f"<div class=row><div><h2>Its maximum over the samples</h2>"
        f"{histogram_svg(state, layer['name'], index, quantiles)}</div>"
        f"<div><h2>Classes it fires for most</h2>{_classes_table(stats['classes'], document['classes_from'])}</div></div>"
    )
    return _page(f"{layer['name']} channel {index}", body, _TOGGLE)


def _grid(examples: list[dict], side: str, measure: str = "") -> str:
    """The examples' figures; ``measure`` names their score in each caption (``relevance ``)."""
    figures = "".join(_figure(rank, e, measure) for rank, e in enumerate(examples))
    return f'<div class=grid style="--side:{side}">{figures}</div>'


def _examples(document: dict, item: dict) -> str:
    """The channel's top examples; with ``--relevance``, those by activation and those by relevance side by side."""
    top, relevant = item.get("top") or [], item.get("relevance_top")
    toggle = "<label><input type=checkbox id=plain> crops without the map</label>"
    if relevant is None:
        side = "190px" if len(top) <= 9 else "150px"
        return (
            f"<p class=note>Its top {len(top)} of {document['samples']} samples by the {document['rank']} of its map, each "
            "cropped to what its peak unit sees, the map over it (brighter: stronger; outlined: the peak unit's cell). "
            f"{toggle}</p>{_grid(top, side)}"
        )
    target = "each sample's predicted class" if document["relevance"] == "predicted" else f"class {document['relevance']}"
    rule = html.escape(str(document.get("relevance_rule")))
    columns = min(max(int(np.ceil(np.sqrt(max(len(top), len(relevant))))), 2), 5)  # 9: 3 x 3, 25: 5 x 5
    return (
        f"<p class=note>Two rankings of {document['samples']} samples. <b>Fires most</b>: by the {document['rank']} "
        f"of its map. <b>Matters most</b>: by its contribution to {html.escape(target)}'s score ({rule}, summed "
        "over positions), each cropped at its most relevant unit. A channel may fire often and matter little, or "
        f"matter where it fires less. Each crop is what its unit sees, with what it is ranked by over it: its "
        "activation (dark to yellow) where it fires most, its relevance where it matters most (red: for the class, "
        f"blue: against, on the scale of the crop's most relevant unit). {toggle}</p>"
        f'<div class=rankings style="--columns:{columns}">'
        f"<div><h2>Fires most: its top {len(top)} by activation</h2>{_grid(top, '0', document['rank'] + ' ')}</div>"
        f"<div><h2>Matters most: its top {len(relevant)} by relevance</h2>{_grid(relevant, '0', 'relevance ')}</div></div>"
    )


def _name(item: dict) -> str:
    label = item.get("label")
    return f" · <span class=label>{html.escape(label['concept'])}</span>" if label else ""


def _label_note(item: dict) -> str:
    label = item.get("label")
    if not label:
        return ""
    second = (
        f"; runner-up <b>{html.escape(label['runner_up'])}</b> ({label['runner_up_score']:.3g})" if label.get("runner_up") else ""
    )
    return (
        f"<p class=note>Named <b>{html.escape(label['concept'])}</b> by its top examples' CLIP similarity "
        f"(SoftWPMI {label['score']:.3g}{second})</p>"
    )


def _visualization(item: dict) -> str:
    found = item.get("visualization")
    if not found:
        return ""
    ratio = (
        f"<b>{found['ratio']:.2f}x</b> its best example's" if found.get("ratio") is not None else "against no positive example's"
    )
    stopped = f"; {html.escape(found['stopped'])}" if found.get("stopped") else ""
    return (
        f'<div class=visual><img src="../../{html.escape(found["image"])}" alt="the input optimised to excite it">'
        f"<p class=note>An input optimised to excite it (Fourier parametrisation, decorrelated colour, jitter): "
        f"it reaches {found['activation']:.3g}, {ratio} {_number(found.get('best_example'))}; "
        f"{found['steps']} steps, {found['seconds']:.1f} s{stopped}.</p></div>"
    )


def write_pages(out: Path, document: dict, state: AtlasState, stems: dict[str, str]) -> None:
    """``index.html`` and every channel's page."""
    for layer in document["layers"]:
        folder = out / "channels" / stems[layer["name"]]
        folder.mkdir(parents=True, exist_ok=True)
        for item in layer["items"]:
            (folder / f"{item['index']}.html").write_text(channel_html(document, layer, item, state), encoding="utf-8")
    (out / "index.html").write_text(index_html(document), encoding="utf-8")
