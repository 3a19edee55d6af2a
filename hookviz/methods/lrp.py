"""Layer-wise relevance propagation (Bach et al. 2015) for CNNs, by zennit's composites
(Anders et al. 2021): the target's score handed back through the model, layer by layer, by
a rule per layer type, to a map at the input's resolution, one value per input channel.

Two of zennit's composites (``LrpSettings.composite``):

- ``epsilon-plus-flat`` (the default): the Flat rule at the first linear layer, ZPlus at
  the other convolutions, Epsilon at the fully-connected layers;
- ``epsilon-gamma-box``: the ZBox rule at the first layer, Gamma at the other convolutions,
  Epsilon at the fully-connected layers. ZBox needs the lowest and highest values the
  input may take: hookviz gives it each image's own per-channel minimum and maximum (a box
  the input always lies in), so each image's pass is its own.

zennit's canonizers come first: its BatchNorm canonizer merges each BatchNorm into the
convolution before it, and its ResNet canonizer makes a torchvision ResNet block's residual
sum a module of its own (a rule shares relevance between the branches). Both change the
model's modules for the pass: zennit puts every parameter and buffer back when its context
ends (on error too), and its rules' hooks are removed then.

The backward pass starts at the target's score (a classifier's logit), so the map's sum is
compared with it: each image's conservation is in its report
(``hookviz.methods.relevance``). The method costs one forward and one backward pass.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.relevance import require, uncovered, with_figures
from hookviz.options.declared import option

__all__ = ["COMPOSITES", "LrpSettings", "lrp", "check_lrp", "composite_context"]

#: zennit's composites ``lrp`` takes, the default first.
COMPOSITES = ("epsilon-plus-flat", "epsilon-gamma-box")
_GAMMA = 0.25  # zennit's default


@dataclass(frozen=True)
class LrpSettings:
    """``lrp``'s settings.

    Attributes:
        lrp_composite: ``epsilon-plus-flat`` or ``epsilon-gamma-box`` (see the module's docstring).
        lrp_epsilon: the Epsilon rule's stabiliser (zennit's default, 1e-6).
        lrp_gamma: the Gamma rule's share of positive weights, ``epsilon-gamma-box``'s (zennit's default, 0.25).
    """

    lrp_composite: str = option(
        "epsilon-plus-flat", help="lrp's zennit composite: epsilon-plus-flat or epsilon-gamma-box.", choices=COMPOSITES
    )
    lrp_epsilon: float = option(1e-6, help="lrp's Epsilon rule stabiliser (zennit's default).")
    lrp_gamma: float = option(_GAMMA, help="lrp's Gamma rule share of positive weights (epsilon-gamma-box).")

    def __post_init__(self):
        if self.lrp_composite not in COMPOSITES:
            raise UsageError(f"{arg('lrp_composite', self.lrp_composite)}: choose {' or '.join(COMPOSITES)}")
        if not (isinstance(self.lrp_epsilon, (int, float)) and math.isfinite(self.lrp_epsilon) and self.lrp_epsilon > 0):
            raise UsageError(f"{arg('lrp_epsilon', self.lrp_epsilon)}: give a positive number, as 1e-6")
        if not (isinstance(self.lrp_gamma, (int, float)) and math.isfinite(self.lrp_gamma) and self.lrp_gamma >= 0):
            raise UsageError(f"{arg('lrp_gamma', self.lrp_gamma)}: give a number of 0 or more, as 0.25")
        if self.lrp_composite != "epsilon-gamma-box" and self.lrp_gamma != _GAMMA:  # no Gamma rule would read it
            raise UsageError(
                f"{arg('lrp_gamma', self.lrp_gamma)}: only the epsilon-gamma-box composite has a Gamma rule, and "
                f"{arg('lrp_composite', self.lrp_composite)} has none; add {arg('lrp_composite', 'epsilon-gamma-box')} "
                "or drop the option"
            )


def _covers(module) -> bool:
    """Whether zennit's composites have a rule for ``module`` (or its gradient is the rule: pooling by maximum,
    dropout, reshaping, zero padding)."""
    import torch
    from zennit import types

    if isinstance(module, torch.nn.MultiheadAttention):  # zennit would pass it through as an activation
        return False
    kinds = (types.Linear, types.BatchNorm, types.AvgPool, types.MaxPool, types.Activation)
    plain = (torch.nn.modules.dropout._DropoutNd, torch.nn.Flatten, torch.nn.Unflatten, torch.nn.Identity)
    if isinstance(module, torch.nn.modules.padding._ConstantPadNd):  # zeros around: relevance stays on the pixels kept
        return module.value == 0
    return isinstance(module, kinds) or isinstance(module, plain) or _passes_through(module)


def _passes_through(module) -> bool:
    """Whether ``module``, holding no parameters or buffers, returns the very tensor it is given
    (a package's own ``Identity``, as efficientnet_lite_pytorch's): relevance passes it as it is."""
    import torch

    if next(module.parameters(), None) is not None or next(module.buffers(), None) is not None:
        return False
    probe = torch.zeros(1, 1, 1, 1)
    try:
        return module(probe) is probe
    except Exception:  # foreign code that takes no such tensor is no pass-through
        return False


def check_lrp(model) -> None:
    """Raise UsageError when zennit is not installed, or ``model`` has a layer type zennit's composites have no rule for."""
    require("zennit", "lrp", "lrp")
    found = uncovered(model, _covers)
    if found is not None:
        name, kind = found
        raise UsageError(
            f"{arg('cam', 'lrp')}: {type(model).__name__} has a {kind} ({name}), a layer type zennit's LRP rules do not "
            f"cover; {_instead(model)}"
        )


def _instead(model) -> str:
    """What to choose instead of lrp for ``model``: attnlrp covers torchvision's vision transformer
    only (timm's and Hugging Face's it refuses), the attention methods any transformer."""
    from torchvision.models.vision_transformer import VisionTransformer

    modules = list(model.modules())
    if any(isinstance(module, VisionTransformer) for module in modules):
        return "choose attnlrp for this vision transformer, or a gradient method (integrated-gradients)"
    if any("attention" in type(module).__name__.lower() for module in modules):
        return (
            "choose chefer, legrad or rollout for this transformer (attnlrp covers torchvision's VisionTransformer "
            "only), or a gradient method (integrated-gradients)"
        )
    return "choose a gradient method (integrated-gradients)"


@functools.cache
def _canonizers():
    """The canonizers' classes: zennit's BatchNorm merge, and its ResNet blocks' (torchvision's)."""
    from zennit.canonizers import SequentialMergeBatchNorm
    from zennit.torchvision import ResNetBasicBlockCanonizer, ResNetBottleneckCanonizer

    return (SequentialMergeBatchNorm, ResNetBottleneckCanonizer, ResNetBasicBlockCanonizer)


def composite_context(settings: LrpSettings, image=None):
    """``within(model)`` for ``input_gradient``: zennit's composite registered on the model for
    the passes, with fresh canonizers, and removed after; ``image`` (1, C, H, W) bounds ZBox."""
    from zennit.composites import EpsilonGammaBox, EpsilonPlusFlat

    canonizers = [kind() for kind in _canonizers()]
    if settings.lrp_composite == "epsilon-plus-flat":
        composite = EpsilonPlusFlat(epsilon=settings.lrp_epsilon, canonizers=canonizers)
    else:
        low, high = image.amin(dim=(0, 2, 3), keepdim=True), image.amax(dim=(0, 2, 3), keepdim=True)
        composite = EpsilonGammaBox(
            low=low, high=high, epsilon=settings.lrp_epsilon, gamma=settings.lrp_gamma, canonizers=canonizers
        )

    @contextlib.contextmanager
    def within(model):
        with composite.context(model):
            yield

    return within


@register_method(
    "lrp",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    check=check_lrp,
    options=LrpSettings,
)
def lrp(ctx: MethodContext):
    """Layer-wise relevance propagation by zennit's composites (epsilon-plus-flat or epsilon-gamma-box)."""
    import torch

    inputs, gradient = ctx.inputs, ctx.input_gradient
    assert inputs is not None and gradient is not None  # the pass gives what the method declares
    settings = ctx.settings if ctx.settings is not None else LrpSettings()
    require("zennit", "lrp", "lrp")
    if settings.lrp_composite == "epsilon-plus-flat":
        relevance, scores = gradient(inputs, within=composite_context(settings), from_scores=True, with_scores=True)
        return with_figures(relevance, scores)
    found = [  # ZBox's box is each image's own: one pass per image
        gradient(
            inputs[n : n + 1], [n], within=composite_context(settings, inputs[n : n + 1]), from_scores=True, with_scores=True
        )
        for n in range(len(inputs))
    ]
    return with_figures(torch.cat([r for r, _ in found]), torch.cat([s for _, s in found]))
