"""Grad-CAM++ (Chattopadhyay et al. 2018), with the closed-form alphas of the paper's
exponential-output derivation, as pytorch-grad-cam computes them:

    alpha = g^2 / (2 g^2 + sum_positions(A) g^3);  weights_c = sum_positions(alpha ReLU(g))
    map = ReLU(sum_c weights_c * A_c)

A clip's weights pool over the whole clip or each time slice (``--time-weights``,
``hookviz.methods.time_weights``): with ``frame``, sum_positions(A) and the weights' sum run over
each slice's (h, w), as Grad-CAM++ of that slice alone would.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import TimeWeightOptions, per_frame, pooled, weighted

__all__ = ["gradcam_plus_plus"]


@register_method("gradcam++", needs_gradients=True, options=TimeWeightOptions)
def gradcam_plus_plus(ctx: MethodContext):
    """Grad-CAM++: channels weighted by their positive gradients, each scaled by its alpha."""
    activations, grads = ctx.activations, ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    frame = per_frame(ctx)
    grads2 = grads.pow(2)
    grads3 = grads2 * grads
    sums = pooled(activations, frame).sum(-1)
    sum_activations = sums.reshape(*sums.shape, *([1] * (activations.dim() - sums.dim())))
    denominator = 2 * grads2 + sum_activations * grads3
    alpha = grads2 / (denominator + 1e-6)  # pytorch-grad-cam's epsilon, so the two agree
    alpha = alpha.where(grads != 0, alpha.new_zeros(()))
    weights = pooled(grads.clamp(min=0) * alpha, frame).sum(-1)
    return weighted(weights, activations)
