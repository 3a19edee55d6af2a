"""XGrad-CAM (Fu et al. 2020): each channel weighted by its gradient, averaged with the
channel's own activations as weights (the axioms of sensitivity and conservation):

    weights_c = sum over positions of (A_c / sum_positions(A_c)) dS/dA_c
    map = ReLU(sum_c weights_c * A_c)

The 1e-7 in the denominator is pytorch-grad-cam's, so that the two agree.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.gradcam import _weighted

__all__ = ["xgradcam"]


@register_method("xgradcam", needs_gradients=True)
def xgradcam(ctx: MethodContext):
    """XGrad-CAM: channels weighted by their gradient averaged over the channel's own activations."""
    activations, grads = ctx.activations, ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    sums = activations.flatten(2).sum(-1)
    weights = (grads * activations).flatten(2).sum(-1) / (sums + 1e-7)
    return _weighted(weights, activations)
