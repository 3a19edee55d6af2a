"""Smoothing gradient methods over noisy copies of the input (SmoothGrad, Smilkov et al. 2017;
VarGrad, Adebayo et al. 2018), as captum's ``NoiseTunnel`` wraps an attribution method:

    noisy_s = x + eps_s,  eps_s ~ N(0, (noise * (max(x) - min(x)))^2),  s = 1 .. samples
    smoothgrad = mean_s map(noisy_s);  smoothgrad-sq = mean_s map(noisy_s)^2;
    vargrad = mean_s map(noisy_s)^2 - (mean_s map(noisy_s))^2

``--smooth`` wraps every asked method that needs a gradient (``smoothable``): a layer method
(Grad-CAM's family) gets the layer's activations and gradients of each noisy copy, an input
method (integrated gradients, guided backprop) the noisy copy as ``ctx.inputs``; the pass
(``hookviz.explaining.smoothing``) runs the method on each copy as it runs it on the image.
A method that declares this group itself (``smoothgradcam++``) reads ``--smooth-samples``,
``--smooth-noise`` and ``--smooth-seed`` and smooths on its own; ``--smooth`` does not wrap it.

The noise's standard deviation is ``noise`` times each image's range (its max minus its min,
in the model's input space), as the SmoothGrad paper sets it (10 to 20 %); captum's
``stdevs`` is the same number in absolute terms (``noise * range``). Each image's draws come
from a ``torch.Generator`` seeded with ``--smooth-seed`` (never the global one), as one
(samples, C, H, W) draw: what captum's ``torch.normal`` draws for one image after
``torch.manual_seed(seed)``. An image's map does not depend on the batch it is in.

Nothing here imports torch at module level.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.options.declared import check_values, option

__all__ = ["SmoothOptions", "SMOOTHINGS", "MAX_SMOOTH_SAMPLES", "smoothable", "unsmoothable", "noise_draws", "aggregate"]

#: What ``--smooth`` makes of the maps of the noisy copies (``none``: no smoothing).
SMOOTHINGS = ("none", "smoothgrad", "smoothgrad-sq", "vargrad")
#: At most this many noisy copies (``--smooth-samples``): each is a forward and backward pass of every image.
MAX_SMOOTH_SAMPLES = 1000


@dataclass(frozen=True)
class SmoothOptions:
    """Smoothing's settings (``--smooth``, ``--smooth-samples``, ``--smooth-noise``, ``--smooth-seed``).

    Attributes:
        smooth: ``smoothgrad`` (the mean of the noisy copies' maps), ``smoothgrad-sq`` (the mean of
            their squares), ``vargrad`` (their variance), as captum's ``nt_type``; ``none``: no smoothing.
        smooth_samples: how many noisy copies (captum's ``nt_samples``, torch-cam's ``num_samples``).
        smooth_noise: the noise's standard deviation as a share of each image's range (max - min).
        smooth_seed: the seed of the noise's generator.
    """

    smooth: str = option(
        "none",
        help="Smooth every gradient method over noisy copies of the input, as captum's NoiseTunnel: smoothgrad (the "
        "mean of their maps), smoothgrad-sq (the mean of their squares) or vargrad (their variance); none: no smoothing.",
        choices=SMOOTHINGS,
    )
    smooth_samples: int = option(
        8,
        help=f"Smoothing (--smooth, smoothgradcam++): noisy copies of each image (1 to {MAX_SMOOTH_SAMPLES}; each a "
        "forward and backward pass).",
        low=1,
        high=MAX_SMOOTH_SAMPLES,
    )
    smooth_noise: float = option(
        0.15,
        help="Smoothing (--smooth, smoothgradcam++): the noise's standard deviation, as a share of each image's range "
        "(max - min; SmoothGrad's paper: 0.1 to 0.2).",
        low=0.0,
        high=1.0,
    )
    smooth_seed: int = option(0, help="Smoothing (--smooth, smoothgradcam++): the seed of the noise.", low=0, high=2**63 - 1)

    def __post_init__(self):
        samples = self.smooth_samples
        if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SMOOTH_SAMPLES:
            raise UsageError(
                f"{arg('smooth_samples', samples)}: smoothing takes 1 to {MAX_SMOOTH_SAMPLES} noisy copies (each a forward "
                "and backward pass of every image; 8 by default)"
            )
        noise = self.smooth_noise
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 1:
            raise UsageError(
                f"{arg('smooth_noise', noise)}: give the noise's standard deviation as a share of the image's range, "
                "from 0 to 1 (0.15 by default)"
            )
        check_values(self)


def smoothable(method) -> bool:
    """Whether ``--smooth`` wraps ``method``: it needs a gradient (of a layer, or of the input),
    reads no attention and no Hessian (whose passes are bound to the image's own input) and does
    not smooth on its own."""
    bound = method.needs_attention or getattr(method, "needs_hessian", False)
    return (method.needs_gradients or method.needs_input_gradients) and not bound and method.options is not SmoothOptions


def unsmoothable(methods) -> list[str]:
    """The names of ``methods`` that ``--smooth`` does not wrap."""
    return [method.name for method in methods if not smoothable(method)]


def noise_draws(image, settings: SmoothOptions):
    """One image's noise (1, C, ...) -> (samples, C, ...): ``smooth_noise`` times its range as
    the standard deviation, drawn at once from a generator seeded ``smooth_seed`` on the CPU
    (so a GPU run draws what a CPU run draws), in float32, then moved to the image's device and dtype."""
    import torch

    stdev = settings.smooth_noise * float(image.max() - image.min())
    generator = torch.Generator().manual_seed(settings.smooth_seed)
    size = (settings.smooth_samples, *image.shape[1:])
    draws = torch.normal(0.0, stdev, size, generator=generator) if stdev > 0 else torch.zeros(size)
    return draws.to(device=image.device, dtype=image.dtype)


def aggregate(total, squares, count: int, kind: str):
    """What ``kind`` makes of the maps of ``count`` noisy copies, from their sum and sum of squares."""
    mean = total / count
    if kind == "smoothgrad":
        return mean
    if kind == "smoothgrad-sq":
        return squares / count
    return squares / count - mean * mean
