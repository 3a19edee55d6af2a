"""Figure primitives: sheets laid out by hand, map panels with honest colorbars, CAM
overlays, PNG encoding. The picture kinds (``hookviz.render.kinds``) build from these.

No pyplot: figures are built with the object API on the Agg canvas, so drawing is safe in
threads and worker processes and leaves no global state behind. Colour is honest:
activations use a sequential colormap, gradients a diverging one centred on zero, and every
panel has a colorbar spanning the true values, so a dead layer never looks like an active one.
"""

from __future__ import annotations

import io

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy

__all__ = [
    "ACTIVATION_CMAP",
    "GRADIENT_CMAP",
    "CAM_CMAP",
    "CAM_ALPHA",
    "DPI",
    "PNG_COMPRESSION",
    "CHAR_INCHES",
    "NO_FINITE",
    "NOT_FINITE_COLOUR",
    "MIN_PANEL",
    "Sheet",
    "ValueBar",
    "MapPanel",
    "Overlay",
    "cam_boxes",
    "cam_label",
    "photo_inches",
    "png_bytes",
    "encode",
    "shape_text",
    "layer_text",
    "fmt",
    "norm_for",
    "upsample",
    "over_photo",
    "photo_of",
    "empty",
    "presented",
    "window_of",
    "flat",
    "clip_tiling",
]

ACTIVATION_CMAP = "viridis"
GRADIENT_CMAP = "RdBu_r"
CAM_CMAP = "jet"
CAM_ALPHA = 0.45


DPI = 100
#: zlib level for the PNGs: 1 encodes these pictures 1.3-4x faster than matplotlib's default 6,
#: for files 10-20% larger (measured on the default pictures; see bench/).
PNG_COMPRESSION = 1


class Sheet:
    """A figure laid out by hand, in inches from its top-left corner.

    Fixed positions instead of a layout engine: the pictures have fixed anatomies, and
    solving constraints at every draw made rendering a third slower.
    """

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self.figure = Figure(figsize=(width, height), dpi=DPI)
        FigureCanvasAgg(self.figure)
        self.heading = None  # the title's Text, once set

    def axes(self, left: float, top: float, width: float, height: float):
        """New axes ``width`` by ``height`` inches whose top-left corner is ``left`` inches from
        the sheet's left edge and ``top`` inches DOWN from its top edge (y grows downward here,
        unlike matplotlib's figure coordinates, which this turns them into)."""
        return self.figure.add_axes(
            (left / self.width, 1 - (top + height) / self.height, width / self.width, height / self.height)
        )

    def title(self, text: str) -> None:
        # Wrapped only when a line would not fit (a long image path): wrapping measures
        # every word at each draw.
        wrap = max(map(len, text.splitlines())) * CHAR_INCHES > self.width - 0.2
        # parse_math=False everywhere: titles carry file, layer and class names, where "$" is
        # a dollar sign, not mathtext ("price $x^{$.png" would fail to draw).
        self.heading = self.figure.suptitle(
            text, x=0.5, y=1 - 0.1 / self.height, ha="center", va="top", fontsize=10, wrap=wrap, parse_math=False
        )

    def inches(self):
        """Figure coordinates in inches from the top-left corner, as ``axes`` places axes."""
        from matplotlib.transforms import Affine2D

        return Affine2D().scale(1 / self.width, -1 / self.height).translate(0, 1) + self.figure.transFigure


#: Width of an average character of the 10-point titles, in inches (DejaVu Sans).
CHAR_INCHES = 0.08


def fitted(text: str, inches: float, points: float = 9) -> str:
    """``text`` broken at spaces (or inside a word too long alone) into lines that fit ``inches``
    at ``points``: a centred title or note wider than its panel would run over the next panel,
    or off the picture's edge."""
    import textwrap

    per_line = max(8, int(inches / (CHAR_INCHES * points / 10)))
    return "\n".join(textwrap.fill(line, per_line, break_on_hyphens=False) for line in text.splitlines())


def photo_inches(photo: np.ndarray, longest: float) -> tuple[float, float]:
    """(width, height) in inches that show ``photo`` one pixel to one dot, its long side kept
    within [2.24 in, ``longest``]: the model's 224-pixel input is drawn as it is, not blown
    up (which only blurs it, and makes every picture slower to draw and to compress)."""
    height, width = photo.shape[:2]
    long_side = min(max(max(height, width) / DPI, 2.24), longest)
    scale = long_side / max(height, width)
    return width * scale, height * scale


def png_bytes(figure: Figure) -> bytes:
    """The figure as an RGB PNG: the pictures are opaque, so the alpha channel would only
    add a quarter more data to filter and compress."""
    figure.canvas.draw()
    return encode(figure)


def encode(figure: Figure) -> bytes:
    """The figure's canvas, as drawn, as a PNG."""
    from PIL import Image

    rgba = figure.canvas.buffer_rgba()
    buffer = io.BytesIO()
    Image.frombuffer("RGBA", (rgba.shape[1], rgba.shape[0]), rgba, "raw", "RGBA", 0, 1).convert("RGB").save(
        buffer, format="png", compress_level=PNG_COMPRESSION, dpi=(figure.dpi, figure.dpi)
    )
    return buffer.getvalue()


def shape_text(shape) -> str:
    return "-" if shape is None else "x".join(str(d) for d in shape)


def layer_text(layer) -> str:
    asked = "" if layer.requested in (layer.name, "(default)") else f" (asked: {layer.requested})"
    default = " (default layer)" if layer.requested == "(default)" else ""
    return f"{layer.name}{asked}{default} [{layer.module_type}]"


def class_specific(name: str) -> bool:
    """Whether method ``name``'s map depends on the target (rollout's and Eigen-CAM's do not)."""
    from hookviz.methods import METHODS

    return name not in METHODS or METHODS.get(name).class_specific


def method_title(explanation, name: str) -> str:
    """``name`` with each setting it was asked with that is not its default (``rollout (head fusion
    max, discard ratio 0.99)``), so that maps of one method under other settings are told apart."""
    from hookviz.methods import METHODS
    from hookviz.options.declared import settings_of

    asked: dict = (explanation.asked or {}).get("settings", {})
    given: dict = next((values for owners, values in asked.items() if name in owners.split(",")), {})
    group = METHODS.get(name).options if name in METHODS else None
    changed = [
        f"{s.name.removeprefix(name + '_').replace('_', ' ')} {given[s.name]}"
        for s in (settings_of(group) if given and group is not None else ())
        if s.name in given and given[s.name] != s.default
    ]
    changed += _smoothed_words(asked, name)
    return f"{name} ({', '.join(changed)})" if changed else name


def _smoothed_words(asked: dict, name: str) -> list[str]:
    """``["smoothgrad of 8 noisy copies"]`` when ``--smooth`` wrapped the method ``name``, else ``[]``."""
    from hookviz.methods import METHODS
    from hookviz.methods.smoothing import smoothable

    smoothing = next((values for values in asked.values() if values.get("smooth", "none") != "none"), None)
    if smoothing is None or name not in METHODS or not smoothable(METHODS.get(name)):
        return []
    return [f"{smoothing['smooth']} of {smoothing['smooth_samples']} noisy copies, noise {smoothing['smooth_noise']}"]


def fmt(value: float) -> str:
    return f"{value:.3g}"


NO_FINITE = "no finite values"
#: Where a map is NaN or infinite: a grey no colormap here uses, not the colour of zero.
NOT_FINITE_COLOUR = "0.55"


def norm_for(values: np.ndarray, signed: bool):
    """The norm that spans ``values``' finite range (centred on zero when ``signed``), and a
    note saying what that range is."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return Normalize(0, 1), NO_FINITE
    low, high = float(finite.min()), float(finite.max())
    holes = f", {values.size - finite.size} not finite (grey)" if finite.size < values.size else ""
    if low == high:
        # A flat map: keep the colorbar readable and let the colour carry sign and size.
        limit = abs(low) or 1.0
        note = f"constant {fmt(low)} everywhere{holes}"
        if signed:
            return TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit), note
        return Normalize(min(0.0, low), max(0.0, low) or 1.0), note
    note = f"min {fmt(low)}, max {fmt(high)}{holes}"
    if signed:
        limit = max(abs(low), abs(high))
        return TwoSlopeNorm(vcenter=0.0, vmin=-limit, vmax=limit), note
    return Normalize(low, high), note


class ValueBar:
    """A colorbar drawn once, whose three value labels (bottom, middle, top) change.

    The bar is matplotlib's colorbar of a fixed 0..1 scale with tick marks at 0, 1/2 and 1;
    the labels are Texts of their own beside those marks, so a reused figure redraws three
    labels instead of a whole axis and its locator. The images keep their true norms.
    """

    FRACTIONS = (0.0, 0.5, 1.0)

    def __init__(self, figure: Figure, cax, cmap, label: str = ""):
        self.bar = figure.colorbar(ScalarMappable(norm=Normalize(0, 1), cmap=cmap), cax=cax, ticks=self.FRACTIONS)
        self.bar.ax.set_yticklabels([])
        # Where matplotlib puts tick labels: past the tick (3.5 pt) and its pad (3.5 pt).
        beside = offset_copy(cax.transAxes, figure, x=7, units="points")
        if label:
            # Beyond the widest value label ("-1.23e+04" at 7 pt), which the bar cannot measure.
            self.bar.set_label(label, fontsize=8, parse_math=False)
            cax.yaxis.set_label_coords(1, 0.5, transform=offset_copy(cax.transAxes, figure, x=44, units="points"))
        self.labels = [
            cax.text(1, f, "", transform=beside, fontsize=7, va="center", ha="left", parse_math=False) for f in self.FRACTIONS
        ]

    def set_norm(self, norm) -> None:
        """Label the bar with the values ``norm`` maps to its bottom, middle and top;
        ``None`` leaves it unlabelled (no finite values)."""
        for text, fraction in zip(self.labels, self.FRACTIONS):
            text.set_text("" if norm is None else fmt(float(norm.inverse(fraction))))


class MapPanel:
    """One channel-summed map with its colorbar; ``update`` redraws it in place.

    A 2-D map keeps its image and colorbar between images; a vector (no spatial layout)
    or a missing tensor is simply drawn again.
    """

    def __init__(self, figure: Figure, ax, cax, signed: bool, missing: str):
        self.figure, self.ax, self.cax = figure, ax, cax
        self.signed, self.missing = signed, missing
        self.image = None
        self.bar = None

    def changing(self) -> list | None:
        """The artists that change between images, or ``None`` when the panel is redrawn whole."""
        if self.image is None:
            return None
        return [self.image, *self.ax.spines.values(), self.ax.title, *self.bar.labels]

    def update(self, values: np.ndarray | None, title: str, missing: str | None = None, rank: int | None = None) -> None:
        """Draw ``values``; without them, ``missing`` (else the panel's own words) says why.
        ``rank``: the spatial dimensions of the map (1: drawn as a line over its positions;
        3: its slices along the first axis, tiled), ``None`` for a vector of features."""
        whole = values  # its range, not the gaps between its slices, is what the title says
        if values is not None and values.ndim == 3:
            values, slices = flat(values)
            title = f"{title}\n{fitted(slices, 3.6)}"
        if values is None or values.ndim != 2 or self.image is None:
            # Drawn anew: a missing tensor, a vector, or the first 2-D map.
            self.ax.clear()
            self.cax.clear()
            self.image = self.bar = None
        if values is None:
            self.ax.set_title(title, fontsize=9, parse_math=False)
            self.ax.text(
                0.5,
                0.5,
                missing or self.missing,
                ha="center",
                va="center",
                fontsize=9,
                transform=self.ax.transAxes,
                parse_math=False,
            )
            self.ax.set_axis_off()
            self.cax.set_axis_off()
            return
        norm, note = norm_for(values if whole is None else whole, self.signed)
        # Raised past the colourbar's top value label, which a title wider than its map reaches.
        self.ax.set_title(f"{title}\n{note}", fontsize=9, parse_math=False, pad=10)
        if values.ndim == 1:
            # Lines, not bars: a single spike among 1000 features must stay visible.
            colour = "tab:red" if self.signed else "tab:blue"
            if rank == 1:  # a signal's map: a line over its positions
                self.ax.plot(np.arange(values.size), values, color=colour, linewidth=1.2)
            else:
                self.ax.vlines(np.arange(values.size), 0, values, colors=colour, linewidth=1.0)
            self.ax.set_xlim(-0.5, values.size - 0.5)
            self.ax.axhline(0, color="black", linewidth=0.5)
            self.ax.set_xlabel("position along the signal" if rank == 1 else "feature index", fontsize=8, parse_math=False)
            self.ax.tick_params(labelsize=7)
            self.cax.set_axis_off()
            return
        if self.image is None:  # kept, with its bar, for the next images' maps
            cmap = matplotlib.colormaps[GRADIENT_CMAP if self.signed else ACTIVATION_CMAP]
            self.image = self.ax.imshow(
                values, cmap=cmap.with_extremes(bad=NOT_FINITE_COLOUR), norm=norm, interpolation="nearest"
            )
            self.ax.set_xticks([])
            self.ax.set_yticks([])
            self.bar = ValueBar(self.figure, self.cax, cmap)
        self.image.set_data(values)
        self.image.set_norm(norm)
        self.bar.set_norm(None if note == NO_FINITE else norm)


def upsample(cam: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    image = Image.fromarray(np.asarray(cam, dtype=np.float32), mode="F")
    return np.asarray(image.resize((size[1], size[0]), Image.BILINEAR), dtype=np.float64)


def over_photo(cam: np.ndarray, window, size: tuple[int, int]) -> np.ndarray:
    """The CAM at the photo's ``size`` (height, width). A detector's CAM spans its padded
    input and ``window`` (a ``hookviz.tasks.base.Window``) says where the photo lies in it: the
    CAM is stretched over the whole input, in photo pixels, and the photo's part cut out."""
    if not window:
        return upsample(cam, size)
    full = (max(size[0], round(size[0] / window.height)), max(size[1], round(size[1] / window.width)))
    top = min(full[0] - size[0], round(window.top * full[0]))
    left = min(full[1] - size[1], round(window.left * full[1]))
    return upsample(cam, full)[top : top + size[0], left : left + size[1]]


def flat(values: np.ndarray, gap=np.nan) -> tuple[np.ndarray, str]:
    """A map of any rank as a 2-D picture, and what it shows: a signal's (L,) as a strip one
    value high, a photo's as it is, a clip's (D, H, W) as its slices tiled (at most
    ``anatomy.slices.MAX_SLICES``, NaN between them)."""
    from hookviz.anatomy.slices import tiling

    values = np.asarray(values)
    if values.ndim == 1:
        return values[None, :], "a strip over the signal"
    if values.ndim != 3:
        return values, ""
    tiles = tiling(values.shape)
    return tiles.flat(values[list(tiles.indices)], gap), tiles.brief("slices along the first axis")


def clip_tiling(explanation):
    """How a clip's (or a volume's) frames are tiled in its pictures (``anatomy.slices``),
    or ``None`` for another input."""
    from hookviz.anatomy.slices import tiling

    shape = tuple(np.shape(explanation.image.tensor))
    return tiling(shape[1:]) if len(shape) == 4 else None


def on_photo(cam: np.ndarray, tiles) -> np.ndarray:
    """A CAM of any rank as a 2-D map over the photo it is drawn on: a signal's as a strip
    over its bands, a clip's slices at the frames ``tiles`` shows (blended along the first
    axis as trilinear resizing does), each brought to a frame's size, tiled as the frames."""
    from hookviz.anatomy.slices import along_depth

    cam = np.asarray(cam)
    if cam.ndim == 1:
        return cam[None, :]
    if cam.ndim != 3 or tiles is None:
        return flat(cam)[0]
    slices = along_depth(cam, tiles.depth, tiles.indices)
    return tiles.flat(np.stack([upsample(piece, tiles.tile) for piece in slices]), np.nan)


class Overlay:
    """A CAM drawn over the photo, with an opaque colorbar of the raw values (and, for a
    detection, its box). A clip's CAM (3-D) lies over its frames as ``tiles`` shows them
    (``clip_tiling``); a signal's (1-D) over its bands."""

    def __init__(self, figure: Figure, ax, cax, photo: np.ndarray, cam: np.ndarray, tiles=None):
        from matplotlib.patches import Rectangle

        self.ax = ax
        ax.set_anchor("N")  # a thin photo hangs from the top of its box, level with the colourbar's top
        self.photo = ax.imshow(photo, interpolation="bilinear")
        self.tiles = tiles
        self.heat = ax.imshow(
            upsample(on_photo(cam, tiles), photo.shape[:2]), cmap=CAM_CMAP, alpha=CAM_ALPHA, interpolation="bilinear"
        )
        self.box = ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, edgecolor="white", linewidth=2, visible=False))
        ax.set_axis_off()
        # The colorbar has an opaque scale of its own, so its colours are readable.
        self.bar = ValueBar(figure, cax, CAM_CMAP, cam_label(cam))

    @property
    def changing(self) -> list:
        return [self.photo, self.heat, self.box, self.ax.title, *self.bar.labels]

    def update(self, photo: np.ndarray, cam: np.ndarray, title: str, window=None, box=None, any_class=False) -> None:
        """Draw ``cam`` over ``photo``; ``any_class``: the method's map is the same for every class
        (rollout's, Eigen-CAM's), so an all-zero map says nothing of the class."""
        finite = np.isfinite(cam)
        top = float(cam[finite].max()) if finite.any() else 0.0
        norm = Normalize(0.0, top if top > 0 else 1.0)
        self.photo.set_data(photo)
        self.heat.set_data(np.ma.masked_invalid(over_photo(on_photo(cam, self.tiles), window, photo.shape[:2])))
        self.heat.set_norm(norm)
        self.bar.set_norm(norm if finite.any() else None)
        self.box.set_visible(box is not None)
        if box is not None:
            x0, y0, x1, y1 = box
            self.box.set_bounds(x0, y0, x1 - x0, y1 - y0)
        if not finite.any():
            note = " (no finite values: NaN or Inf)"
        elif not finite.all():
            note = f" ({int((~finite).sum())} values not finite, left out)"
        elif top == 0:
            note = " (all zero)" if any_class else " (all zero: nothing here raises this class)"
        elif cam.size == 1:
            note = " (a 1x1 map: no spatial detail)"
        else:
            note = ""
        if cam.ndim == 3 and self.tiles is not None:
            note += f"\n{self.tiles.brief()}"
        panel = self.ax.get_position(original=True).width * self.ax.figure.get_figwidth()
        self.ax.set_title(fitted(title + note, panel), fontsize=9, parse_math=False)


def cam_label(cam: np.ndarray) -> str:
    return f"CAM (raw, {'x'.join(map(str, cam.shape))} map)"


#: The smallest box a CAM panel gets, in inches: a thin photo hangs centred in it, so the
#: panels' titles have the width of the usual 224-pixel input, and the colourbar the height
#: of its label.
MIN_PANEL = 2.24


def cam_boxes(photo: np.ndarray, cam: np.ndarray, longest: float) -> tuple[float, float]:
    """(width, height) in inches of a CAM panel and its colourbar: the photo's, at least
    ``MIN_PANEL`` wide and as tall as the bar's label (8 pt, vertical) is long."""
    width, height = photo_inches(photo, longest)
    return max(width, MIN_PANEL), max(height, len(cam_label(cam)) * CHAR_INCHES * 0.8 + 0.3)


def photo_of(explanation) -> np.ndarray:
    """The photo a CAM is drawn on: what the model saw, or the whole photo with ``--no-crop``."""
    return explanation.image.whole if explanation.image.whole is not None else explanation.image.shown


def empty(ax, cax, text: str) -> None:
    """A panel with nothing to draw: ``text`` in its place, no axes, no colorbar."""
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, transform=ax.transAxes, parse_math=False)
    ax.set_axis_off()
    cax.set_axis_off()


def presented(explanation):
    """How the task of ``explanation`` is shown (``hookviz.render.presentation``): what its
    pictures say of the target."""
    from hookviz.render.presentation import presentation_of

    return presentation_of(explanation.task)


def window_of(explanation):
    """Where the photo lies in the model's input (a detector's padded batch), or ``None``."""
    prediction = explanation.prediction
    return prediction.window if prediction is not None else None
