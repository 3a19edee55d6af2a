"""Score-CAM (Wang et al. 2020): each channel weighted by the target's score on the input
masked by that channel, with no gradient.

    M_c = the channel's map upsampled to the input (bilinear), scaled to 0..1
    weights = softmax over channels of S(input * M_c)
    map = ReLU(sum_c weights_c * A_c)

The masked inputs go through the model in batches of ``RESCORING_BATCH`` under
``torch.inference_mode`` (fewer where the memory budget, ``hookviz.budget``, holds fewer),
counted as work (``hookviz.workload``). A channel whose map is constant masks the input to zeros
(pytorch-grad-cam scales it as (A - min) / (max - min + 1e-8)): those are scored once per
image; so is each group of channels whose maps, scaled to 0..1, are equal (a sparse late
layer has many that are one at a single position). The softmax makes the paper's
subtraction of the baseline's score unnecessary.
"""

from __future__ import annotations

from hookviz.errors import UsageError, arg
from hookviz.methods.base import RESCORING_BATCH, MethodContext, register_method
from hookviz.methods.time_weights import weighted
from hookviz.workload import work

__all__ = ["scorecam", "upsampled"]

#: Maps spanning at least this much share a score when they are equal scaled to 0..1.
_SHARED_RANGE = 1e-4


@register_method("scorecam", needs_gradients=False, needs_rescoring=True, needs_input=True)
def scorecam(ctx: MethodContext):
    """Score-CAM: channels weighted by the softmax of the score of the input each one masks."""
    import torch

    activations, inputs = ctx.activations, ctx.inputs
    assert inputs is not None and ctx.score is not None  # needs_input, needs_rescoring: the pass gives them
    _check_dimensions(ctx.layer, activations, inputs)
    count, channels = activations.shape[:2]
    flat = activations.flatten(2)
    constant = flat.amax(-1) == flat.amin(-1)
    scores = torch.zeros(count, channels, dtype=torch.float32, device=activations.device)
    if bool(constant.any()):  # masked to zeros: one score per image serves them all
        blank = ctx.score(torch.zeros_like(inputs)).to(scores.device)
        scores = torch.where(constant, blank[:, None], scores)
    images, kept, same = _distinct_masks(flat, constant)
    with work(f"scorecam at {ctx.layer}", len(images), "masked passes", count, fed=True):  # ctx.score's passes count
        for start in range(0, len(images), RESCORING_BATCH):
            rows, which = images[start : start + RESCORING_BATCH], kept[start : start + RESCORING_BATCH]
            masks = upsampled(activations[rows, which][:, None], inputs.shape[2:])
            low = masks.flatten(1).amin(-1).reshape(-1, *[1] * (masks.dim() - 1))
            high = masks.flatten(1).amax(-1).reshape(-1, *[1] * (masks.dim() - 1))
            masks = (masks - low) / (high - low + 1e-8)
            scores[rows, which] = ctx.score(inputs[rows] * masks.to(inputs.dtype), rows).to(scores.device)
    for image, channel, first in same:  # a map that scales another's masks the input as that one does
        scores[image, channel] = scores[image, first]
    weights = torch.softmax(scores.double(), dim=1).to(activations.dtype)
    return weighted(weights, activations)


def _distinct_masks(flat, constant):
    """The (image, channel) pairs to score: each image's non-constant channels, less those
    whose map, scaled to 0..1, equals an earlier channel's (the upsampled masks are then
    equal too: upsampling is linear); and, per left-out pair, the channel it copies."""
    import torch

    images, kept, same = [], [], []
    low, high = flat.amin(-1, keepdim=True), flat.amax(-1, keepdim=True)
    scaled = (flat - low) / (high - low).clamp(min=torch.finfo(flat.dtype).tiny)
    # A map whose values span less than _SHARED_RANGE is scored on its own: the peers' 1e-8 in
    # (A - min) / (max - min + 1e-8) makes its mask measurably fainter than a wider map's.
    alone = (high - low)[..., 0] < _SHARED_RANGE
    scaled = torch.where(alone[..., None], torch.arange(flat.shape[1], dtype=flat.dtype, device=flat.device)[:, None] + 2, scaled)
    for image in range(flat.shape[0]):
        channels = (~constant[image]).nonzero()[:, 0]
        if len(channels) == 0:
            continue
        _, inverse = torch.unique(scaled[image, channels], dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), -1, dtype=torch.long)
        for position, group in enumerate(inverse.tolist()):
            channel = int(channels[position])
            if first[group] < 0:
                first[group] = channel
                images.append(image)
                kept.append(channel)
            else:
                same.append((image, channel, int(first[group])))
    as_long = dict(dtype=torch.long, device=flat.device)
    return torch.tensor(images, **as_long), torch.tensor(kept, **as_long), same


def upsampled(maps, size):
    """(M, 1, *spatial) maps resized to ``size``: bilinear (linear for 1-D, trilinear for 3-D), corners not aligned."""
    import torch.nn.functional as F

    mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)]
    return F.interpolate(maps, size=tuple(size), mode=mode, align_corners=False)


def _check_dimensions(layer: str, activations, inputs) -> None:
    spatial, input_spatial = activations.shape[2:], inputs.shape[2:]
    if len(spatial) != len(input_spatial) or len(spatial) not in (1, 2, 3):
        raise UsageError(
            f"{arg('cam', 'scorecam')}: {layer}'s maps have {len(spatial)} spatial dimensions and the input "
            f"{len(input_spatial)}, so they cannot mask it; choose a gradient method for this layer"
        )
