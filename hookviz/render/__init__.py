"""Rendering: the pictures, as matplotlib ``Figure`` objects on the Agg canvas.

``figures`` holds the primitives (sheets, map panels, value bars, CAM overlays, PNG
encoding), ``kinds`` the registry of picture kinds with one module per kind (its builder and
its reuse key), ``prediction`` and ``pixels`` the per-image prediction and input-map
pictures, and ``worker`` the render workers' settings and figure reuse. Importing this
package is cheap: matplotlib is imported where a picture is drawn.
"""

from __future__ import annotations

__all__ = [
    "render_png",
    "INPUT_PICTURE",
    "PREDICTION_PICTURE",
    "PIXEL_PICTURE",
    "PIXEL_FAITHFULNESS_PICTURE",
    "PIXEL_SANITY_PICTURE",
]

#: The photo as the model saw it (the whole photo with ``whole_image``), beside each image's pictures.
INPUT_PICTURE = "input.jpg"
#: A segmentation's mask or a detector's boxes over the photo (one per image, not per layer).
PREDICTION_PICTURE = "prediction.png"
#: The maps at the input's resolution (``--cam guided-backprop``, ...), one per image, with the ``cam`` pictures.
PIXEL_PICTURE = "pixel_maps.png"
#: With ``--faithfulness``: the maps of the input's deletion, insertion and ROAD curves (one per image).
PIXEL_FAITHFULNESS_PICTURE = "pixel_maps.faithfulness.png"
#: With ``--sanity``: the maps of the input as the model's layers are randomised (one per image).
PIXEL_SANITY_PICTURE = "pixel_maps.sanity.png"


def render_png(kind, explanation, layer, cache=None, **options) -> bytes | None:
    """The PNG of one picture (a ``kinds.PictureKind``), or ``None`` when it does not
    apply to this layer; a kind that encodes its own file (``encode``: an animated WebP)
    gives that file's bytes.

    With a ``cache`` (the render workers' ``worker.FigureCache``), the figure is kept and
    reused for the next image of the same layer and reuse key: a long run then only redraws
    data, which is about a third cheaper. Without one, the figure is built, drawn and dropped.
    """
    from hookviz.render.worker import Reused

    if not kind.draws(layer, explanation):  # a map of a rank it does not draw: report.json says so (``kind.unfit``)
        return None
    reuse_key = kind.reuse_key(explanation, layer, options)
    if reuse_key is None:
        return None
    if kind.encode is not None:
        return kind.encode(explanation, layer, **options)
    key = (kind.name, reuse_key)
    entry = cache.take(key) if cache is not None else None
    if entry is None:
        built = kind.build(explanation, layer, **options)
        if built is None:
            return None
        entry = Reused(*built)
    else:
        entry.update(explanation, layer)
    if cache is not None:
        cache.keep(key, entry)
    return entry.png()
