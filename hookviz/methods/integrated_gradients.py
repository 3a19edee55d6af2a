"""Integrated gradients (Sundararajan et al. 2017): the input's difference from a baseline
times the gradient of the target's score averaged along the straight path between them. A
map at the input's resolution, one value per input channel:

    map = (x - b) * sum_k w_k dS/dx (b + a_k (x - b))

with ``--steps`` nodes ``a_k`` and weights ``w_k`` of the Gauss-Legendre rule on [0, 1],
captum's default. The baseline ``b`` (``--ig-baseline``): ``zero``, zeros in the model's
input space (the mean photo, after normalisation), as captum's default; ``blur``, the input
blurred by a Gaussian of sigma a tenth of its shorter side; ``mean``, each channel's mean.

The steps go through the model in passes of as many rows as the memory budget holds
(``hookviz.budget``), as captum's ``internal_batch_size`` chunks them by hand: 32 steps of a
resnet50 photo at once would hold 3.6 GB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method
from hookviz.options.declared import check_values, option
from hookviz.workload import work

__all__ = ["IGOptions", "IG_BASELINES", "MAX_STEPS", "integrated_gradients", "baseline", "gauss_legendre"]

#: What integrated gradients integrate from (``--ig-baseline``): zeros in the model's input
#: space (captum's default), the photo blurred, or the photo's mean colour.
IG_BASELINES = ("zero", "blur", "mean")
#: At most this many steps (``--steps``): each is a forward and backward pass of every image.
MAX_STEPS = 1024


@dataclass(frozen=True)
class IGOptions:
    """Integrated gradients' settings (``--steps``, ``--ig-baseline``; ``steps=``, ``ig_baseline=``).

    Attributes:
        steps: the nodes of the integral (Gauss-Legendre, as captum's default rule).
        ig_baseline: what the path starts from: ``zero`` (zeros in the model's input space, as
            captum's default), ``blur`` (the input blurred) or ``mean`` (its mean per channel).
    """

    steps: int = option(
        32,
        help=f"Integrated gradients: steps of the integral (Gauss-Legendre, as captum's; 1 to {MAX_STEPS}).",
        low=1,
        high=MAX_STEPS,
    )
    ig_baseline: str = option(
        "zero",
        help="Integrated gradients: integrate from zero (zeros in the model's input space, as captum's), blur (the "
        "input blurred) or mean (its mean colour).",
        choices=IG_BASELINES,
    )

    def __post_init__(self):
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 1 <= self.steps <= MAX_STEPS:
            raise UsageError(
                f"{arg('steps', self.steps)}: integrated gradients takes 1 to {MAX_STEPS} steps (each a forward and "
                "backward pass of every image; 32 by default)"
            )
        check_values(self)


def _empty_path(image, settings: IGOptions) -> str | None:
    """A note when the baseline equals the input (a 1x1 input blurs to itself, a flat one is
    its own mean): the path between them is empty, so the map is zero everywhere."""
    which = settings.ig_baseline
    tolerance = 1e-4 * max(1.0, float(image.abs().max()))
    gaps = {name: float((image - baseline(image, name)).abs().max()) for name in IG_BASELINES}
    if gaps[which] > tolerance:
        return None
    others = [str(arg("ig_baseline", name)) for name, gap in gaps.items() if gap > tolerance]
    advice = f"try {' or '.join(others)}" if others else "so does every other baseline"
    how, zero = ("equals", "zero") if gaps[which] == 0 else ("nearly equals", "close to zero")
    return f"the {which} baseline {how} the input, so integrated gradients are {zero} everywhere; {advice}"


@register_method(
    "integrated-gradients",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    caveat=_empty_path,
    options=IGOptions,
)
def integrated_gradients(ctx: MethodContext):
    """Integrated gradients: the input's difference from a baseline times the path-averaged gradient."""
    import torch

    inputs, gradient = ctx.inputs, ctx.input_gradient
    assert inputs is not None and gradient is not None  # the pass gives what the method declares
    settings = ctx.settings if isinstance(ctx.settings, IGOptions) else IGOptions()
    steps, which = settings.steps, settings.ig_baseline
    alphas, weights = gauss_legendre(steps)
    alphas_t = torch.tensor(alphas, dtype=inputs.dtype, device=inputs.device)
    weights_t = torch.tensor(weights, dtype=torch.float32, device=inputs.device)
    maps = []
    # one image's steps at a time, which ctx.input_gradient takes in passes within the memory budget
    with work("integrated-gradients", len(inputs) * steps, "steps", len(inputs), fed=True):
        for n in range(len(inputs)):
            start = baseline(inputs[n : n + 1], which)
            spread = (-1, *([1] * (inputs.dim() - 1)))  # (steps, 1, ...) for a photo's or a clip's rank
            path = start + alphas_t.reshape(spread) * (inputs[n : n + 1] - start)
            grads = gradient(path, torch.full((steps,), n, dtype=torch.long))
            averaged = (grads * weights_t.reshape(spread)).sum(dim=0)
            maps.append(averaged * (inputs[n] - start[0]).float())
    return torch.stack(maps)


def gauss_legendre(steps: int) -> tuple[list[float], list[float]]:
    """The nodes in [0, 1] and weights (summing to 1) of ``steps``-point Gauss-Legendre."""
    import numpy as np

    nodes, weights = np.polynomial.legendre.leggauss(steps)
    return list(0.5 * (1 + nodes)), list(0.5 * weights)


def baseline(image, which: str):
    """The baseline of one input (1, C, H, W), or a clip's (1, C, T, H, W): ``zero``, ``blur``
    (each frame blurred on its own) or ``mean`` (per channel over the whole input)."""
    import torch
    import torch.nn.functional as F

    if which == "zero":
        return torch.zeros_like(image)
    if which == "mean":
        return image.mean(dim=tuple(range(2, image.dim())), keepdim=True).expand_as(image).clone()
    if image.dim() == 5:  # a clip: its frames as a batch of photos, blurred alike
        frames = image.transpose(1, 2).flatten(0, 1)
        return baseline(frames, which).unflatten(0, (image.shape[0], image.shape[2])).transpose(1, 2).contiguous()
    sigma = max(0.1 * min(image.shape[-2:]), 0.5)
    radius = min(math.ceil(3 * sigma), min(image.shape[-2:]) - 1)
    offsets = torch.arange(-radius, radius + 1, dtype=image.dtype, device=image.device)
    kernel = torch.exp(-(offsets**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    channels = image.shape[1]
    blurred = image
    for shape in ((1, 1, -1, 1), (1, 1, 1, -1)):  # separable: rows, then columns
        padding = (0, 0, radius, radius) if shape[2] == -1 else (radius, radius, 0, 0)
        padded = F.pad(blurred, padding, mode="reflect")
        blurred = F.conv2d(padded, kernel.reshape(shape).expand(channels, 1, *kernel.reshape(shape).shape[2:]), groups=channels)
    return blurred
