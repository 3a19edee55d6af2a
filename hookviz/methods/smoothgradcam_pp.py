"""Smooth Grad-CAM++ (Omeiza et al. 2019), as torch-cam's ``SmoothGradCAMpp`` computes it:
Grad-CAM++'s alphas from the gradient's second and third powers averaged over noisy copies of
the input (``--smooth-samples``, ``--smooth-noise``, ``--smooth-seed``: ``hookviz.methods.smoothing``),
the image's own gradient and activations for the rest:

    D2 = mean_s (dS/dA(x + eps_s))^2;  D3 = mean_s (dS/dA(x + eps_s))^3
    alpha = D2 / (2 D2 + sum_positions(D3 A) + 1e-8);  weights_c = sum_positions(alpha ReLU(dS/dA))
    map = ReLU(sum_c weights_c A_c)

The denominator sums ``D3 A`` over the positions, as torch-cam does (Grad-CAM++'s paper, and
``gradcam++``, multiply the sum of ``A`` by the position's third power). torch-cam takes ``A`` and
``dS/dA`` of the weights from its last noisy copy (its hooks keep the last pass's), so its map
changes with the order of the same draws; hookviz takes the image's own, as the paper's
formula reads (docs/methods.md; tests/test_smooth.py shows both).
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.smoothing import SmoothOptions, noise_draws

__all__ = ["smoothgradcam_pp"]


@register_method("smoothgradcam++", needs_gradients=True, needs_input=True, needs_layer_gradients=True, options=SmoothOptions)
def smoothgradcam_pp(ctx: MethodContext):
    """Smooth Grad-CAM++: Grad-CAM++'s alphas from the gradient's powers averaged over noisy copies of the input."""
    import torch

    activations, grads, inputs, layer_gradient = ctx.activations, ctx.gradients, ctx.inputs, ctx.layer_gradient
    assert grads is not None and inputs is not None and layer_gradient is not None  # the pass gives what it declares
    settings = ctx.settings if isinstance(ctx.settings, SmoothOptions) else SmoothOptions()
    noise = [noise_draws(inputs[n : n + 1], settings) for n in range(len(inputs))]
    grads2, grads3 = torch.zeros_like(grads), torch.zeros_like(grads)
    for s in range(settings.smooth_samples):
        noisy = torch.stack([inputs[n] + noise[n][s] for n in range(len(inputs))])
        _, noisy_grads = layer_gradient(noisy)
        grads2 += noisy_grads.pow(2)
        grads3 += noisy_grads.pow(3)
    grads2 /= settings.smooth_samples
    grads3 /= settings.smooth_samples
    spatial = (1,) * (activations.dim() - 2)
    spread = (grads3 * activations).flatten(2).sum(-1).reshape(*activations.shape[:2], *spatial)
    alpha = grads2 / (2 * grads2 + spread + 1e-8)  # torch-cam's epsilon, so the two agree
    weights = (alpha * grads.clamp(min=0)).flatten(2).sum(-1)
    return (weights.reshape(*weights.shape, *spatial) * activations).sum(dim=1).clamp(min=0)
