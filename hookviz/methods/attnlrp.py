"""AttnLRP (Achtibat et al. 2024, ICML) for torchvision's vision transformers, as LXT computes
it in its efficient mode: relevance propagation through modified gradients, so that the
input times its (modified) gradient is the relevance. A map at the input's resolution, one
value per input channel:

    map = x * dS/dx, with, in the backward pass only,
    GELU            the identity rule: the gradient is GELU(x) / (x + 1e-10)
    LayerNorm       the identity rule on the normalisation: no gradient through its standard deviation
    attention       CP-LRP inside it: no gradient through the query and the key (the softmax)
    Linear, Conv2d  zennit's Gamma rule (``linear_gamma``, ``conv_gamma``) in the gradient-times-input frame

LXT applies these by replacing the forward of ``nn.GELU``, ``nn.LayerNorm`` and
``nn.MultiheadAttention`` for the whole process and patching zennit's ``BasicHook``; its
package also imports every language model it covers, which transformers 5 no longer has
(``lxt.efficient`` 2.1 fails to import beside it). hookviz applies the same rules through
hooks on the model's own modules, removed when the pass ends, and a Gamma rule of its own
class: nothing of torch, zennit or the model is changed. The tests hold its maps to LXT's.

The backward pass starts at 1 on the target's score, which the last linear layer's rule
turns into the score itself, so the map's sum is compared with it: each image's
conservation is in its report (``hookviz.methods.relevance``). It costs one forward and one
backward pass.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.hooks import HookSet
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.relevance import require, uncovered, with_figures
from hookviz.options.declared import option

__all__ = ["AttnLrpSettings", "attnlrp", "check_attnlrp", "attnlrp_rules"]


@dataclass(frozen=True)
class AttnLrpSettings:
    """``attnlrp``'s settings: the Gamma rule's share of positive weights at the patch
    embedding's convolution and at the linear layers (two of the values LXT's example tries)."""

    attnlrp_conv_gamma: float = option(0.25, help="attnlrp's Gamma rule share of positive weights at the patch convolution.")
    attnlrp_linear_gamma: float = option(0.05, help="attnlrp's Gamma rule share of positive weights at the linear layers.")

    def __post_init__(self):
        for name in ("attnlrp_conv_gamma", "attnlrp_linear_gamma"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise UsageError(f"{arg(name, value)}: give a number of 0 or more, as 0.25")


def _covers(module) -> bool:
    """Whether AttnLRP's rules (LXT's for torchvision's ViT) cover ``module``."""
    import torch

    kinds = (torch.nn.Conv2d, torch.nn.Linear, torch.nn.LayerNorm, torch.nn.GELU, torch.nn.MultiheadAttention)
    return isinstance(module, kinds) or isinstance(module, (torch.nn.modules.dropout._DropoutNd, torch.nn.Identity))


def check_attnlrp(model) -> None:
    """Raise UsageError when zennit is not installed, or ``model`` is not a torchvision vision
    transformer made of the layers LXT's efficient rules cover."""
    require("zennit", "attnlrp", "attnlrp")
    from torchvision.models.vision_transformer import VisionTransformer

    if not any(isinstance(module, VisionTransformer) for module in model.modules()):
        kind = type(model)
        name = kind.__name__ if kind.__name__ != "VisionTransformer" else f"{kind.__module__}.{kind.__qualname__}"
        raise UsageError(  # timm's class has torchvision's name: its module tells them apart
            f"{arg('cam', 'attnlrp')}: {name} is not torchvision's VisionTransformer, the model LXT's efficient AttnLRP "
            "rules cover; choose chefer or legrad for another transformer, lrp for a CNN, or a gradient method "
            "(integrated-gradients)"
        )
    found = uncovered(model, _covers)
    if found is not None:
        raise UsageError(
            f"{arg('cam', 'attnlrp')}: {type(model).__name__} has a {found[1]} ({found[0]}), a layer type LXT's AttnLRP "
            "rules do not cover; choose a gradient method (integrated-gradients)"
        )


@functools.cache
def _rules():
    """The autograd functions and the Gamma rule AttnLRP's backward pass uses (built once, torch and zennit imported)."""
    import torch
    from zennit.core import ParamMod, stabilize
    from zennit.rules import Gamma

    class IdentityRule(torch.autograd.Function):
        """An element-wise function's output, whose backward hands relevance on unchanged:
        in the gradient-times-input frame, the gradient times output / input."""

        @staticmethod
        def forward(ctx, input, output):
            ctx.save_for_backward(output / (input + 1e-10))  # LXT's epsilon
            return output.clone()

        @staticmethod
        def backward(ctx, grad):
            (ratio,) = ctx.saved_tensors
            return ratio * grad, None

    class GammaTimesInput(Gamma):
        """zennit's Gamma rule in the gradient-times-input frame (LXT's patched BasicHook): the
        gradient times the output is the relevance the rule shares, divided by the input after."""

        def forward(self, module, input, output):
            self.stored_tensors["input"] = input
            self.stored_tensors["output"] = output

        def backward(self, module, grad_input, grad_output):
            relevance_out = grad_output[0] * self.stored_tensors["output"].detach()
            original = self.stored_tensors["input"][0].clone()
            inputs, outputs = [], []
            for in_mod, param_mod, out_mod in zip(self.input_modifiers, self.param_modifiers, self.output_modifiers):
                input = in_mod(original).requires_grad_()
                with ParamMod.ensure(param_mod)(module) as modified, torch.autograd.enable_grad():
                    outputs.append(out_mod(modified.forward(input)))
                inputs.append(input)
            gradients = torch.autograd.grad(outputs, inputs, grad_outputs=self.gradient_mapper(relevance_out, outputs))
            relevance = self.reducer(inputs, gradients) / stabilize(original, epsilon=1e-10)
            return tuple(relevance if given.shape == relevance.shape else None for given in grad_input)

    return IdentityRule, GammaTimesInput


def _gelu(_module, args, output):
    return _rules()[0].apply(args[0], output)


def _layer_norm(module, args, _output):
    x = args[0]
    mean = x.mean(dim=-1, keepdim=True)
    std = (((x - mean) ** 2).mean(dim=-1, keepdim=True) + module.eps).sqrt()
    y = (x - mean) / std.detach()  # the identity rule: no relevance through the standard deviation
    y = y * module.weight if module.weight is not None else y
    return y + module.bias if module.bias is not None else y


def _attention(_module, args, kwargs):
    """CP-LRP: the query and the key, which only the softmax reads, pass no gradient."""
    args = list(args)
    for position, name in ((0, "query"), (1, "key")):
        if len(args) > position:
            args[position] = args[position].detach()
        elif name in kwargs:
            kwargs[name] = kwargs[name].detach()
    return tuple(args), kwargs


def attnlrp_rules(settings: AttnLrpSettings):
    """``within(model)`` for ``input_gradient``: AttnLRP's rules on the model's modules for the passes, removed after."""

    @contextlib.contextmanager
    def within(model):
        import torch
        from zennit.composites import LayerMapComposite

        gamma = _rules()[1]
        layers = [
            (torch.nn.Conv2d, gamma(gamma=settings.attnlrp_conv_gamma)),
            (torch.nn.Linear, gamma(gamma=settings.attnlrp_linear_gamma)),
        ]
        with HookSet() as hooks, LayerMapComposite(layers).context(model):
            for module in model.modules():
                if isinstance(module, torch.nn.GELU):
                    hooks.add(module.register_forward_hook(_gelu))
                elif isinstance(module, torch.nn.LayerNorm):
                    hooks.add(module.register_forward_hook(_layer_norm))
                elif isinstance(module, torch.nn.MultiheadAttention):
                    hooks.add(module.register_forward_pre_hook(_attention, with_kwargs=True))
            yield

    return within


@register_method(
    "attnlrp",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    check=check_attnlrp,
    options=AttnLrpSettings,
)
def attnlrp(ctx: MethodContext):
    """AttnLRP: relevance propagation through a vision transformer, as LXT's efficient mode computes it."""
    inputs, gradient = ctx.inputs, ctx.input_gradient
    assert inputs is not None and gradient is not None  # the pass gives what the method declares
    settings = ctx.settings if ctx.settings is not None else AttnLrpSettings()
    require("zennit", "attnlrp", "attnlrp")
    gradients, scores = gradient(inputs, within=attnlrp_rules(settings), with_scores=True)
    return with_figures(gradients * inputs.float(), scores)
