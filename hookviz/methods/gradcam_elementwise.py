"""Grad-CAM element-wise (pytorch-grad-cam's ``GradCAMElementWise``): each position's
activations times their own gradient, each product through a ReLU before the channels are
summed, so a channel whose evidence is negative at a position takes nothing away there:

    map = sum_c ReLU(dS/dA_c * A_c)

HiResCAM (``hirescam``) sums the products first and takes the ReLU after; LayerCAM
(``layercam``) clamps the gradient alone.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method

__all__ = ["gradcam_elementwise"]


@register_method("gradcam-elementwise", needs_gradients=True)
def gradcam_elementwise(ctx: MethodContext):
    """Grad-CAM element-wise: the positive products of activations and their gradients, summed over channels."""
    grads = ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    return (grads * ctx.activations).clamp(min=0).sum(dim=1)
