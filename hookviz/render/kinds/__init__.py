"""Picture kinds: the one registry of the pictures hookviz draws per image and layer.

Everything that names a picture reads it here: which files a run writes, what
``--skip-existing`` expects to find, what the gallery shows and how it labels it, what
TensorBoard logs, what ``Explanation.figure`` draws, and the ``pictures`` choices with
their help text. Each kind is one module of this package (``summary``, ``channels``,
``cam``, ``cam_topk``, ``cams``, ``faithfulness``, ``sanity``, ``diff``, a clip's ``frames``,
``time`` and ``animation``, and ``top_channels``) that registers itself;
a new kind is a new module, here or in your own package, that calls ``register_kind``::

    from hookviz.render.kinds import PictureKind, usual_reuse_key, register_kind

    def build(explanation, layer):          # -> (figure, update, changing), or None
        ...

    def reuse_key(explanation, layer, options):
        return usual_reuse_key(explanation, layer, layer.cam.shape if layer.cam is not None else None)

    register_kind(PictureKind("peaks", group="peaks", label="CAM peaks", help="the CAM's peaks",
                              build=build, reuse_key=reuse_key))

Import that module before the run starts (``hookviz run --pictures peaks`` then draws it);
the render workers import it again by name when they unpickle the kind.

The builders' contract
----------------------
A builder is called as ``build(explanation, layer, **options)`` and returns ``None`` when
the picture does not apply to this layer (a CAM of a layer with no spatial layout), or a
triple ``(figure, update, changing)``:

* ``figure``: a matplotlib ``Figure`` on the Agg canvas, drawn for this image;
* ``update(explanation, layer)``: draws another image's data into the same figure. It is
  only called for an image whose picture has the same reuse key, and must change every
  text and image that depends on the data;
* ``changing``: the artists ``update`` changes, which a reused figure redraws over the
  pixels of everything else (matplotlib's blitting), or ``None`` when the figure must be
  redrawn whole each time.

``reuse_key(explanation, layer, options)`` says what must match for a figure to be reused
for another image (``usual_reuse_key`` gives the usual key: model, layer, shapes, photo size, and
what else decides the layout), or ``None`` when the picture does not apply (nothing is
built). Both must be module-level functions: the render workers import them by name.

One kind is drawn from a comparison instead of an explanation (``compares``): ``diff``'s
builder takes a ``compare.measures.ImageDiff`` and one of its ``LayerDiff`` s in their place. No
``pictures`` choice turns it on; a run draws it as it compares itself with a baseline
(``--baseline``), and ``hookviz diff`` draws it into the newer run's folders.

Importing this package is cheap: no kind imports matplotlib (or numpy) before it draws.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from hookviz.errors import UsageError
from hookviz.options.base import answers
from hookviz.registry import Registry, built_in

__all__ = [
    "KINDS",
    "PictureKind",
    "register_kind",
    "kinds",
    "picture_kind",
    "kinds_for",
    "picture_groups",
    "default_groups",
    "groups_help",
    "usual_reuse_key",
    "grid_options",
    "map_rank",
]


def _always(pictures) -> bool:
    return True


def _no_options(pictures) -> dict:
    return {}


def grid_options(which: str, pictures) -> dict:
    """A channel grid's builder options: which tensor, and the scale ``pictures`` asks for."""
    return {"which": which, "scale": pictures.scale}


@dataclass(frozen=True)
class PictureKind:
    """One kind of picture.

    Attributes:
        name: its name, and its file name's suffix: ``<layer>.<name>.png``.
        group: the ``pictures`` choice that turns it on (``summary``, ``channels``, ``cam``).
        label: how the gallery captions it.
        help: what it shows, in a few words (the ``pictures`` help text).
        build: its builder (see the contract above).
        reuse_key: what must match for its figure to be reused (see above).
        wanted: whether ``PictureOptions`` ask for it, beyond its group being on.
        options: the builder's keyword arguments for those ``PictureOptions``.
        default: its group is drawn when ``pictures`` is not given.
        compares: drawn from a comparison of two runs, not from an explanation (``diff``).
        ranks: the spatial dimensions of the maps it draws (2: a photo's; 1: a signal's;
            3: a clip's or a volume's); a layer whose map has another is skipped, with a
            note in report.json (``unfit``), never drawn wrong.
        over_input: it draws the map over the model's input (a CAM over the photo), so the
            map's rank must be the input's: a Conv1d's map of a photo's rows has no place on it.
        inputs: the spatial ranks of the inputs it is for (3: a clip's pictures), ``()``: any.
            For another input it is not drawn and says nothing (a photo's layers get no note
            that a clip's picture was not drawn); its other rules hold within those inputs.
        suffix: its file's suffix (``webp`` for an animation).
        encode: ``encode(explanation, layer, **options) -> bytes | None``, the file's bytes
            when they are not the figure's PNG (an animation); ``build`` still gives the
            figure ``Explanation.figure`` returns.
    """

    name: str
    group: str
    label: str
    help: str
    build: Callable
    reuse_key: Callable
    wanted: Callable = _always
    options: Callable = _no_options
    default: bool = False
    compares: bool = False
    ranks: tuple[int, ...] = (2,)
    over_input: bool = False
    inputs: tuple[int, ...] = ()
    suffix: str = "png"
    encode: Callable | None = None

    def draws(self, layer, explanation=None) -> bool:
        """Whether it draws ``layer``'s map: one of its ``ranks`` (the input's, for a map
        drawn over it), or no map at all (its builder then says whether a vector applies),
        of an input it is for (``inputs``)."""
        return self.applies(explanation) and self.unfit(layer, explanation) is None

    def applies(self, explanation=None) -> bool:
        """Whether it is for ``explanation``'s input (``inputs``); ``True`` without one."""
        shape = getattr(getattr(getattr(explanation, "image", None), "tensor", None), "shape", None)
        return not self.inputs or shape is None or len(shape) - 1 in self.inputs

    def unfit(self, layer, explanation=None) -> str | None:
        """The note for a layer whose map has a rank it does not draw, else ``None`` (also
        for an input it is not for: it says nothing there)."""
        rank = map_rank(layer)
        if rank is None or not self.applies(explanation):
            return None
        if rank not in self.ranks:
            dims = " or ".join(map(str, self.ranks))
            return f"{self.name} picture not drawn: it draws maps of {dims} spatial dimensions, and this map has {rank}"
        shape = getattr(getattr(getattr(explanation, "image", None), "tensor", None), "shape", None)
        given = len(shape) - 1 if shape is not None else None
        if self.over_input and given is not None and given != rank:
            return f"{self.name} picture not drawn: a {rank}-D map has no place over a {given}-D input"
        return None

    def file_name(self, stem: str) -> str:
        return f"{stem}.{self.name}.{self.suffix}"

    def figure(self, explanation, layer, **options):
        """A fresh ``Figure`` of this picture, or ``None`` where it does not apply."""
        if not self.draws(layer, explanation):
            return None
        built = self.build(explanation, layer, **options)
        return None if built is None else built[0]


#: Every picture kind, by name, in drawing order: the order of the modules that register them,
#: so it is not sorted by name.
KINDS: Registry[PictureKind] = Registry(
    "pictures",
    "picture kind",
    modules=built_in(
        "hookviz.render.kinds",
        "summary channels cam cam_topk cams faithfulness sanity diff frames timeline animation top_channels",
    ),
)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def register_kind(kind: PictureKind) -> PictureKind:
    """Add ``kind`` to the pictures hookviz can draw; returns it.

    Raises:
        UsageError: ``kind`` is incomplete (no builder or reuse key, or one a render worker
            cannot import by name), its name or group cannot be a file name's suffix or a
            ``pictures`` choice, or another kind has its name.
    """
    if not isinstance(kind, PictureKind):
        raise UsageError(f"register_kind({kind!r}): expected a hookviz.render.kinds.PictureKind")
    what = f"picture kind {kind.name!r}"
    for name in ("name", "group"):
        value = getattr(kind, name)
        if not isinstance(value, str) or not _NAME.match(value) or value == "none":
            raise UsageError(f"{what}: its {name} {value!r} must be lower-case letters, digits and _ (not none)")
    for name in ("build", "reuse_key", "encode"):
        function = getattr(kind, name)
        if function is None and name == "encode":
            continue
        if not callable(function):
            raise UsageError(f"{what} has no {name}: give it a function (see hookviz.render.kinds)")
        if "<" in getattr(function, "__qualname__", ""):  # a lambda or a nested function
            raise UsageError(f"{what}: its {name} must be a module-level function, which render workers import by name")
    return KINDS.add(kind.name, kind)


def kinds() -> tuple[PictureKind, ...]:
    """Every kind, in drawing order (the order they were registered)."""
    return tuple(KINDS.values())


def picture_kind(name: str) -> PictureKind:
    """The kind called ``name``. Raises UsageError for another name."""
    return KINDS.get(name)


@answers("picture_kinds")
def kinds_for(pictures) -> tuple[PictureKind, ...]:
    """The kinds a ``PictureOptions`` asks for, in drawing order (never one that compares runs)."""
    return tuple(
        kind for kind in KINDS.values() if not kind.compares and kind.group in pictures.pictures and kind.wanted(pictures)
    )


@answers("picture_groups")
def picture_groups() -> tuple[str, ...]:
    """What ``pictures`` may name, in drawing order."""
    return tuple(dict.fromkeys(kind.group for kind in KINDS.values() if not kind.compares))


@answers("default_pictures")
def default_groups() -> tuple[str, ...]:
    """The groups drawn when ``pictures`` is not given."""
    return tuple(dict.fromkeys(kind.group for kind in KINDS.values() if kind.default and not kind.compares))


def groups_help() -> str:
    """Each ``pictures`` choice and what it draws: ``summary (...), channels (...)``."""
    return ", ".join(
        f"{group} ({'; '.join(kind.help for kind in KINDS.values() if kind.group == group and not kind.compares)})"
        for group in picture_groups()
    )


def map_rank(layer) -> int | None:
    """How many spatial dimensions a layer's output map has (``Layout.rank``), or ``None``
    without one (a vector, a map that reads both ways)."""
    layout = getattr(layer, "layout", None)  # a compared layer (``diff``) has none: its maps say their rank
    return layout.rank if layout is not None and layout.spatial else None


def usual_reuse_key(explanation, layer, shape):
    """The usual reuse key of a picture of one explanation's layer: the model, the layer and
    its output's shape (they are in the titles), the photo's size, and ``shape``, what else
    decides the layout; ``None`` (the picture does not apply) when ``shape`` is."""
    if shape is None:
        return None
    return (explanation.model, layer.name, layer.shapes.get("output"), explanation.image.shown.shape, shape)
