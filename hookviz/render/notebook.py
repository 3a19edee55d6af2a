"""How an ``Explanation`` shows itself in a notebook: ``hookviz.explain(...)`` as a cell's last
line shows what the model predicted and, per layer, its summary and CAM pictures.

Jupyter asks an object for ``_repr_html_``; the pictures are embedded in that HTML as base64
PNGs (a notebook saved with its outputs keeps them, no files beside it needed). This module
is imported only then, so ``import hookviz`` stays light.
"""

from __future__ import annotations

import base64
import html
import io

__all__ = ["NOTEBOOK_KINDS", "explanation_html", "figure_png"]

#: The pictures a notebook shows per layer, in this order (where each applies).
NOTEBOOK_KINDS = ("summary", "cam", "cam_topk")


def figure_png(figure) -> bytes:
    """A matplotlib ``Figure`` (on the Agg canvas) as an RGB PNG at its own size: the pictures
    are opaque, and a notebook keeps every byte of them, so zlib's usual level."""
    from PIL import Image

    figure.canvas.draw()
    rgba = figure.canvas.buffer_rgba()
    buffer = io.BytesIO()
    Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1).convert("RGB").save(
        buffer, format="png", compress_level=6
    )
    return buffer.getvalue()


def _img(png: bytes, layer: str, kind: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    caption = html.escape(f"{layer} · {kind}" if layer else kind)
    return (
        f'<figure style="margin:0.5em 0"><img src="data:image/png;base64,{data}" alt="{caption}" '
        f'data-layer="{html.escape(layer)}" data-kind="{html.escape(kind)}" style="max-width:100%">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _heading(explanation) -> str:
    from hookviz.tasks import get_task

    target = explanation.target
    parts = [
        f"<b>{html.escape(explanation.image.source.label)}</b>",
        f"model {html.escape(explanation.model)}",
        f"task {explanation.task}",
    ]
    if target is not None:
        parts.append(f"target {html.escape(target.label)}, p={target.probability:.3f}")
    rows = [" · ".join(parts)]
    if explanation.prediction is not None:
        rows += [html.escape(line) for line in get_task(explanation.task).prediction_lines(explanation)]
    rows += [f"note: {html.escape(note)}" for note in explanation.notes]
    return "".join(f'<p style="margin:0.2em 0">{row}</p>' for row in rows)


def explanation_html(explanation, kinds=NOTEBOOK_KINDS) -> str:
    """The explanation as one HTML fragment: a heading (photo, model, target, top-5 or
    detections, notes), the prediction picture of a segmenter or detector, and per layer the
    pictures of ``kinds`` that apply to it, each an ``<img>`` whose ``data-layer`` and
    ``data-kind`` name it."""
    from hookviz.render.kinds import picture_kind
    from hookviz.render.prediction import prediction_figure

    pictures = [picture_kind(kind) for kind in kinds]
    blocks = [_heading(explanation)]
    prediction = prediction_figure(explanation)
    if prediction is not None:
        blocks.append(_img(figure_png(prediction), "", "prediction"))
    for layer in explanation.layers:
        for picture in pictures:
            figure = picture.figure(explanation, layer)
            if figure is not None:
                blocks.append(_img(figure_png(figure), layer.name, picture.name))
        if layer.cam_note:
            blocks.append(f"<p>{html.escape(layer.name)}: {html.escape(layer.cam_note)}</p>")
    return '<div class="hookviz-explanation">' + "".join(blocks) + "</div>"
