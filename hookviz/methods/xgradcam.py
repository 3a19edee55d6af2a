"""XGrad-CAM (Fu et al. 2020): each channel weighted by its gradient, averaged with the
channel's own activations as weights (the axioms of sensitivity and conservation):

    weights_c = sum over positions of (A_c / sum_positions(A_c)) dS/dA_c
    map = ReLU(sum_c weights_c * A_c)

The 1e-7 in the denominator is pytorch-grad-cam's, so that the two agree. A clip's weights
pool over the whole clip or each time slice (``--time-weights``, ``hookviz.methods.time_weights``):
with ``frame``, the sums run over each slice's (h, w) and each slice has its own weights_c,t.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import TimeWeightOptions, per_frame, pooled, weighted

__all__ = ["xgradcam"]


@register_method("xgradcam", needs_gradients=True, options=TimeWeightOptions)
def xgradcam(ctx: MethodContext):
    """XGrad-CAM: channels weighted by their gradient averaged over the channel's own activations."""
    activations, grads = ctx.activations, ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    frame = per_frame(ctx)
    sums = pooled(activations, frame).sum(-1)
    weights = pooled(grads * activations, frame).sum(-1) / (sums + 1e-7)
    return weighted(weights, activations)
