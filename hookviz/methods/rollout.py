"""Attention rollout (Abnar and Zuidema 2020), as Chefer et al.'s reference code computes it:
each block's heads fused, the identity added for the residual connection, rows normalised,
and the blocks multiplied, first block rightmost.

    A_l = fuse over heads of the block's attention probabilities (mean, max or min)
    Â_l = (A_l + I) / rowsum(A_l + I);  R = Â_L ... Â_2 Â_1;  map = R[class token, patch tokens]

Every row of R sums to 1. An optional discard ratio zeroes the weakest share of each fused
matrix first (jacobgil's vit-explain does, keeping the class token's own attention), and the
rows are normalised after it, as the rollout needs; vit-explain's ``a / a.sum(dim=-1)`` divides
each column by a row's sum instead, so its rows do not sum to 1 (``docs/methods.md``).

The probabilities come from one forward pass with the model's fused attention switched off
(``hookviz.anatomy.attention``); the map is at the token grid and reads the class token's row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method

__all__ = ["RolloutOptions", "rollout", "rolled_out", "patch_map"]

FUSIONS = ("mean", "max", "min")


@dataclass(frozen=True)
class RolloutOptions:
    """Attention rollout's settings.

    Attributes:
        head_fusion: how a block's heads become one matrix: ``mean``, ``max`` or ``min``.
        discard_ratio: the share of each fused matrix's weakest entries set to zero before
            rolling out, 0 <= ratio < 1 (0: none).
    """

    head_fusion: str = field(default="mean", metadata={"help": "Rollout: how a block's heads are fused: mean, max or min."})
    discard_ratio: float = field(
        default=0.0,
        metadata={"help": "Rollout: the share of each block's weakest fused attention set to zero first (0 to below 1)."},
    )

    def __post_init__(self) -> None:
        if self.head_fusion not in FUSIONS:
            raise UsageError(f"{arg('head_fusion', self.head_fusion)}: not a head fusion; choose {', '.join(FUSIONS)}")
        ratio = self.discard_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
            raise UsageError(f"{arg('discard_ratio', ratio)}: give a share from 0 up to (not including) 1")


@register_method(
    "rollout",
    needs_gradients=False,
    needs_attention=True,
    class_specific=False,
    options=RolloutOptions,
)
def rollout(ctx: MethodContext):
    """Attention rollout: the blocks' head-fused attention, plus the identity, multiplied."""
    assert ctx.attention is not None  # needs_attention: the pass gives it
    settings = ctx.settings if ctx.settings is not None else RolloutOptions()
    maps = ctx.attention()
    fused = [_fused(p, settings.head_fusion) for p in maps.probabilities]
    if settings.discard_ratio > 0:
        fused = [_discarded(a, settings.discard_ratio) for a in fused]
    rolled = rolled_out(fused)
    return patch_map(rolled[:, 0], ctx, maps, "rollout", class_token=True)


def _fused(probabilities, fusion: str):
    """(N, heads, T, T) -> (N, T, T)."""
    if fusion == "mean":
        return probabilities.mean(dim=1)
    return probabilities.amax(dim=1) if fusion == "max" else probabilities.amin(dim=1)


def _discarded(fused, ratio: float):
    """``fused`` with its weakest ``ratio`` of entries zeroed per image, the first token's own kept."""
    flat = fused.flatten(1).clone()
    count = int(flat.shape[1] * ratio)
    if count == 0:
        return fused
    weakest = flat.topk(count, dim=1, largest=False).indices
    kept = flat[:, 0].clone()
    flat.scatter_(1, weakest, 0.0)
    flat[:, 0] = kept
    return flat.reshape(fused.shape)


def rolled_out(matrices):
    """The rollout of per-block (N, T, T) matrices: each plus the identity, rows normalised,
    multiplied with the first block rightmost (Chefer et al.'s ``compute_rollout_attention``)."""
    import torch

    eye = torch.eye(matrices[0].shape[-1], dtype=matrices[0].dtype, device=matrices[0].device)
    joint = None
    for matrix in matrices:
        step = matrix + eye
        step = step / step.sum(dim=-1, keepdim=True)
        joint = step if joint is None else step @ joint
    return joint


def patch_map(rows, ctx: MethodContext, maps, name: str, *, class_token: bool):
    """Per image, the patch tokens of ``rows`` (N, T) on the layer's grid (N, h, w), given the
    ``AttentionMaps`` they were made of; ``class_token``: ``rows`` is the class token's row."""
    spatial = tuple(ctx.activations.shape[2:])
    tokens = rows.shape[1]
    patches = spatial[0] * spatial[1] if len(spatial) == 2 else -1
    prefix = tokens - patches if maps.prefix is None else maps.prefix
    if len(spatial) != 2 or tokens - prefix != patches:
        grid = "x".join(map(str, spatial)) or "no"
        raise UsageError(
            f"{arg('cam', name)}: {ctx.layer}'s map is {grid}, not the grid of the {tokens - (prefix or 0)} patch tokens "
            f"the attention mixes; choose a layer on the token grid, such as a block's first norm"
        )
    if class_token and (prefix < 1 or not maps.class_token):
        raise UsageError(f"{arg('cam', name)}: the model has no class token, whose row it reads; choose legrad")
    return rows[:, prefix:].reshape(rows.shape[0], *spatial)
