"""Render workers: the settings of a process that only draws, and figure reuse.

A worker keeps each layer's figure for the next image of the same reuse key
(``FigureCache``) and redraws only what changes; text is drawn without hinting, from fonts
held in memory. None of this touches a caller's process: only ``configure_worker`` turns it
on, and only hookviz's own render workers call it.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from hookviz.fonts import GLYPH_WARNINGS, text_families
from hookviz.render.figures import ACTIVATION_CMAP, Sheet, encode, png_bytes

__all__ = [
    "configure_worker",
    "drawing_here",
    "fonts_from_memory",
    "fonts_in_memory",
    "warm_up",
    "FigureCache",
    "Reused",
    "worker_cache",
]


def configure_worker() -> None:
    """Settings for a process that only renders (hookviz's workers), never for a user's:
    figures are kept for reuse (``worker_cache``), and text is drawn faster.

    Text is drawn without FreeType's hinting: at 100 dpi it looks the same, and glyphs (the
    channel grid alone has 64 labels) render about twice as fast as with the autohinter.
    Fonts are read from memory (below); an installed font that has what the default lacks
    (CJK, Devanagari) is fallen back to (``fonts.text_families``).
    """
    global _worker_cache
    # Fonts from memory first: the text settings load the default font, and matplotlib keeps
    # each font it loads; one loaded before this stays read through file calls (~15% more
    # CPU per picture).
    _read_fonts_from_memory()
    _text_settings()
    _worker_cache = FigureCache()


@contextlib.contextmanager
def drawing_here() -> Iterator[None]:
    """Draw in this process the pictures a render worker would, pixel for pixel: with
    matplotlib's settings as a fresh process reads them (a style the caller chose is not
    the pictures') and text without hinting. Only for the block: matplotlib's settings are
    the process's, and are restored as they were when it ends. (A run draws in its own
    process when it has one image: a worker would cost more to start than it saves.)
    Fonts read from memory and reused figures change no pixel (tests/test_render.py)."""
    with matplotlib.rc_context(), warnings.catch_warnings():
        matplotlib.rc_file_defaults()
        _text_settings()
        yield


def _text_settings() -> None:
    """How a render worker draws text, in matplotlib's (process-wide) settings and warning
    filters: no hinting, a fallback font for what the default lacks (CJK, Devanagari), and
    no warning per missing glyph (the run says it once: ``fonts.undrawn_note``)."""
    matplotlib.rcParams["text.hinting"] = "no_hinting"
    families = text_families()
    if len(families) > 1:
        matplotlib.rcParams["font.family"] = list(families)
    for pattern in GLYPH_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern, category=UserWarning)


def _read_fonts_from_memory() -> bool:
    """Hand FreeType each font file's bytes instead of the open file, as matplotlib 3.12
    does (matplotlib#32064).

    Before that, FreeType reads every glyph it draws through Python file calls: about ten
    seeks and four reads, each a system call. With the font in memory the same pictures
    cost ~17% less to make (146 -> 121 ms per image, measured), pixel for pixel the same
    (tests/test_render.py). Only for matplotlib before 3.12, and only where its font
    manager still builds fonts the way this expects; otherwise nothing changes.
    """
    import os
    import types

    from matplotlib import font_manager, ft2font

    if matplotlib.__version_info__[:2] >= (3, 12) or getattr(font_manager, "ft2font", None) is not ft2font:
        return fonts_from_memory()
    contents = _FONT_BYTES

    def font_from_memory(path, *args, **kwargs):
        if isinstance(path, (str, bytes, os.PathLike)):
            if path not in contents:
                with open(path, "rb") as stream:
                    contents[path] = stream.read()
            path = io.BytesIO(contents[path])
        return ft2font.FT2Font(path, *args, **kwargs)

    patched = types.ModuleType(ft2font.__name__)
    patched.__dict__.update(ft2font.__dict__)
    patched.FT2Font = font_from_memory
    patched.hookviz_fonts_from_memory = True
    font_manager.ft2font = patched
    return True


#: The font files read into memory in this process (``_read_fonts_from_memory``), by path.
_FONT_BYTES: dict = {}


def fonts_in_memory() -> set[str]:
    """The paths of the fonts this process has loaded from memory."""
    return {str(path) for path in _FONT_BYTES}


def fonts_from_memory() -> bool:
    """Whether this process's font manager reads fonts from memory (``configure_worker``)."""
    from matplotlib import font_manager

    return bool(getattr(getattr(font_manager, "ft2font", None), "hookviz_fonts_from_memory", False))


def warm_up() -> None:
    """Load what the first picture would: fonts, colormaps, the Agg canvas."""
    sheet = Sheet(2.0, 1.0)
    ax = sheet.axes(0.1, 0.3, 1.0, 0.6)
    sheet.figure.colorbar(ax.imshow(np.eye(2), cmap=ACTIVATION_CMAP), cax=sheet.axes(1.3, 0.3, 0.1, 0.6))
    sheet.title("warm-up 0.123")
    png_bytes(sheet.figure)


class Reused:
    """A figure kept for the next images of its layer, and how to draw one image into it.

    Only the artists that change are redrawn (matplotlib's blitting): the rest of the
    figure is drawn once, kept as pixels, and restored under each new image's data.
    ``changing`` is ``None`` for a figure that must be redrawn whole each time.
    """

    def __init__(self, figure: Figure, update, changing: list | None):
        self.figure, self.update, self.changing = figure, update, changing
        self.background = None
        for artist in changing or ():
            artist.set_animated(True)  # left out of the full draw that makes the background

    def png(self) -> bytes:
        if self.changing is None:
            return png_bytes(self.figure)
        canvas = self.figure.canvas
        if self.background is None:
            canvas.draw()
            self.background = canvas.copy_from_bbox(self.figure.bbox)
        else:
            canvas.restore_region(self.background)
        for artist in self.changing:
            self.figure.draw_artist(artist)
        return encode(self.figure)


class FigureCache:
    """Figures kept for the next images of their layer, at most ``size`` of them, the most
    recently used last. Only render workers keep one (``configure_worker``): a caller's
    process never holds figures after a call returns."""

    def __init__(self, size: int = 24):
        self.size = size
        self._entries: dict = {}

    def take(self, key) -> "Reused | None":
        return self._entries.pop(key, None)

    def keep(self, key, entry: "Reused") -> None:
        self._entries[key] = entry
        while len(self._entries) > self.size:
            self._entries.pop(next(iter(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)


_worker_cache: FigureCache | None = None


def worker_cache() -> FigureCache | None:
    """The render worker's cache, or ``None`` in any other process."""
    return _worker_cache
