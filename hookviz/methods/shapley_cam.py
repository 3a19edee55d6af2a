"""ShapleyCAM (Cai 2025, "CAMs as Shapley value-based explainers"), as pytorch-grad-cam's
``ShapleyCAM`` computes it: Grad-CAM whose gradient is corrected by the second-order term of
the score's Taylor expansion, the channels' Shapley values under a quadratic approximation:

    weights_c = mean over positions of (dS/dA - 1/2 H A)_c,  H the Hessian of S in A
    map = ReLU(sum_c weights_c * A_c)

``H A`` is a Hessian-vector product at the layer (``ctx.hessian_vector``, one extra forward
pass and two backward passes), and the gradient is that pass's own, so that both are of one
score: the task's re-scoring score (a segmentation's mean logit over the class's pixels, where
pytorch-grad-cam's ``SemanticSegmentationTarget`` sums them: its map is hookviz's times the
pixel count, the same map once scaled). A network that is piecewise linear after the layer (ReLU,
max pooling, a linear head: a ResNet's) has ``H = 0`` wherever it is differentiable, so the
map of a class's logit is Grad-CAM's; the term counts after smooth activations (SiLU, GELU,
a softmax), and the paper explains the ReST score (a softmax of the logits) for that reason.
hookviz explains the task's own score (a classifier's logit).
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import weighted

__all__ = ["shapley_cam"]


@register_method("shapley-cam", needs_gradients=True, needs_hessian=True)
def shapley_cam(ctx: MethodContext):
    """ShapleyCAM: channels weighted by their averaged gradient less half the Hessian times the activations."""
    activations = ctx.activations
    assert ctx.hessian_vector is not None  # needs_hessian: the pass gives it
    grads, product = ctx.hessian_vector(activations)  # of one score: a segmentation's mean logit, not the pass's sum
    weights = (grads - 0.5 * product).to(activations.device, activations.dtype).flatten(2).mean(-1)
    return weighted(weights, activations)
