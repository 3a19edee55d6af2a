"""The ``top_channels`` picture: with ``--top-channels N``, the N channels of the layer that gave
most to the target, each with its share of the score, its map on this photo and its best
examples from an atlas (``--atlas DIR``). The numbers are the pass's (``LayerResult.top_channels``,
a ``hookviz.concepts.glocal.TopChannels``), which draws itself."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["build", "reuse_key", "wanted", "KIND"]


def wanted(pictures) -> bool:
    return pictures.top_channels > 0


def reuse_key(explanation, layer, options: dict):
    """The photo itself: each photo's examples are other crops, so its figure is its own; ``None``
    for a layer without top channels."""
    found = layer.top_channels
    if found is None:
        return None
    return usual_reuse_key(explanation, layer, (explanation.image.source.label, tuple(c.channel for c in found.channels)))


def build(explanation, layer):
    from hookviz.render.figures import photo_of

    found = layer.top_channels
    if found is None:
        return None
    figure = found.figure(photo_of(explanation))

    def update(explanation, layer):  # the reuse key holds the photo: only the same photo's figure comes back
        return None

    return figure, update, None


KIND = register_kind(
    PictureKind(
        "top_channels",
        group="cam",
        label="top channels",
        help="with --top-channels N, the N channels that gave most to the target, with their atlas examples",
        build=build,
        reuse_key=reuse_key,
        wanted=wanted,
        default=True,
        ranks=(2,),
    )
)
