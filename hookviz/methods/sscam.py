"""SS-CAM (Wang et al. 2020, "Smoothed Score-CAM"): Score-CAM whose masks get Gaussian noise,
each channel's score averaged over noisy samples, with no gradient. As torch-cam's ``SSCAM``:

    M_c = A_c scaled to 0..1 at the layer ((A - min) / (max - min + 1e-8)), upsampled to the input
    weights = softmax over channels of mean_s S(input * (M_c + noise_s,c))
    map = ReLU(sum_c weights_c * A_c)

with ``noise_s,c`` of standard deviation ``--ss-std`` at the input's resolution (the same for
each of the input's channels), drawn afresh for every sample and channel (``--ss-samples``).
torch-cam's defaults: 35 samples, std 2.0, so the map costs 35 passes a channel.

The noise comes from a ``torch.Generator`` of its own, seeded with ``--ss-seed`` for each image
(the caller's random state is untouched): per image, sample by sample, channel by channel, one
draw of the input's spatial shape each. The noisy inputs go through ``ctx.score`` in batches of
``RESCORING_BATCH`` (fewer where the memory budget, ``hookviz.budget``, holds fewer), counted as
work (``hookviz.workload``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.methods.base import RESCORING_BATCH, MethodContext, register_method
from hookviz.methods.scorecam import _check_dimensions, upsampled
from hookviz.methods.time_weights import weighted
from hookviz.options.declared import check_values, option
from hookviz.workload import work

__all__ = ["SSCAMOptions", "sscam", "unit_scaled"]

#: At most this many noisy samples (``--ss-samples``): each is a pass per channel.
MAX_SAMPLES = 1000


@dataclass(frozen=True)
class SSCAMOptions:
    """SS-CAM's settings (``--ss-samples``, ``--ss-std``, ``--ss-seed``), torch-cam's defaults.

    Attributes:
        ss_samples: noisy samples averaged per channel (each a pass per channel).
        ss_std: the standard deviation of the noise added to each 0..1 mask.
        ss_seed: the seed of the noise (each image's own generator; the caller's random state is untouched).
    """

    ss_samples: int = option(
        35, help=f"SS-CAM: noisy samples per channel (torch-cam's 35; 1 to {MAX_SAMPLES}).", low=1, high=MAX_SAMPLES
    )
    ss_std: float = option(
        2.0, help="SS-CAM: standard deviation of the noise on each 0..1 mask (torch-cam's 2.0).", low=0.0, high=1e3
    )
    ss_seed: int = option(0, help="SS-CAM: seed of the noise, the same for every image.", low=0, high=2**63 - 1)

    def __post_init__(self):
        check_values(self)


@register_method("ss-cam", needs_gradients=False, needs_rescoring=True, needs_input=True, options=SSCAMOptions)
def sscam(ctx: MethodContext):
    """SS-CAM: Score-CAM's channel scores averaged over masks with Gaussian noise (torch-cam's SSCAM)."""
    import torch

    activations, inputs = ctx.activations, ctx.inputs
    assert inputs is not None and ctx.score is not None  # needs_input, needs_rescoring: the pass gives them
    settings = ctx.settings if isinstance(ctx.settings, SSCAMOptions) else SSCAMOptions()
    _check_dimensions(ctx.layer, activations, inputs)
    count, channels = activations.shape[:2]
    scaled, size = unit_scaled(activations), tuple(inputs.shape[2:])
    samples, rows = settings.ss_samples, settings.ss_samples * channels
    scores = torch.zeros(count, rows, dtype=torch.float64)
    with work(f"ss-cam at {ctx.layer}", count * rows, "noisy passes", count, fed=True):  # ctx.score's passes count
        for image in range(count):
            generator = torch.Generator().manual_seed(settings.ss_seed)
            for start in range(0, rows, RESCORING_BATCH):
                which = torch.arange(start, min(start + RESCORING_BATCH, rows)) % channels  # sample-major, as torch-cam draws
                noise = torch.stack([torch.randn(size, generator=generator) for _ in which])
                noisy = upsampled(scaled[image, which][:, None], size)[:, 0] + settings.ss_std * noise.to(scaled.device)
                batch = inputs[image : image + 1] * noisy[:, None].to(inputs.dtype)
                scores[image, start : start + len(which)] = ctx.score(batch, torch.full((len(which),), image)).double().cpu()
    mean = scores.reshape(count, samples, channels).mean(dim=1)
    weights = torch.softmax(mean, dim=1).to(activations.dtype).to(activations.device)
    return weighted(weights, activations)


def unit_scaled(activations):
    """Each channel's map scaled to 0..1 at the layer, as torch-cam's ``_normalize``: its
    minimum subtracted, then divided by its maximum plus 1e-8 (upsampled to the input per batch
    of masks, ``scorecam.upsampled``, as torch-cam upsamples after scaling)."""
    low = activations.flatten(2).amin(-1).reshape(*activations.shape[:2], *[1] * (activations.dim() - 2))
    shifted = activations - low
    return shifted / (shifted.flatten(2).amax(-1).reshape(low.shape) + 1e-8)
