"""Grad-CAM (Selvaraju et al. 2017): each channel weighted by its gradient, averaged over
every spatial position (``flatten(2)``, so a 3-D map needs no code of its own).

    weights_c = mean over positions of dS/dA_c;  map = ReLU(sum_c weights_c * A_c)
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method

__all__ = ["gradcam"]


@register_method("gradcam", needs_gradients=True)
def gradcam(ctx: MethodContext):
    """Grad-CAM: channels weighted by their spatially averaged gradient."""
    activations, grads = ctx.activations, ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    weights = grads.flatten(2).mean(-1)
    return _weighted(weights, activations)


def _weighted(weights, activations):
    """ReLU(sum_c weights[n, c] * activations[n, c]), for any number of spatial dimensions."""
    spread = weights.reshape(*weights.shape, *([1] * (activations.dim() - 2)))
    return (spread * activations).sum(dim=1).clamp(min=0)
