"""How the Grad-CAM family pools a clip's gradients into channel weights (``--time-weights``),
one option group that the methods which pool declare together: Grad-CAM, Grad-CAM++ and
XGrad-CAM.

A clip's map (T, H, W) has two readings of "every position" a channel's weight pools over:
``clip``, one weight per channel over the whole clip, as pytorch-grad-cam and torch-cam weight a
5-D input (the default); ``frame``, one weight per channel and time slice, pooled over that
slice's (H, W) only, as mmaction2's and SlowFast's video Grad-CAM do. A map with no time axis
(a photo's) reads both the same.

The group is the family's, not one method's: ``options.declared`` lets several methods declare
one group (``groups()`` lists its owners; report.json's ``asked`` keeps it under the asked
owners' names joined, ``gradcam,xgradcam``), so ``--time-weights frame`` with
``--cam gradcam,xgradcam`` sets both, and one flag never means two things. LayerCAM and HiResCAM
do not declare it: they weight each position by its own gradient and pool nothing, so their map
of a clip is already a frame's own at every frame (``--time-weights`` with only them is refused
in one line naming the methods that take it).
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.options.declared import check_values, option

__all__ = ["TIME_WEIGHTS", "TimeWeightOptions", "per_frame", "pooled", "weighted"]

#: ``--time-weights``: one weight per channel over the clip, or one per channel and time slice.
TIME_WEIGHTS = ("clip", "frame")


@dataclass(frozen=True)
class TimeWeightOptions:
    """The Grad-CAM family's settings (``--time-weights``; ``time_weights=`` in ``explain()``)."""

    time_weights: str = option(
        "clip",
        help="Grad-CAM, Grad-CAM++ and XGrad-CAM of a clip: one weight per channel over the whole clip (clip, as "
        "pytorch-grad-cam and torch-cam) or one per channel and frame of the map (frame, as mmaction2 and SlowFast). "
        "A photo's map reads both alike.",
        choices=TIME_WEIGHTS,
    )

    def __post_init__(self):
        check_values(self)


def per_frame(ctx) -> bool:
    """Whether ``ctx``'s weights pool per time slice: ``frame`` asked, and a clip's (N, C, T, H, W) activations."""
    return ctx.settings is not None and ctx.settings.time_weights == "frame" and ctx.activations.dim() == 5


def pooled(tensor, frame: bool):
    """``tensor`` (N, C, *spatial) with the positions one weight pools over flattened last:
    (N, C, positions), or (N, C, T, H * W) per frame."""
    return tensor.flatten(3 if frame else 2)


def weighted(weights, activations):
    """ReLU(sum_c weights[n, c] * activations[n, c]) for weights (N, C) or, per frame, (N, C, T),
    for any number of spatial dimensions."""
    spread = weights.reshape(*weights.shape, *([1] * (activations.dim() - weights.dim())))
    return (spread * activations).sum(dim=1).clamp(min=0)
