"""Ablation-CAM (Desai and Ramaswamy 2020): each channel weighted by the drop in the
target's score when the channel is set to zero in the layer's output, with no gradient.

    weights_c = (S - S with A_c = 0) / |S|
    map = ReLU(sum_c weights_c * A_c)

The paper divides by ``S``, not ``|S|``; for a score below zero (a class the model rates
low, a logit of a random model) that flips every weight, and the map then shows what
lowers the score. pytorch-grad-cam follows the paper there, and it ablates a layer that has
negative values by setting the channel to its minimum less 1e7 rather than to zero.

The layer's output is replaced (``ctx.score_layer``) under ``torch.inference_mode``, in
batches within the memory budget (``hookviz.budget``), counted as work (``hookviz.workload``);
``score_layer`` runs only the model after the layer for them where it can (see
``hookviz.explaining.extra_passes``). A channel that is already zero everywhere would not change
the score: it is not scored again, and its weight is zero.
"""

from __future__ import annotations

from hookviz.budget import device_budget, rows_within
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import weighted
from hookviz.workload import work

__all__ = ["ALTERED_SHARE", "ablationcam"]

#: The altered layer outputs handed to ``score_layer`` at once hold at most the memory budget
#: (``hookviz.budget``) counting each row this many times over (the altered copy, and the
#: tail's own layers after it): a tail pass takes them all, and its layers before the layer
#: then run once per so many ablations (327 of resnet50's ``layer4`` on a CPU).
ALTERED_SHARE = 2


@register_method("ablationcam", needs_gradients=False, needs_rescoring=True)
def ablationcam(ctx: MethodContext):
    """Ablation-CAM: channels weighted by the drop in score when each is set to zero."""
    import torch

    activations, score = ctx.activations, ctx.score_layer
    assert score is not None  # needs_rescoring: the pass gives it
    count, channels = activations.shape[:2]
    everyone = torch.arange(count, device=activations.device)
    plain = score(activations, everyone).double().to(activations.device)
    ablated = plain[:, None].repeat(1, channels)
    images, kept = activations.flatten(2).any(-1).nonzero(as_tuple=True)
    row_bytes = activations[0].numel() * activations.element_size()
    batch = rows_within(ALTERED_SHARE * row_bytes, device_budget(activations.device), max(1, len(images)))
    with work(f"ablationcam at {ctx.layer}", len(images), "ablated passes", count) as passes:
        for start in range(0, len(images), batch):
            rows, which = images[start : start + batch], kept[start : start + batch]
            altered = activations[rows].clone()
            altered[torch.arange(len(rows), device=altered.device), which] = 0
            ablated[rows, which] = score(altered, rows).double().to(ablated.device)
            passes.advance(len(rows))
    weights = (plain[:, None] - ablated) / plain.abs().clamp(min=1e-12)[:, None]
    return weighted(weights.to(activations.dtype), activations)
