"""Guided Grad-CAM (Selvaraju et al. 2017): guided backprop times the layer's Grad-CAM,
upsampled to the input (bilinear, corners not aligned, as the paper; captum's
``GuidedGradCam`` takes the mode as ``interpolate_mode``, nearest by default). A map at
the input's resolution, one value per input channel:

    map = guided_backprop(x) * upsample(ReLU(sum_c mean_xy(dS/dA_c) A_c))

The layer is the first recorded layer that has a map, in the forward pass's order
(report.json names it).
"""

from __future__ import annotations

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.gradcam import gradcam
from hookviz.methods.guided_backprop import needs_relus
from hookviz.methods.scorecam import upsampled

__all__ = ["guided_gradcam"]


@register_method(
    "guided-gradcam",
    needs_gradients=True,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    check=needs_relus("guided-gradcam"),
)
def guided_gradcam(ctx: MethodContext):
    """Guided Grad-CAM: guided backprop times the layer's Grad-CAM, upsampled to the input."""
    inputs = ctx.inputs
    assert inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    cam = gradcam.compute(ctx)
    if cam.dim() + 1 != inputs.dim():  # a map of another rank than the input's: nothing to upsample it onto
        raise UsageError(
            f"{arg('cam', 'guided-gradcam')}: {ctx.layer}'s map is {cam.dim() - 1}-D and the input "
            f"{inputs.dim() - 2}-D; it needs a map of the input's rank; choose integrated-gradients"
        )
    upsampled_cam = upsampled(cam[:, None], inputs.shape[2:]).to(inputs.device)
    return ctx.input_gradient(inputs, guided=True) * upsampled_cam.float()
