"""Grad-CAM (Selvaraju et al. 2017): each channel weighted by its gradient, averaged over
every spatial position (``flatten(2)``, so a 3-D map needs no code of its own).

    weights_c = mean over positions of dS/dA_c;  map = ReLU(sum_c weights_c * A_c)

A clip's map (T, H, W) has two readings of "every position" (``--time-weights``): ``clip``, one
weight per channel over the whole clip, as pytorch-grad-cam and torch-cam weight a 5-D input
(the default); ``frame``, a weight per channel and time slice, averaged over that slice's
(H, W) only, as mmaction2's and SlowFast's video Grad-CAM do:

    weights_c,t = mean over (h, w) of dS/dA_c,t;  map_t = ReLU(sum_c weights_c,t * A_c,t)

The choice is Grad-CAM's own option group: it is how this method weights its channels, not
what the task explains nor how a clip is read, and a map with no time axis (a photo's) reads
both the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.methods.base import MethodContext, register_method
from hookviz.options.declared import check_values, option

__all__ = ["gradcam", "TimeWeightOptions", "TIME_WEIGHTS"]

#: ``--time-weights``: one weight per channel over the clip, or one per channel and time slice.
TIME_WEIGHTS = ("clip", "frame")


@dataclass(frozen=True)
class TimeWeightOptions:
    """Grad-CAM's settings (``--time-weights``; ``time_weights=`` in ``explain()``)."""

    time_weights: str = option(
        "clip",
        help="Grad-CAM of a clip: one weight per channel over the whole clip (clip, as pytorch-grad-cam and torch-cam) "
        "or one per channel and frame of the map (frame, as mmaction2 and SlowFast). A photo's map reads both alike.",
        choices=TIME_WEIGHTS,
    )

    def __post_init__(self):
        check_values(self)


@register_method("gradcam", needs_gradients=True, options=TimeWeightOptions)
def gradcam(ctx: MethodContext):
    """Grad-CAM: channels weighted by their spatially averaged gradient (per time slice with ``frame``)."""
    activations, grads = ctx.activations, ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    per_frame = ctx.settings is not None and ctx.settings.time_weights == "frame" and activations.dim() == 5
    if per_frame:  # (N, C, T, H, W): a weight per (channel, time slice)
        weights = grads.flatten(3).mean(-1)
        return (weights[..., None, None] * activations).sum(dim=1).clamp(min=0)
    weights = grads.flatten(2).mean(-1)
    return _weighted(weights, activations)


def _weighted(weights, activations):
    """ReLU(sum_c weights[n, c] * activations[n, c]), for any number of spatial dimensions."""
    spread = weights.reshape(*weights.shape, *([1] * (activations.dim() - 2)))
    return (spread * activations).sum(dim=1).clamp(min=0)
