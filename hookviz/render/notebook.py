"""How an ``Explanation`` shows itself in a notebook: ``hookviz.explain(...)`` as a cell's last
line shows what the model predicted and, per layer, thumbnails of its summary and CAM pictures.

Jupyter asks an object for ``_repr_html_``; the pictures are embedded in that HTML (a notebook
saved with its outputs keeps them, no files beside it needed), as thumbnails: a notebook keeps
every byte of every output, and full-size PNGs of 20 layers were 20 MB of HTML. Each picture's
caption says how to get it full size (``result.figure(layer, kind)``), and ``result.save``
writes them all. This module is imported only then, so ``import hookviz`` stays light.
"""

from __future__ import annotations

import base64
import html
import io

__all__ = ["NOTEBOOK_KINDS", "THUMBNAIL_WIDTH", "explanation_html", "figure_png", "thumbnail"]

#: The pictures a notebook shows per layer, in this order (where each applies).
NOTEBOOK_KINDS = ("summary", "cam", "cam_topk")
#: A thumbnail's width at most, in pixels: three side by side in a notebook's column.
THUMBNAIL_WIDTH = 320
#: JPEG's quality for thumbnails: the CAMs over photos are photos, which PNG keeps 5x larger.
THUMBNAIL_QUALITY = 80


def _rgb(figure):
    from PIL import Image

    figure.canvas.draw()
    rgba = figure.canvas.buffer_rgba()
    return Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1).convert("RGB")


def figure_png(figure) -> bytes:
    """A matplotlib ``Figure`` (on the Agg canvas) as an RGB PNG at its own size: the pictures
    are opaque, and a notebook keeps every byte of them, so zlib's usual level."""
    buffer = io.BytesIO()
    _rgb(figure).save(buffer, format="png", compress_level=6)
    return buffer.getvalue()


def thumbnail(figure) -> bytes:
    """A matplotlib ``Figure`` (on the Agg canvas) as a JPEG at most ``THUMBNAIL_WIDTH`` wide."""
    from PIL import Image

    image = _rgb(figure)
    if image.width > THUMBNAIL_WIDTH:
        height = max(1, round(image.height * THUMBNAIL_WIDTH / image.width))
        image = image.resize((THUMBNAIL_WIDTH, height), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, format="jpeg", quality=THUMBNAIL_QUALITY)
    return buffer.getvalue()


def _img(data: bytes, mime: str, layer: str, kind: str) -> str:
    encoded = base64.b64encode(data).decode("ascii")
    caption = html.escape(f"{layer} · {kind}" if layer else kind)
    full = f' title="full size: result.figure({html.escape(repr(layer))}, {html.escape(repr(kind))})"' if layer else ""
    return (
        '<figure style="display:inline-block;margin:0.3em;vertical-align:top">'
        f'<img src="data:{mime};base64,{encoded}" alt="{caption}"{full} data-layer="{html.escape(layer)}" '
        f'data-kind="{html.escape(kind)}" style="max-width:100%"><figcaption>{caption}</figcaption></figure>'
    )


def _heading(explanation) -> str:
    from hookviz.render.presentation import presentation_of

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
        rows += [html.escape(line) for line in presentation_of(explanation.task).prediction_lines(explanation)]
    rows += [f"note: {html.escape(note)}" for note in explanation.notes]
    return "".join(f'<p style="margin:0.2em 0">{row}</p>' for row in rows)


def explanation_html(explanation, kinds=NOTEBOOK_KINDS) -> str:
    """The explanation as one HTML fragment: a heading (photo, model, target, top-5 or
    detections, notes), the prediction picture of a segmenter or detector, and per layer
    thumbnails of the pictures of ``kinds`` that apply to it, each an ``<img>`` whose
    ``data-layer`` and ``data-kind`` name it, and a line that says how to get them full size."""
    from hookviz.render.kinds import picture_kind
    from hookviz.render.prediction import prediction_figure

    pictures = [picture_kind(kind) for kind in kinds]
    blocks = [_heading(explanation)]
    prediction = prediction_figure(explanation)
    if prediction is not None:  # what the model answered, once: full size
        blocks.append(_img(figure_png(prediction), "image/png", "", "prediction"))
    for layer in explanation.layers:
        for picture in pictures:
            figure = picture.figure(explanation, layer)
            if figure is not None:
                blocks.append(_img(thumbnail(figure), "image/jpeg", layer.name, picture.name))
        if layer.cam_note:
            blocks.append(f"<p>{html.escape(layer.name)}: {html.escape(layer.cam_note)}</p>")
    if not explanation.layers:  # an input method's run records none (lrp): its maps are files
        blocks.append("<p style=\"margin:0.2em 0;color:#666\">Every picture as files: <code>result.save('folder')</code></p>")
        return '<div class="hookviz-explanation">' + "".join(blocks) + "</div>"
    first = explanation.layers[0].name
    blocks.append(
        f'<p style="margin:0.2em 0;color:#666">Thumbnails. Full size: <code>result.figure({html.escape(repr(first))}, '
        "'cam')</code>; every picture as files: <code>result.save('folder')</code></p>"
    )
    return '<div class="hookviz-explanation">' + "".join(blocks) + "</div>"
