"""Which characters the pictures can draw: matplotlib's default font (DejaVu Sans, which has no
CJK or Devanagari), then any installed font of ``FALLBACK_FAMILIES``, from which matplotlib
takes each character the fonts before it lack (its font fallback, a list of families).

A render worker draws with them (``worker.configure_worker``), without matplotlib's warning
per missing glyph (37 lines for three Japanese and Hindi prompts); what no font here can draw
is said once per run instead (``undrawn_note``), naming the prompt. Nothing here touches a
caller's process: the fonts are read, matplotlib's settings are left as they are.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

__all__ = ["FALLBACK_FAMILIES", "GLYPH_WARNINGS", "text_families", "undrawable", "undrawn_note"]

#: Fonts that draw scripts DejaVu Sans lacks, as Linux distributions, macOS and Windows name
#: them; the pictures use those installed, in this order.
FALLBACK_FAMILIES = (
    "Noto Sans CJK JP",
    "Noto Sans CJK SC",
    "Noto Sans CJK TC",
    "Noto Sans CJK KR",
    "Source Han Sans",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Droid Sans Fallback",
    "Noto Sans Devanagari",
    "Lohit Devanagari",
    "Noto Sans",
    "Noto Sans Symbols",
    "Noto Sans Symbols2",
    "Hiragino Sans",
    "PingFang SC",
    "Apple SD Gothic Neo",
    "Kohinoor Devanagari",
    "Microsoft YaHei",
    "Yu Gothic",
    "Malgun Gothic",
    "Nirmala UI",
    "Arial Unicode MS",
)

#: matplotlib's warnings for text its fonts cannot draw, one per glyph (``undrawn_note`` says it once).
GLYPH_WARNINGS = (r"Glyph \d+ .*missing from (current )?font", r"Matplotlib currently does not support .* natively")


@functools.lru_cache(maxsize=1)
def text_families() -> tuple[str, ...]:
    """The default font's family, then the installed ones of ``FALLBACK_FAMILIES``."""
    from matplotlib import font_manager

    default = font_manager.get_font(font_manager.findfont(font_manager.FontProperties())).family_name
    installed = {entry.name for entry in font_manager.fontManager.ttflist}
    return (default, *(family for family in FALLBACK_FAMILIES if family in installed and family != default))


@functools.lru_cache(maxsize=1)
def _drawn() -> frozenset[int]:
    """The characters some font of ``text_families`` has."""
    from matplotlib import font_manager

    codes: set[int] = set()
    for family in text_families():
        try:
            path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
        except ValueError:  # listed, yet not found by its name
            continue
        codes.update(font_manager.get_font(path).get_charmap())
    return frozenset(codes)


def undrawable(text: str) -> str:
    """The characters of ``text`` no font of ``text_families`` has, each once, in order;
    spaces and format characters (a zero-width joiner) are never drawn, so never missing."""
    if text.isascii():  # every font has them: no font need be read
        return ""
    drawn, missing = _drawn(), []
    for character in text:
        if character.isspace() or unicodedata.category(character) in ("Cc", "Cf", "Zs"):
            continue
        if ord(character) not in drawn and character not in missing:
            missing.append(character)
    return "".join(missing)


def undrawn_note(prompts: Sequence[str]) -> tuple[str, ...]:
    """The note that the pictures cannot show some prompts' characters (no font here has
    them), naming the first such prompt; ``()`` when every character can be drawn."""
    from hookviz.options.model import prompt_place

    found = [(number, text, undrawable(text)) for number, text in enumerate(prompts, 1)]
    found = [entry for entry in found if entry[2]]
    if not found:
        return ()
    number, text, missing = found[0]
    shown = " ".join(missing[:8]) + (" …" if len(missing) > 8 else "")
    others = {1: "", 2: "; so does 1 other prompt"}.get(len(found), f"; so do {len(found) - 1} other prompts")
    return (
        f"{prompt_place(text, number)} holds characters no font here can draw ({shown}): the pictures show empty "
        f"boxes for them{others}; report.json keeps the prompts whole; install a font that has them (Noto Sans CJK, "
        "Noto Sans Devanagari) for the pictures to show them",
    )
