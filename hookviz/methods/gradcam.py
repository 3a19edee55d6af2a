"""Grad-CAM (Selvaraju et al. 2017): each channel weighted by its gradient, averaged over
every spatial position (``flatten(2)``, so a 3-D map needs no code of its own).

    weights_c = mean over positions of dS/dA_c;  map = ReLU(sum_c weights_c * A_c)

A clip's map (T, H, W) is weighted over the whole clip or frame by frame (``--time-weights``,
the family's option group, ``hookviz.methods.time_weights``):

    weights_c,t = mean over (h, w) of dS/dA_c,t;  map_t = ReLU(sum_c weights_c,t * A_c,t)
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import TIME_WEIGHTS, TimeWeightOptions, per_frame, pooled, weighted

__all__ = ["gradcam", "TimeWeightOptions", "TIME_WEIGHTS"]


@register_method("gradcam", needs_gradients=True, options=TimeWeightOptions)
def gradcam(ctx: MethodContext):
    """Grad-CAM: channels weighted by their spatially averaged gradient (per time slice with ``frame``)."""
    assert ctx.gradients is not None  # needs_gradients: the pass gives them
    return weighted(pooled(ctx.gradients, per_frame(ctx)).mean(-1), ctx.activations)
