"""Random-CAM (pytorch-grad-cam's ``RandomCAM``): the layer's channels weighted by numbers drawn
uniformly from [-1, 1], with no gradient and no target, a baseline that explains nothing:

    w_c ~ U(-1, 1);  map = ReLU(sum_c w_c A_c)

It exists so that the trust measures have something to be compared with: a method whose
deletion and insertion curves (``--faithfulness``) are no better than Random-CAM's, or whose map
survives the model's randomisation (``--sanity``) no worse, shows nothing of the model.

The weights come from a ``torch.Generator`` seeded by ``--random-cam-seed`` (never the
process's random state): one seed, one map, in any batch; another seed, other weights. Every
image of a run shares the seed's weights (one draw per layer of ``C`` numbers), so an image's
map does not depend on which batch it went in. pytorch-grad-cam draws per image from numpy's
global random state, so its map changes at each call and the process's random state moves.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import weighted
from hookviz.options.declared import check_values, option

__all__ = ["random_cam", "RandomCAMOptions", "random_weights"]


@dataclass(frozen=True)
class RandomCAMOptions:
    """Random-CAM's setting (``--random-cam-seed``; ``random_cam_seed=`` in ``explain()``)."""

    random_cam_seed: int = option(
        0,
        help="Random-CAM (a baseline): the seed of its channel weights, drawn from U(-1, 1); one seed, one map.",
        low=0,
        high=2**31 - 1,
    )

    def __post_init__(self):
        check_values(self)


@register_method("random-cam", needs_gradients=False, class_specific=False, options=RandomCAMOptions)
def random_cam(ctx: MethodContext):
    """Random-CAM: a baseline, channels weighted by seeded draws from U(-1, 1)."""
    activations = ctx.activations
    seed = ctx.settings.random_cam_seed if ctx.settings is not None else RandomCAMOptions().random_cam_seed
    weights = random_weights(seed, activations.shape[1]).to(activations.device, activations.dtype)
    return weighted(weights.expand(activations.shape[0], -1), activations)


def random_weights(seed: int, channels: int):
    """``channels`` weights drawn from U(-1, 1) by a generator seeded with ``seed`` (float64, on the CPU)."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.rand(channels, generator=generator, dtype=torch.float64) * 2 - 1
