"""What the trust measures take of a map at the input's resolution (guided backprop,
integrated gradients, LRP: one value per input channel and position, ``(C, *spatial)``).

Deletion, insertion, ROAD and the randomisation check rank one value per position, so an
input method's map is first reduced to one relevance map per image, as quantus reduces it:
its ``explain`` sums the attribution over the channel axis (``reduce_axes=[1]``), and its
``MPRT`` then takes the absolute value (``abs=True``, its default). The absolute value
counts evidence against the class as relevant too: integrated gradients' and LRP's negative
relevance is part of what the map says the model used (Adebayo et al. 2018 take the
absolute value of every map they compare). quantus's ``PixelFlipping`` keeps the sign by
default (``abs=False``); hookviz measures one map, the same for every measure, so that a
method's deletion, ROAD and randomisation figures are about the same ranking.

Example::

    relevance(pixel_map.map)   # (H, W) from (C, H, W): |sum over channels|
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["INPUT_LAYER", "REDUCTION", "relevance", "unmeasured"]

#: Where a map at the input's resolution sits in the run's tally and its sentences.
INPUT_LAYER = "the input"

#: How a map at the input's resolution becomes the relevance map the measures rank, in words.
REDUCTION = "|sum over channels| (quantus's explain and MPRT)"


def relevance(pixel_map: np.ndarray) -> np.ndarray:
    """One relevance map ``(*spatial)`` of ``pixel_map`` ``(C, *spatial)``: the absolute value
    of its sum over channels, in float32."""
    import numpy as np

    return np.abs(np.asarray(pixel_map, dtype=np.float64).sum(axis=0)).astype(np.float32)


def unmeasured(pixels, rank: int, explained: bool) -> str | None:
    """Why ``pixels`` (a ``PixelMap``) cannot be measured, in words, or ``None`` when it can:
    no map (its own note says why), nothing explained, a map not finite or not laid over the
    input's ``rank`` spatial dimensions."""
    import numpy as np

    if pixels.map is None:
        return pixels.note or "the method made no map"
    if not explained:
        return "nothing was explained in this image"
    if pixels.map.ndim != rank + 1:
        return f"its map has {pixels.map.ndim - 1} spatial dimensions, the input {rank}"
    if not np.isfinite(pixels.map).all():
        return "its map is not finite (NaN or infinite values)"
    return None
