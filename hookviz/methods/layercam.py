"""LayerCAM (Jiang et al. 2021): each position weighted by its own positive gradient.

map = ReLU(sum_c ReLU(dS/dA_c) * A_c)
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method

__all__ = ["layercam"]


@register_method("layercam", needs_gradients=True)
def layercam(ctx: MethodContext):
    """LayerCAM: each position weighted by its own positive gradient."""
    assert ctx.gradients is not None  # needs_gradients: the pass gives them
    return (ctx.gradients.clamp(min=0) * ctx.activations).sum(dim=1).clamp(min=0)
