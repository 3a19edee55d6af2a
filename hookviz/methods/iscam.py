"""IS-CAM (Naidu et al. 2020, "Integrated Score-CAM"): Score-CAM whose channel scores are
averaged along a path of ever stronger masks, with no gradient. As torch-cam's ``ISCAM``:

    M_c = A_c scaled to 0..1 at the layer ((A - min) / (max - min + 1e-8)), upsampled to the input
    k_i = sum_{j=1..i} j / N   for i = 1..N (``--is-samples``, torch-cam's 10)
    weights = softmax over channels of mean_i S(k_i * (input * M_c))
    map = ReLU(sum_c weights_c * A_c)

The coefficients are torch-cam's code's: they add up, so the last one is (N + 1) / 2 (5.5 of
the input at the default) and the path overshoots the input; torch-cam's docstring writes
``sum_{j=0}^{i-1}``, one step less, which its code does not do. The map costs N passes a channel.

As Score-CAM here (``hookviz.methods.scorecam``), a channel whose map is constant masks the input
to zeros at every step and is scored once per image, and a channel whose map, scaled to 0..1,
equals another's shares its scores. The masked inputs go through ``ctx.score`` in batches of
``RESCORING_BATCH`` (fewer where the memory budget, ``hookviz.budget``, holds fewer), counted as
work (``hookviz.workload``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.methods.base import RESCORING_BATCH, MethodContext, register_method
from hookviz.methods.scorecam import _check_dimensions, _distinct_masks, upsampled
from hookviz.methods.sscam import unit_scaled
from hookviz.methods.time_weights import weighted
from hookviz.options.declared import check_values, option
from hookviz.workload import work

__all__ = ["ISCAMOptions", "iscam", "path_coefficients"]

#: At most this many steps (``--is-samples``): each is a pass per channel.
MAX_SAMPLES = 1000


@dataclass(frozen=True)
class ISCAMOptions:
    """IS-CAM's settings (``--is-samples``; ``is_samples=``).

    Attributes:
        is_samples: the steps of the path of masks (torch-cam's 10), each a pass per channel.
    """

    is_samples: int = option(
        10, help=f"IS-CAM: steps of the path of masks (torch-cam's 10; 1 to {MAX_SAMPLES}).", low=1, high=MAX_SAMPLES
    )

    def __post_init__(self):
        check_values(self)


@register_method("is-cam", needs_gradients=False, needs_rescoring=True, needs_input=True, options=ISCAMOptions)
def iscam(ctx: MethodContext):
    """IS-CAM: Score-CAM's channel scores averaged along a path of growing masks (torch-cam's ISCAM)."""
    import torch

    activations, inputs = ctx.activations, ctx.inputs
    assert inputs is not None and ctx.score is not None  # needs_input, needs_rescoring: the pass gives them
    settings = ctx.settings if isinstance(ctx.settings, ISCAMOptions) else ISCAMOptions()
    _check_dimensions(ctx.layer, activations, inputs)
    count, channels = activations.shape[:2]
    flat = activations.flatten(2)
    constant = flat.amax(-1) == flat.amin(-1)
    scores = torch.zeros(count, channels, dtype=torch.float64)
    if bool(constant.any()):  # masked to zeros at every step: one score per image serves them all
        blank = ctx.score(torch.zeros_like(inputs)).double().cpu()
        scores = torch.where(constant.cpu(), blank[:, None], scores)
    images, kept, same = _distinct_masks(flat, constant)
    coefficients = path_coefficients(settings.is_samples)
    scaled, size = unit_scaled(activations), tuple(inputs.shape[2:])
    with work(f"is-cam at {ctx.layer}", len(images) * len(coefficients), "masked passes", count, fed=True):
        for image in range(count):
            which = kept[images == image]
            rows = [(step, channel) for step in range(len(coefficients)) for channel in which.tolist()]
            total = torch.zeros(channels, dtype=torch.float64)
            for start in range(0, len(rows), RESCORING_BATCH):
                chunk = rows[start : start + RESCORING_BATCH]
                picked = torch.tensor([channel for _, channel in chunk], device=scaled.device)
                along = (-1,) + (1,) * (inputs.dim() - 1)
                steps = torch.tensor([coefficients[step] for step, _ in chunk], dtype=inputs.dtype, device=inputs.device)
                masked = inputs[image : image + 1] * upsampled(scaled[image, picked][:, None], size).to(inputs.dtype)
                found = ctx.score(steps.reshape(along) * masked, torch.full((len(chunk),), image)).double().cpu()
                total.index_add_(0, picked.cpu(), found)
            scores[image, which.cpu()] = total[which.cpu()] / len(coefficients)
    for image, channel, first in same:  # a map that scales another's masks the input as that one does
        scores[image, channel] = scores[image, first]
    weights = torch.softmax(scores, dim=1).to(activations.dtype).to(activations.device)
    return weighted(weights, activations)


def path_coefficients(samples: int) -> list[float]:
    """The masks' coefficients along the path, as torch-cam's code adds them up: (i + 1) / N
    added to the previous one at step i, so 1/N, 3/N, 6/N, ..., (N + 1) / 2."""
    coefficients, coefficient = [], 0.0
    for step in range(samples):
        coefficient += (step + 1) / samples
        coefficients.append(coefficient)
    return coefficients
