"""FullGrad (Srinivas and Fleuret 2019, "Full-Gradient Representation for Neural Network
Visualization"): the input's gradient times the input, plus the gradient of the target's score
times the bias of every layer that has one, summed at the input's resolution. A map at the
input's resolution, as pytorch-grad-cam's ``FullGrad`` makes it:

    map = sum_c psi(|dS/dx_c * x_c|) + sum_l sum_c resize(psi(|b_l,c * dS/dz_l,c|))

where ``z_l`` is the output of each ``nn.Conv2d`` and ``nn.BatchNorm2d`` with a bias, ``b_l`` its
bias (a batch norm's as it acts in eval mode: beta - running_mean * gamma / sqrt(running_var + eps)),
``psi`` scales each image's channel to 0..1 on its own ((m - min) / (max - min + 1e-7), as
pytorch-grad-cam's ``scale_accross_batch_and_channels``) and ``resize`` is bilinear, corners not
aligned (as its ``cv2.resize``). The paper's own code scales each layer's channels together and
aligns corners; hookviz matches pytorch-grad-cam. Scaling to 0..1 comes before resizing, which is
linear, so each layer's channels are summed at its own resolution and resized once.

It is a method of many layers on the seam's ``input`` resolution: ``ctx.input_gradient``'s
``within`` hooks every bias-carrying layer of ``ctx.model`` for its passes (forward hooks that
hook each output's gradient, always removed when the passes end), one image at a time, so
the bias gradients come from the input gradient's own backward pass. ``--layer`` plays no part
(pytorch-grad-cam ignores ``target_layers`` too). Each input channel holds ``1/C`` of the map, so
their sum, which the pixel picture draws, is the map.

A model without such a layer (no ``nn.Conv2d`` or ``nn.BatchNorm2d`` with a bias: a clip model of
``Conv3d``, a model of ``F.conv2d``) is refused; pytorch-grad-cam then silently returns the
input term alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method
from hookviz.workload import work

__all__ = ["fullgrad", "bias_layers", "effective_bias"]


def bias_layers(model) -> list:
    """``model``'s ``nn.Conv2d`` and ``nn.BatchNorm2d`` modules with a bias (a batch norm's
    with running statistics too), in the order ``model.modules()`` gives them."""
    import torch

    def has_bias(module) -> bool:
        if isinstance(module, torch.nn.BatchNorm2d):
            return module.bias is not None and module.running_mean is not None
        return isinstance(module, torch.nn.Conv2d) and module.bias is not None

    return [module for module in model.modules() if has_bias(module)]


def effective_bias(module):
    """The bias ``module`` adds to its output, (C,): a convolution's own; a batch norm's as it
    acts in eval mode (the paper's code, and pytorch-grad-cam's, read it so)."""
    import torch

    if isinstance(module, torch.nn.BatchNorm2d):
        scale = module.weight if module.weight is not None else torch.ones_like(module.running_var)
        return (module.bias - module.running_mean * scale / torch.sqrt(module.running_var + module.eps)).detach()
    return module.bias.detach()


def _check(model) -> None:
    if not bias_layers(model):
        raise UsageError(
            f"{arg('cam', 'fullgrad')}: {type(model).__name__} has no nn.Conv2d or nn.BatchNorm2d with a bias, so FullGrad "
            "would be its input-gradient term alone; choose integrated-gradients or guided-backprop"
        )


@contextlib.contextmanager
def _hooked(layers, records: list) -> Iterator[None]:
    """Within the block, each call of ``layers`` appends ``[module, gradient of its output]`` to
    ``records`` (the gradient once the backward pass reaches it); the hooks go when it ends."""
    handles = []

    def hook(module, _args, output):
        if getattr(output, "requires_grad", False):
            entry = [module, None]
            records.append(entry)
            output.register_hook(lambda grad: entry.__setitem__(1, grad.detach()))

    try:
        for layer in layers:
            handles.append(layer.register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _scaled(maps):
    """(N, C, *spatial) maps, each image's channel scaled to 0..1 on its own (pytorch-grad-cam's eps)."""
    flat = maps.flatten(2)
    low = flat.amin(-1, keepdim=True)
    high = (flat - low).amax(-1, keepdim=True)
    return ((flat - low) / (high + 1e-7)).reshape(maps.shape)


@register_method(
    "fullgrad",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    check=_check,
)
def fullgrad(ctx: MethodContext):
    """FullGrad: |input gradient x input| plus |bias x bias gradient| of every conv and batch norm, each scaled, summed."""
    import torch

    inputs, gradient = ctx.inputs, ctx.input_gradient
    assert inputs is not None and gradient is not None  # the pass gives what the method declares
    if inputs.dim() != 4:
        raise UsageError(f"{arg('cam', 'fullgrad')}: FullGrad sums maps of photos (N, C, H, W), not of {inputs.dim()}-D inputs")
    layers = bias_layers(ctx.model)
    with work("fullgrad", len(inputs), "passes", len(inputs), fed=True):
        maps = [_one_image(inputs, n, gradient, layers) for n in range(len(inputs))]
    stacked = torch.stack(maps).to(inputs.device)
    return (stacked[:, None] / inputs.shape[1]).expand(-1, inputs.shape[1], -1, -1).contiguous()


def _one_image(inputs, n: int, gradient, layers):
    """Image ``n``'s map (H, W): its input term and every hooked call's bias term, from one pass."""
    import torch
    import torch.nn.functional as F

    records: list = []
    with_input = gradient(inputs[n : n + 1], torch.tensor([n]), within=lambda _model: _hooked(layers, records))
    total = _scaled((with_input * inputs[n : n + 1].float()).abs()).sum(dim=1)
    for module, grad in records:
        if grad is None or grad.dim() != 4:
            continue  # a call the score does not depend on
        bias = effective_bias(module).float().to(grad.device)
        summed = _scaled((bias[None, :, None, None] * grad.float()).abs()).sum(dim=1, keepdim=True)
        total = total + F.interpolate(summed, size=tuple(inputs.shape[2:]), mode="bilinear", align_corners=False)[:, 0]
    return total[0]
