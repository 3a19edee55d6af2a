"""Class activation maps, computed from a layer's recorded output and gradient.

Each method only supplies how a map is formed from activations ``A`` (N, C, h, w) and the
gradient ``G`` of the target's logit with respect to them; methods are looked up by name
in a registry filled by ``register_cam``. Every map is returned raw: after the ReLU, at
the layer's resolution, before any resizing or normalisation.
"""

from __future__ import annotations

from .registry import Registry

__all__ = ["CAMS", "register_cam", "get_cam", "gradcam", "gradcam_plus_plus", "layercam"]

CAMS: Registry = Registry("cam", "method", extra_choices=("none",))
register_cam = CAMS.register


def get_cam(name: str):
    """The CAM function called ``name``. Raises UsageError for an unknown name."""
    return CAMS.get(name)


@register_cam("gradcam")
def gradcam(activations, grads):
    """Grad-CAM (Selvaraju et al. 2017): channels weighted by their spatially averaged gradient."""
    weights = grads.mean(dim=(2, 3), keepdim=True)
    return (weights * activations).sum(dim=1).clamp(min=0)


@register_cam("gradcam++")
def gradcam_plus_plus(activations, grads):
    """Grad-CAM++ (Chattopadhyay et al. 2018), with the closed-form alphas of the paper's
    exponential-output derivation, as pytorch-grad-cam computes them."""
    grads2 = grads.pow(2)
    grads3 = grads2 * grads
    sum_activations = activations.sum(dim=(2, 3), keepdim=True)
    denominator = 2 * grads2 + sum_activations * grads3
    alpha = grads2 / (denominator + 1e-6)  # pytorch-grad-cam's epsilon, so the two agree
    alpha = alpha.where(grads != 0, alpha.new_zeros(()))
    weights = (grads.clamp(min=0) * alpha).sum(dim=(2, 3), keepdim=True)
    return (weights * activations).sum(dim=1).clamp(min=0)


@register_cam("layercam")
def layercam(activations, grads):
    """LayerCAM (Jiang et al. 2021): each position weighted by its own positive gradient."""
    return (grads.clamp(min=0) * activations).sum(dim=1).clamp(min=0)
