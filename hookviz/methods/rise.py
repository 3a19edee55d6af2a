"""RISE (Petsiuk et al. 2018, "Randomized Input Sampling for Explanation"): the target's score
on the input under many random smooth masks, each mask weighted by the score it leaves, with no
gradient. As xaitk-saliency's ``RISEStack`` (debiased, its masks from ``RISEGrid``):

    grid_m = cells of an s x s grid, each 1 with probability p1 (else 0)
    M_m = grid_m upsampled (bilinear, mirrored at the edges) to (s + 1) x ceil(side / s) cells,
          cut to the input's size at a random shift of less than a cell
    map = sum_m S(input * M_m) * (M_m - p1) / (N * p1)

a map at the input's resolution. The paper's ``sum_m S_m M_m / (N p1)`` less the mean score
(xaitk's debiasing, after Hatakeyama et al. 2020), which moves every pixel alike; xaitk then scales the map
to a largest magnitude of 1, which the drawing's own scale does here. The paper weights by the
class probability; hookviz by the target's score as the task defines it (a classifier's logit,
see ``MethodContext.score``). The map is spread evenly over the input's channels, so their sum
(what ``pixel_maps.png`` draws) is RISE's map. A clip's frames get the same mask each.

The masks, xaitk's defaults (``--rise-masks`` 1000, ``--rise-grid`` 8, ``--rise-p1`` 0.5), come
from numpy generators of their own seeded with ``--rise-seed`` (the grid, then the shifts, as
xaitk draws them with ``threads=0``): the same masks for every image of one size, and the caller's
random state untouched. A photo costs one pass per mask, in batches of ``RESCORING_BATCH``
(fewer where the memory budget, ``hookviz.budget``, holds fewer), counted as work (``hookviz.workload``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.methods.base import RESCORING_BATCH, MethodContext, register_method
from hookviz.options.declared import check_values, option
from hookviz.workload import work

__all__ = ["RISEOptions", "mask_batches", "rise"]

#: At most this many masks (``--rise-masks``), each a pass of every image.
MAX_MASKS = 100_000


@dataclass(frozen=True)
class RISEOptions:
    """RISE's settings (``--rise-masks``, ``--rise-grid``, ``--rise-p1``, ``--rise-seed``).

    Attributes:
        rise_masks: how many random masks (each a pass of every image).
        rise_grid: the side of the coarse grid each mask is drawn on.
        rise_p1: the chance that a cell of the grid keeps the input (above 0, at most 1).
        rise_seed: the seed of the masks (generators of their own; the caller's random state is untouched).
    """

    rise_masks: int = option(
        1000, help=f"RISE: random masks, each a pass (xaitk's 1000; 1 to {MAX_MASKS}).", low=1, high=MAX_MASKS
    )
    rise_grid: int = option(8, help="RISE: side of each mask's coarse grid (8).", low=1, high=1024)
    rise_p1: float = option(0.5, help="RISE: chance a grid cell keeps the input (above 0, at most 1; 0.5).", low=0.0, high=1.0)
    rise_seed: int = option(0, help="RISE: seed of the masks, the same for every image.", low=0, high=2**63 - 1)

    def __post_init__(self):
        check_values(self)
        if self.rise_p1 <= 0:
            raise UsageError(f"{arg('rise_p1', self.rise_p1)}: give a chance above 0 (0 masks every pixel of every input)")


@register_method("rise", needs_gradients=False, needs_rescoring=True, needs_input=True, resolution="input", options=RISEOptions)
def rise(ctx: MethodContext):
    """RISE: random smooth masks, each weighted by the target's score on the input it keeps (xaitk's RISEStack)."""
    import torch

    inputs = ctx.inputs
    assert inputs is not None and ctx.score is not None  # needs_input, needs_rescoring: the pass gives them
    settings = ctx.settings if isinstance(ctx.settings, RISEOptions) else RISEOptions()
    if inputs.dim() < 4:
        shape = "x".join(map(str, inputs.shape[2:]))
        raise UsageError(
            f"{arg('cam', 'rise')}: its masks cover a height and a width, and the input is {shape}; choose occlusion"
        )
    count, masks, p1 = len(inputs), settings.rise_masks, settings.rise_p1
    maps = torch.zeros(count, *inputs.shape[-2:], dtype=torch.float64)
    with work("rise", count * masks, "masked passes", count, fed=True):  # ctx.score's passes count
        for chunk in mask_batches(tuple(inputs.shape[-2:]), settings, RESCORING_BATCH):
            kept = chunk.to(inputs.device, inputs.dtype).reshape(len(chunk), *[1] * (inputs.dim() - 3), *chunk.shape[1:])
            for image in range(count):
                scores = ctx.score(inputs[image : image + 1] * kept, torch.full((len(chunk),), image)).double().cpu()
                maps[image] += torch.einsum("m,mhw->hw", scores, chunk - p1)
    maps /= masks * p1
    spread = maps.reshape(count, 1, *[1] * (inputs.dim() - 4), *maps.shape[1:]) / inputs.shape[1]
    return spread.expand(inputs.shape).float().to(inputs.device)


def mask_batches(size: tuple[int, ...], settings: RISEOptions, batch: int):
    """RISE's masks for an input of ``size`` (H, W), as xaitk's ``RISEGrid(n, s, p1, seed,
    threads=0)`` makes them, ``batch`` at a time: (B, H, W) float64 tensors."""
    import numpy as np
    import torch

    n, s = settings.rise_masks, settings.rise_grid
    grid = torch.from_numpy((np.random.default_rng(settings.rise_seed).random((n, s, s)) < settings.rise_p1).astype(np.float64))
    cells = [math.ceil(side / s) for side in size]
    shift = np.random.default_rng(settings.rise_seed)
    shifts = torch.tensor([[int(shift.integers(0, cell)) for cell in cells] for _ in range(n)], dtype=torch.long)
    rows, columns = (_mirrored_linear(s, (s + 1) * cell) for cell in cells)
    along_rows, along_columns = torch.arange(size[0]), torch.arange(size[1])
    for start in range(0, n, batch):
        ys, xs = shifts[start : start + batch, 0], shifts[start : start + batch, 1]
        picked_rows = rows[ys[:, None] + along_rows]  # (B, H, s): each mask's rows of the upsampled grid
        picked_columns = columns[xs[:, None] + along_columns]  # (B, W, s)
        yield picked_rows @ grid[start : start + batch] @ picked_columns.transpose(1, 2)


def _mirrored_linear(side: int, out: int):
    """The (out, side) matrix of linear interpolation from ``side`` samples to ``out``, pixel
    centres matched (scipy's ``zoom(grid_mode=True)``, as skimage's ``resize`` calls it) and the
    samples mirrored about the edge ones (skimage's ``mode="reflect"``, scipy's ``mirror``)."""
    import torch

    matrix = torch.zeros(out, side, dtype=torch.float64)
    if side == 1:
        return matrix + 1
    at = (torch.arange(out, dtype=torch.float64) + 0.5) * side / out - 0.5
    at = at.abs()  # mirrored about the first sample
    at = torch.where(at > side - 1, 2 * (side - 1) - at, at)  # and the last
    low = at.floor().long().clamp(max=side - 2)
    part = at - low
    matrix[torch.arange(out), low] = 1 - part
    matrix[torch.arange(out), low + 1] += part
    return matrix
