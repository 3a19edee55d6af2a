"""Deconvolution (Zeiler and Fergus 2014), as captum's ``Deconvolution``: the gradient of the
target's score with respect to the input, where every ReLU passes back the ReLU of the
gradient it receives, wherever its input was (the forward pass's mask is not applied, which
is what sets it apart from guided backprop). A map at the input's resolution, one value per
input channel:

    d/dx through each ReLU = ReLU(g)

hookviz applies the rule to the model's ``nn.ReLU`` modules (as captum, which hooks those
only) through hooks removed when the pass ends (the model is never changed or copied); a
model without one is refused before any image. One forward and one backward pass per image.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from hookviz.errors import UsageError, arg
from hookviz.hooks import HookSet
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.guided_backprop import relu_modules

__all__ = ["deconvolution", "deconvolved_relus", "check_relus"]


def check_relus(model) -> None:
    """Raise UsageError when ``model`` has no ``nn.ReLU`` for deconvolution's rule."""
    if not relu_modules(model):
        raise UsageError(
            f"{arg('cam', 'deconvolution')}: {type(model).__name__} has no nn.ReLU module (its activations are another "
            "function, or F.relu), so deconvolution's rule has nothing to apply to; choose saliency or integrated-gradients"
        )


@register_method(
    "deconvolution",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    check=check_relus,
)
def deconvolution(ctx: MethodContext):
    """Deconvolution: the input gradient, with every ReLU passing back the ReLU of its gradient."""
    assert ctx.inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    return ctx.input_gradient(ctx.inputs, within=deconvolved_relus)


@contextlib.contextmanager
def deconvolved_relus(model) -> Iterator[None]:
    """Within the block, every ``nn.ReLU`` of ``model`` hands back ReLU(g) of the gradient ``g``
    of its output to its input, through forward hooks removed after it."""
    check_relus(model)
    inputs: dict = {}
    with HookSet() as hooks:
        for module in relu_modules(model):
            hooks.add(module.register_forward_pre_hook(functools.partial(_copy_input, inputs)))
            hooks.add(module.register_forward_hook(functools.partial(_deconvolve, inputs)))
        yield


def _copy_input(inputs, module, args):
    inputs[module] = args[0]
    return (args[0].clone(), *args[1:])  # an in-place ReLU then leaves the graph's input as it was


def _deconvolve(inputs, module, _args, output):
    return _deconvolved().apply(inputs.pop(module), output.detach())


@functools.cache
def _deconvolved():
    import torch

    class Deconvolved(torch.autograd.Function):
        """A ReLU's output, whose backward hands the ReLU of its gradient to the ReLU's input."""

        @staticmethod
        def forward(ctx, _x, y):
            return y.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad.clamp(min=0), None

    return Deconvolved
