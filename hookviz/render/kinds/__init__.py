"""Picture kinds, one module each: its builder and its reuse key."""

from __future__ import annotations

__all__ = ["anatomy"]


def anatomy(explanation, layer, shape):
    """A reuse key of a picture of one explanation's layer: the model, the layer and its
    output's shape (they are in the titles), the photo's size, and ``shape``, what else
    decides the layout; ``None`` (the picture does not apply) when ``shape`` is."""
    if shape is None:
        return None
    return (explanation.model, layer.name, layer.shapes.get("output"), explanation.image.shown.shape, shape)
