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
            along = (-1,) + (1,) * (inputs.dim() - 1)  # a photo's (steps, 1, 1, 1), a signal's or a clip's too
            path = start + alphas_t.reshape(along) * (inputs[n : n + 1] - start)
            grads = gradient(path, torch.full((steps,), n, dtype=torch.long))
            averaged = (grads * weights_t.reshape(along)).sum(dim=0)
            maps.append(averaged * (inputs[n] - start[0]).float())
    return torch.stack(maps)


def gauss_legendre(steps: int) -> tuple[list[float], list[float]]:
    """The nodes in [0, 1] and weights (summing to 1) of ``steps``-point Gauss-Legendre."""
    import numpy as np

    nodes, weights = np.polynomial.legendre.leggauss(steps)
    return list(0.5 * (1 + nodes)), list(0.5 * weights)


def baseline(image, which: str):
    """The baseline of one input (1, C, *spatial): a photo's (1, C, H, W), a signal's (1, C, L) or
    a clip's (1, C, T, H, W): ``zero``, ``blur`` (a Gaussian along each spatial axis in turn, of
    sigma a tenth of the shortest; a clip's frames each blurred on their own, not across time) or
    ``mean`` (per channel over the whole input)."""
    import torch
    import torch.nn.functional as F

    spatial = tuple(range(2, image.dim()))
    if which == "zero":
        return torch.zeros_like(image)
    if which == "mean":
        return image.mean(dim=spatial, keepdim=True).expand_as(image).clone()
    blurred_axes = spatial[-2:] if image.dim() == 5 else spatial  # a clip: each frame, not across time
    sides = [image.shape[axis] for axis in blurred_axes]
    sigma = max(0.1 * min(sides), 0.5)
    radius = min(math.ceil(3 * sigma), min(sides) - 1)
    offsets = torch.arange(-radius, radius + 1, dtype=image.dtype, device=image.device)
    kernel = torch.exp(-(offsets**2) / (2 * sigma**2))
    kernel = (kernel / kernel.sum()).reshape(1, 1, -1)
    blurred = image
    for axis in blurred_axes:  # separable: one axis at a time (a photo's rows, then its columns)
        moved = blurred.movedim(axis, -1)
        rows = F.pad(moved.reshape(-1, 1, moved.shape[-1]), (radius, radius), mode="reflect")
        blurred = F.conv1d(rows, kernel).reshape(moved.shape).movedim(-1, axis)
    return blurred
