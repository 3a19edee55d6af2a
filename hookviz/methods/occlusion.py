"""Occlusion (Zeiler and Fergus 2014): how much the target's score drops when a window of the
input is replaced by a baseline, with no gradient. As captum's ``Occlusion``, a map at the
input's resolution with the input's channels:

    map = mean over the windows w covering a pixel of (S(input) - S(input with w set to the baseline))

The window (``--occlusion-window``, 16 pixels by default) is a square over a photo's height and
width (a segment of a signal; over a clip's height and width, every frame at once) and every
input channel; it moves by ``--occlusion-stride`` (8 by default, at most the window, so every
pixel is covered), from the top-left corner, as captum's ``sliding_window_shapes=(C, k, k)``,
``strides=(C, s, s)``: the last window of a row may hang over the edge and is then cut there.
A 224-pixel photo costs 27 x 27 = 729 passes at the defaults. The baseline
(``--occlusion-baseline``) takes ``--ig-baseline``'s choices: ``zero`` (captum's default),
``blur`` or ``mean``.

The occluded inputs go through ``ctx.score`` in batches of ``RESCORING_BATCH`` (fewer where the
memory budget, ``hookviz.budget``, holds fewer), counted as work (``hookviz.workload``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from hookviz.errors import UsageError, arg
from hookviz.methods.base import RESCORING_BATCH, MethodContext, register_method
from hookviz.methods.integrated_gradients import IG_BASELINES, baseline
from hookviz.options.declared import check_values, option
from hookviz.workload import work

__all__ = ["OcclusionOptions", "occlusion", "windows"]

#: The largest window and stride (``--occlusion-window``, ``--occlusion-stride``), in pixels.
MAX_SIDE = 4096


@dataclass(frozen=True)
class OcclusionOptions:
    """Occlusion's settings (``--occlusion-window``, ``--occlusion-stride``, ``--occlusion-baseline``).

    Attributes:
        occlusion_window: the window's side in pixels (a square over height and width, every channel).
        occlusion_stride: how far it moves each step, at most the window (every pixel covered).
        occlusion_baseline: what the window is set to: ``zero`` (captum's default), ``blur`` or ``mean``.
    """

    occlusion_window: int = option(16, help="Occlusion: the window's side in pixels (16).", low=1, high=MAX_SIDE)
    occlusion_stride: int = option(
        8, help="Occlusion: the window's step in pixels, at most the window (8).", low=1, high=MAX_SIDE
    )
    occlusion_baseline: str = option(
        "zero",
        help="Occlusion: set the window to zero (as captum's), blur (the input blurred) or mean (its mean colour).",
        choices=IG_BASELINES,
    )

    def __post_init__(self):
        check_values(self)
        if self.occlusion_stride > self.occlusion_window:
            raise UsageError(
                f"{arg('occlusion_stride', self.occlusion_stride)}: at most the window ({self.occlusion_window}), or some "
                "pixels are never occluded"
            )


@register_method(
    "occlusion", needs_gradients=False, needs_rescoring=True, needs_input=True, resolution="input", options=OcclusionOptions
)
def occlusion(ctx: MethodContext):
    """Occlusion: the drop in score when a sliding window of the input is set to a baseline (captum's Occlusion)."""
    import torch

    inputs = ctx.inputs
    assert inputs is not None and ctx.score is not None  # needs_input, needs_rescoring: the pass gives them
    settings = ctx.settings if isinstance(ctx.settings, OcclusionOptions) else OcclusionOptions()
    boxes = windows(tuple(inputs.shape[2:]), settings.occlusion_window, settings.occlusion_stride)
    maps = torch.zeros(inputs.shape, dtype=torch.float64)
    covered = torch.zeros(inputs.shape[2:], dtype=torch.float64)
    for box in boxes:
        covered[box] += 1
    # one pass of the batch as it is, then one per window and image
    with work("occlusion", len(inputs) * (len(boxes) + 1), "occluded passes", len(inputs), fed=True):  # ctx.score's passes count
        plain = ctx.score(inputs).double().cpu()
        for image in range(len(inputs)):
            original, fill = inputs[image], baseline(inputs[image : image + 1], settings.occlusion_baseline)[0]
            for start in range(0, len(boxes), RESCORING_BATCH):
                chunk = boxes[start : start + RESCORING_BATCH]
                occluded = original.repeat(len(chunk), *[1] * original.dim())
                for row, box in enumerate(chunk):
                    window: Any = (slice(None), *box)
                    occluded[row][window] = fill[window]
                drops = plain[image] - ctx.score(occluded, torch.full((len(chunk),), image)).double().cpu()
                for drop, box in zip(drops.tolist(), chunk):
                    window = (slice(None), *box)
                    maps[image][window] += drop
    return (maps / covered).float().to(inputs.device)


def windows(size: tuple[int, ...], window: int, stride: int) -> list[tuple[slice, ...]]:
    """The windows' slices of an input of spatial ``size`` (H, W), (L,) or (T, H, W): starts 0, stride, ... while the rest of the axis
    is longer than the window, ceil((side - window) / stride) + 1 of them, each cut at the edge.
    A clip's time axis is covered whole. Raises UsageError for a window larger than the input."""
    moving = size[-2:]
    if window > min(moving):
        shown = "x".join(map(str, moving))
        raise UsageError(
            f"{arg('occlusion_window', window)}: the input is {shown} pixels; give a window of at most {min(moving)}"
        )
    axes = [range(0, stride * math.ceil((side - window) / stride) + 1, stride) for side in moving]
    whole = (slice(None),) * (len(size) - len(moving))
    return [whole + tuple(slice(at, at + window) for at in starts) for starts in itertools.product(*axes)]
