"""HiResCAM (Draelos and Carin 2020): each position's activations weighted by their own
gradient, with no averaging, so the map shows exactly the positions that raise the score
(for a model whose head is a global average pool and a linear layer, the map sums to the
score's share from this layer):

    map = ReLU(sum_c dS/dA_c * A_c)
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method

__all__ = ["hirescam"]


@register_method("hirescam", needs_gradients=True)
def hirescam(ctx: MethodContext):
    """HiResCAM: each position's activations weighted by their own gradient."""
    assert ctx.gradients is not None  # needs_gradients: the pass gives them
    return (ctx.gradients * ctx.activations).sum(dim=1).clamp(min=0)
