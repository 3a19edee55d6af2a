"""Which layers to record (``LayerOptions``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.options.base import set_field

__all__ = ["LAYOUT_CHOICES", "LayerOptions"]

#: How a 4-D map that reads both ways, and whose order nothing settles, is read (``--layout``).
LAYOUT_CHOICES = ("auto", "nchw", "nhwc")


@dataclass(frozen=True)
class LayerOptions:
    """Which layers to record: dotted paths and globs, and module classes.

    With neither, hookviz picks the usual CAM layer and says which and why.

    Attributes:
        layout: how to read a 4-D map whose shape fits channels-first and channels-last
            alike (1x96x96x96) when neither the model nor the ops that made it say which:
            ``nchw`` or ``nhwc``; ``auto`` leaves it undrawn, with a note.
    """

    layers: tuple[str, ...] = ()
    layer_types: tuple[str, ...] = ()
    layout: str = "auto"

    def __post_init__(self):
        for name in ("layers", "layer_types"):
            value = getattr(self, name)
            if value is None:
                value = ()
            values = (value,) if isinstance(value, str) or not isinstance(value, Iterable) else tuple(value)
            for item in values:
                if not isinstance(item, str) or not item.strip():
                    raise UsageError(f"{arg(name, item)}: give a layer path such as layer3.-1")
            set_field(self, name, tuple(v.strip() for v in values))
        if self.layout not in LAYOUT_CHOICES:
            raise UsageError(f"{arg('layout', self.layout)}: choose {', '.join(LAYOUT_CHOICES)}")

    @property
    def given(self) -> bool:
        return bool(self.layers or self.layer_types)
