"""Chefer, Gur and Wolf, "Generic Attention-model Explainability for Interpreting Bi-Modal and
Encoder-Decoder Transformers" (ICCV 2021): relevance accumulated over the blocks from each
block's attention weighted by its gradient, for any target the task scores (a class, a CLIP
prompt, an embedding's similarity).

    Ā_l = mean over heads of (dS/dA_l ⊙ A_l)+;  R = I;  for each block l: R <- R + Ā_l R
    map = R[class token, patch tokens]

The probabilities and their gradients come from one forward and one backward pass with the
model's fused attention switched off (``hookviz.anatomy.attention``).
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.rollout import patch_map

__all__ = ["chefer", "relevance"]


@register_method("chefer", needs_gradients=False, needs_attention=True)
def chefer(ctx: MethodContext):
    """Chefer et al.'s relevance: gradient-weighted attention, accumulated over the blocks."""
    assert ctx.attention is not None  # needs_attention: the pass gives it
    maps = ctx.attention("target")
    return patch_map(relevance(maps.probabilities, maps.gradients)[:, 0], ctx, maps, "chefer", class_token=True)


def relevance(probabilities, gradients):
    """R after every block: (N, T, T), from per-block (N, heads, T, T) attention and gradients."""
    import torch

    count, _, tokens, _ = probabilities[0].shape
    eye = torch.eye(tokens, dtype=probabilities[0].dtype, device=probabilities[0].device)
    found = eye.expand(count, tokens, tokens).clone()
    for attention, gradient in zip(probabilities, gradients):
        weighted = (gradient * attention).clamp(min=0).mean(dim=1)
        found = found + weighted @ found
    return found
