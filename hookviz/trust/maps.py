"""What the measures share: a map brought to the input's size, and the scoring callable's
shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["Score", "at_input_size", "chunks"]

#: ``score(batch, images)``: the target's score (N,) for each row of ``batch`` (N, C, *spatial),
#: where ``images`` (N,) long says which image of the measured batch each row stands for.
#: The same shape as ``hookviz.methods.MethodContext.score``.
Score = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


def at_input_size(maps: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    """Maps (N, *spatial) resized to ``size`` (N, *size) in float32, linearly, bilinearly or
    trilinearly by their rank, with ``align_corners=False``, as torch-cam's metrics resize a
    CAM (a map already at ``size`` comes back unchanged)."""
    import torch.nn.functional as F

    maps = maps.detach().float()
    if tuple(maps.shape[1:]) == tuple(size):
        return maps
    mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)]
    return F.interpolate(maps[:, None], size=tuple(size), mode=mode, align_corners=False)[:, 0]


def chunks(count: int, size: int):
    """``range`` objects covering ``range(count)``, ``size`` at a time."""
    return [range(start, min(start + size, count)) for start in range(0, count, size)]
