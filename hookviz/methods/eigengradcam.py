"""Eigen-Grad-CAM (pytorch-grad-cam's ``EigenGradCAM``): Eigen-CAM of the activations times
their gradients, so the component follows the target's evidence, not the layer's activity:

    X = (dS/dA * A) as (positions, channels), each channel's mean over positions removed
    map = ReLU(X v_1), v_1 the first right singular vector of X

The SVD's sign is arbitrary and the ReLU keeps one half, so the sign decides the map: as
``eigencam`` does, hookviz takes the sign under which the projection correlates positively with
the mean of ``X``'s channels (the products summed, HiResCAM's map before its ReLU), so the map
lies where the target's evidence is. pytorch-grad-cam keeps whichever sign the SVD returns.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.eigencam import signed_projection

__all__ = ["eigengradcam"]


@register_method("eigengradcam", needs_gradients=True)
def eigengradcam(ctx: MethodContext):
    """Eigen-Grad-CAM: the first principal component of activations times gradients, signed to agree with their mean."""
    grads = ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    return signed_projection(grads * ctx.activations).clamp(min=0)
