"""FEM, the feature explanation method (Fuad et al. 2020, IPTA), as pytorch-grad-cam's ``FEM``
computes it: no gradient; each channel weighted by the share of its positions that stand out,
above its mean by ``--fem-k`` standard deviations (the k-sigma rule):

    w_c = mean over positions of [A_c > mean(A_c) + k std(A_c)]   (std over positions, ddof 0)
    map = ReLU(sum_c w_c A_c)

Any number of spatial dimensions (a clip's (T, H, W) is one set of positions, as the paper's
3-D CNNs read it). The map does not depend on the target: the same for every class.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import weighted
from hookviz.options.declared import check_values, option

__all__ = ["fem", "FEMOptions"]


@dataclass(frozen=True)
class FEMOptions:
    """FEM's setting (``--fem-k``; ``fem_k=`` in ``explain()``)."""

    fem_k: float = option(
        2.0,
        help="FEM: a position stands out in its channel above the channel's mean plus this many standard deviations.",
        low=0.0,
        high=100.0,
    )

    def __post_init__(self):
        check_values(self)


@register_method("fem", needs_gradients=False, class_specific=False, options=FEMOptions)
def fem(ctx: MethodContext):
    """FEM: channels weighted by the share of their positions above mean + k standard deviations."""
    activations = ctx.activations
    k = ctx.settings.fem_k if ctx.settings is not None else FEMOptions().fem_k
    flat = activations.flatten(2).double()
    threshold = flat.mean(-1, keepdim=True) + k * flat.std(-1, correction=0, keepdim=True)
    weights = (flat > threshold).double().mean(-1)
    return weighted(weights, activations.double()).to(activations.dtype)
