"""Picture kinds: the one list of the pictures hookviz draws per image and layer.

Everything that names a picture reads it here: which files a run writes, what
``--skip-existing`` expects to find, what the gallery shows and how it labels it, what
TensorBoard logs, and what ``Explanation.figure`` draws. Adding a picture is adding an
entry (and its builder in ``rendering``).

The figure builders' contract
-----------------------------
A builder is called as ``builder(explanation, layer, **options)`` and returns ``None``
when the picture does not apply to this layer (a CAM of a layer with no spatial layout),
or a triple ``(figure, update, changing)``:

* ``figure``: a matplotlib ``Figure`` on the Agg canvas, drawn for this image;
* ``update(explanation, layer)``: draws another image's data into the same figure. It is
  only called for an image whose picture has the same anatomy (``rendering.anatomy``:
  same model, layer, shapes and options), and must change every text and image that
  depends on the data;
* ``changing``: the artists ``update`` changes, which a reused figure redraws over the
  pixels of everything else (matplotlib's blitting), or ``None`` when the figure must be
  redrawn whole each time.

One kind is drawn from a comparison instead of an explanation: ``diff``'s builder takes a
``diffing.ImageDiff`` and one of its ``LayerDiff`` s in their place. No ``pictures`` choice
turns it on; a run draws it as it compares itself with a baseline (``--baseline``), and
``hookviz diff`` draws it into the newer run's folders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import UsageError, arg
from .options import PictureOptions

__all__ = ["PictureKind", "KINDS", "picture_kind", "kinds_for", "INPUT_PICTURE", "PREDICTION_PICTURE"]

#: The photo as the model saw it (the whole photo with ``whole_image``), beside each image's pictures.
INPUT_PICTURE = "input.jpg"
#: A segmentation's mask or a detector's boxes over the photo (one per image, not per layer).
PREDICTION_PICTURE = "prediction.png"


@dataclass(frozen=True)
class PictureKind:
    """One kind of picture.

    Attributes:
        name: its name, and its file name's suffix: ``<layer>.<name>.png``.
        group: the ``pictures`` choice that turns it on (``summary``, ``channels``, ``cam``).
        label: how the gallery captions it.
        builder: the name of its builder in ``hookviz.rendering``, or ``module:function``
            (see the contract above).
        wanted: whether ``PictureOptions`` ask for it, beyond its group being on.
        options: the builder's keyword arguments for those ``PictureOptions``.
        compares: drawn from a comparison of two runs, not from an explanation (``diff``).
    """

    name: str
    group: str
    label: str
    builder: str
    wanted: Callable[[PictureOptions], bool] = lambda pictures: True
    options: Callable[[PictureOptions], dict] = lambda pictures: {}
    compares: bool = False

    def file_name(self, stem: str) -> str:
        return f"{stem}.{self.name}.png"

    def build(self, explanation, layer, **options):
        """The builder's triple, or ``None``."""
        import importlib

        place, _, name = self.builder.rpartition(":")  # "module:function", or a name in rendering
        return getattr(importlib.import_module(place or f"{__package__}.rendering"), name)(explanation, layer, **options)

    def figure(self, explanation, layer, **options):
        """A fresh ``Figure`` of this picture, or ``None`` where it does not apply."""
        built = self.build(explanation, layer, **options)
        return None if built is None else built[0]


def _grid(which: str):
    def options(pictures: PictureOptions) -> dict:
        return {"which": which, "scale": pictures.scale}

    return options


KINDS: tuple[PictureKind, ...] = (
    PictureKind("summary", "summary", "summary", "summary_parts"),
    PictureKind("channels", "channels", "channels", "channels_parts", options=_grid("output")),
    PictureKind(
        "grad_channels", "channels", "gradient channels", "channels_parts",
        wanted=lambda pictures: pictures.grad_channels, options=_grid("grad_output"),
    ),
    PictureKind("cam", "cam", "CAM", "cam_parts"),
    PictureKind("cam_topk", "cam", "top-K CAMs", "cam_topk_parts"),
    # Drawn where the layer's CAM was measured (``TrustOptions``), by ``hookviz.trust.drawing``.
    PictureKind("faithfulness", "cam", "faithfulness", "hookviz.trust.drawing:faithfulness_parts"),
    PictureKind("sanity", "cam", "randomisation check", "hookviz.trust.drawing:sanity_parts"),
    PictureKind("diff", "diff", "change from the baseline", "diff_parts", compares=True),
)

_BY_NAME = {kind.name: kind for kind in KINDS}


def picture_kind(name: str) -> PictureKind:
    """The kind called ``name``. Raises UsageError for another name."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(f"{arg('kind', name)}: choose from {', '.join(_BY_NAME)}") from None


def kinds_for(pictures: PictureOptions) -> list[PictureKind]:
    """The kinds ``pictures`` asks for, in drawing order (never ``diff``, which a comparison draws)."""
    return [kind for kind in KINDS if kind.group in pictures.pictures and kind.wanted(pictures)]
