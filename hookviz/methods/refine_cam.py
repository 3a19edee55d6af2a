"""RefineCAM ("How to Evaluate and Refine your CAM", arXiv 2605.14641): the Grad-CAM++ maps of
several layers, each scaled to 0..1 and resized to the input, multiplied together, so that an
early layer's fine but noisy map is kept only where the later layers agree. A map at the
input's resolution, as pytorch-grad-cam's ``RefineCAM`` makes it:

    map = prod_l scale(resize(scale(GradCAM++_l)))

``scale`` is (m - min) / (max + 1e-7) per image after the min is taken off, twice as
pytorch-grad-cam's ``BaseCAM`` does it (before and after its resize); ``resize`` is bilinear,
corners not aligned (its ``cv2.resize``); ``GradCAM++_l`` is hookviz's ``gradcam++``, which equals
pytorch-grad-cam's. The layers are every recorded layer with a map (``--layer`` given two or
more times, the forward pass's order), handed to the method as ``ctx.layers``; with one layer the
map is that layer's Grad-CAM++ scaled and resized, as pytorch-grad-cam makes it (torch-cam refuses
fewer than two layers).

torch-cam's ``RefineCAM`` differs in two ways, shown in tests/test_methods_multilayer.py: it
resizes to the largest layer's map rather than the input, and its base ``GradCAMpp`` never divides
its alphas (``alpha[idx][mask].div_(...)`` divides a copy a boolean mask made), so its
Grad-CAM++ weights are sum(g^2 ReLU(g)), not the paper's. hookviz matches pytorch-grad-cam.
Each input channel holds ``1/C`` of the map, so their sum, which the pixel picture draws, is the map.
"""

from __future__ import annotations

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.gradcam_plus_plus import gradcam_plus_plus
from hookviz.methods.scorecam import upsampled

__all__ = ["refine_cam", "scaled"]


def scaled(maps):
    """(N, *spatial) maps, each image's scaled to 0..1 as pytorch-grad-cam's ``scale_cam_image``."""
    flat = maps.flatten(1)
    low = flat - flat.amin(-1, keepdim=True)
    return (low / (low.amax(-1, keepdim=True) + 1e-7)).reshape(maps.shape)


@register_method("refine-cam", needs_gradients=True, needs_input=True, resolution="input")
def refine_cam(ctx: MethodContext):
    """RefineCAM: the product of several layers' Grad-CAM++ maps, each scaled to 0..1 at the input's resolution."""
    import torch

    inputs = ctx.inputs
    assert inputs is not None  # needs_input: the pass gives it
    layers = ctx.layers or (ctx,)  # one layer: its Grad-CAM++ scaled at the input's resolution, as pytorch-grad-cam's
    size = tuple(inputs.shape[2:])
    product = None
    for layer in layers:
        if layer.activations.dim() - 2 != len(size):
            raise UsageError(
                f"{arg('cam', 'refine-cam')}: {layer.layer}'s maps have {layer.activations.dim() - 2} spatial dimensions and "
                f"the input {len(size)}, so they cannot be resized to it; choose gradcam++ for this layer"
            )
        layer_map = scaled(gradcam_plus_plus.function(layer))
        resized = scaled(upsampled(layer_map[:, None], size)[:, 0])
        product = resized if product is None else product * resized
    assert product is not None
    spread = (product / inputs.shape[1]).to(torch.float32)[:, None]
    return spread.expand(-1, inputs.shape[1], *([-1] * len(size))).contiguous()
