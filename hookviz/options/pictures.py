"""Which pictures to draw, and how (``PictureOptions``, ``ChannelSelection``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hookviz.errors import UsageError, arg
from hookviz.options.base import ask, set_field

__all__ = ["DEFAULT_CLIP", "MAX_TILES", "PIXEL_SIGNS", "RELEVANCE_RULES", "ChannelSelection", "PictureOptions"]

#: At most this many tiles in a channel grid: 512 one-inch tiles are already a 23-inch square.
MAX_TILES = 512
#: How a map of the input is drawn (``hookviz.render.pixel_scale``): |v| (captum's
#: ``absolute_value``), max(v, 0) or v; and the per cent of its total clipped (``outlier_perc``).
PIXEL_SIGNS = ("absolute", "positive", "all")
DEFAULT_CLIP = 2.0
#: How a channel's contribution to a class's score is computed (``hookviz.concepts.relevance``), the default first.
RELEVANCE_RULES = ("gradient-x-activation", "lrp")


@dataclass(frozen=True)
class ChannelSelection:
    """The channels a grid shows: the ``count`` most active, or every index in ``ranges``
    (inclusive pairs). Kept as ranges, so ``0-30000000`` costs nothing until a layer's
    real channel count bounds it."""

    count: int | None = 64
    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, value) -> "ChannelSelection":
        """``64`` (the most active 64), ``0-15`` or ``3,7,9`` (those channels), or a list of ints.

        Raises:
            UsageError: another form, a count of 0, or a range that runs backwards.
        """
        if isinstance(value, ChannelSelection):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        elif isinstance(value, str):
            text = value.strip()
        else:
            return cls(count=None, ranges=tuple((int(v), int(v)) for v in value))
        if text.isdigit():
            if int(text) < 1:
                raise UsageError(f"{arg('channels', text)}: a count must be 1 or more; for channel 0 alone write 0-0")
            return cls(count=int(text))
        ranges = []
        try:
            for part in filter(None, (p.strip() for p in text.split(","))):
                start, _, end = part.partition("-")
                low, high = int(start), int(end) if end else int(start)
                if low < 0 or high < low:
                    raise ValueError
                ranges.append((low, high))
        except ValueError:
            ranges = []
        if not ranges:
            raise UsageError(f"{arg('channels', text)}: expected a count (64), a range (0-15) or a list (3,7,9)")
        return cls(count=None, ranges=tuple(ranges))

    def __str__(self) -> str:
        if self.count is not None:
            return str(self.count)
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges)

    def indices(self, available: int) -> list[int]:
        """The listed channels that exist among ``available``, in order, without repeats."""
        chosen: dict[int, None] = {}
        for low, high in self.ranges:
            chosen.update(dict.fromkeys(range(low, min(high, available - 1) + 1)))
        return list(chosen)


def _default_pictures() -> tuple[str, ...]:
    return ask("default_pictures")


@dataclass(frozen=True)
class PictureOptions:
    """Which pictures to draw per image and layer, and how.

    Attributes:
        pictures: groups of picture kinds (``hookviz.render.kinds``): some of ``summary``,
            ``channels``, ``cam`` (the default) or a registered kind's (``()`` or ``"none"``: none).
        channels: the channels of the grid (``ChannelSelection.parse`` forms).
        scale: ``tile`` (each tile its own colour scale) or ``shared`` (one for all).
        grad_channels: also draw the grid of ``grad_output``.
        pixel_clip: maps of the input (``pixel_maps.png``): the per cent of a map's total |value|
            held by its largest values, clipped to the colour scale's end (captum's ``outlier_perc``;
            0 to under 100, 2 by default).
        pixel_sign: maps of the input: ``absolute`` (|value|, captum's default), ``positive`` or ``all``.
        top_channels: per layer, a picture of the N channels that gave most to the target
            (``hookviz.concepts.glocal``; 0: none).
        atlas: the atlas folder (``hookviz atlas --out``) whose examples those channels show, or ``None``.
        relevance_rule: how a channel's contribution is computed (``RELEVANCE_RULES``).
        kinds: the picture kinds these options ask for, in drawing order (set from the others;
            they travel with the options to the render workers).
    """

    pictures: tuple[str, ...] = field(default_factory=_default_pictures)
    channels: ChannelSelection = field(default_factory=ChannelSelection)
    scale: str = "tile"
    grad_channels: bool = False
    pixel_clip: float = DEFAULT_CLIP
    pixel_sign: str = "absolute"
    top_channels: int = 0
    atlas: Path | None = None
    relevance_rule: str = RELEVANCE_RULES[0]
    kinds: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        pictures = self.pictures
        if isinstance(pictures, str) and not pictures.strip():  # an unset "$PICTURES": not none, silently
            raise UsageError(f"{arg('pictures', pictures)}: give picture kinds separated by commas (summary,cam), or none")
        if isinstance(pictures, str):
            pictures = tuple(p.strip() for p in pictures.split(",") if p.strip())
        pictures = tuple(dict.fromkeys(pictures or ()))
        if pictures == ("none",):
            pictures = ()
        groups = ask("picture_groups")
        for picture in pictures:
            if picture not in groups:
                raise UsageError(f"{arg('pictures', picture)}: choose from {', '.join(groups)}, or none")
        set_field(self, "pictures", pictures)
        set_field(self, "channels", ChannelSelection.parse(self.channels))
        if self.scale not in ("tile", "shared"):
            raise UsageError(f"{arg('scale', self.scale)}: choose tile or shared")
        _check_pixels(self.pixel_clip, self.pixel_sign)
        _check_top_channels(self)
        set_field(self, "kinds", ask("picture_kinds", self))


def _check_top_channels(options: PictureOptions) -> None:
    """Raise UsageError for a count below 0, an atlas folder without atlas.json or without a count,
    or an unknown rule."""
    count = options.top_channels
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise UsageError(f"{arg('top_channels', count)}: give how many channels to show, 1 or more (0: none)")
    if options.relevance_rule not in RELEVANCE_RULES:
        raise UsageError(f"{arg('relevance_rule', options.relevance_rule)}: choose {' or '.join(RELEVANCE_RULES)}")
    if options.atlas is None:
        return
    atlas = Path(options.atlas)
    set_field(options, "atlas", atlas)
    if count == 0:  # else it would be read by nothing, silently
        raise UsageError(
            f"{arg('atlas', str(atlas))}: its examples are shown beside {arg('top_channels', 'N')}'s channels; "
            f"add {arg('top_channels', 'N')}"
        )
    if not (atlas / "atlas.json").is_file():
        raise UsageError(f"{arg('atlas', str(atlas))}: holds no atlas.json; make the atlas first (hookviz atlas --out {atlas})")


def _check_pixels(clip, sign) -> None:
    """Raise UsageError for a clip that is no per cent from 0 to under 100, or an unknown sign."""
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0 <= clip < 100:
        raise UsageError(
            f"{arg('pixel_clip', clip)}: the per cent of a map's total held by its largest values, clipped: "
            "from 0 (none) to under 100; 2 by default"
        )
    if sign not in PIXEL_SIGNS:
        raise UsageError(f"{arg('pixel_sign', sign)}: choose {', '.join(PIXEL_SIGNS)}")
