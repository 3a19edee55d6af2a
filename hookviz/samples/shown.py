"""What a sample that is no photo is drawn as: ``Sample.shown``, the picture its maps are laid
over (``signal_picture``: a 1-D signal)."""

from __future__ import annotations

import numpy as np

__all__ = ["signal_picture"]


def signal_picture(values) -> np.ndarray:
    """A (C, L) signal as an (H, L, 3) uint8 picture: one grey band per channel, top to bottom,
    each from its own minimum (black) to its maximum (white), ``NaN`` black; a band is about
    L / 4 / C rows high, so the picture is about four times as wide as high.

    Args:
        values: the signal, a (C, L) numpy array (or anything ``np.asarray`` takes).
    """
    values = np.nan_to_num(np.asarray(values))
    low, high = values.min(axis=1, keepdims=True), values.max(axis=1, keepdims=True)
    grey = ((values - low) / np.where(high > low, high - low, 1) * 255).round().astype(np.uint8)
    band = max(1, round(values.shape[1] / 4 / values.shape[0]))
    return np.repeat(np.repeat(grey, band, axis=0)[:, :, None], 3, axis=2)
