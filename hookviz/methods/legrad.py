"""LeGrad (Bousselham et al. 2024, "An Explainability Method for Vision Transformers via
Feature Formation Sensitivity"), as torch-cam's ``LeGrad`` defines it: for every block, the
score its own output tokens would get through the model's head, differentiated with respect
to that block's attention probabilities; the positive part averaged over heads and queries,
then over blocks.

    s_l = the target's score of block l's tokens fed straight to the model's head
    map = mean over blocks l of mean over heads and queries of ReLU(ds_l/dA_l) [patch keys]

torch-cam projects a torchvision ViT's intermediate tokens with ``heads(ln(tokens.mean(1)))``
by default (a mean of the tokens); hookviz runs the model's own head (its class token, its
pooling), which torch-cam takes as its ``score_projection``. One forward pass gives every
block's score (the last block's output becomes all the blocks' outputs, stacked on the
batch) and one backward pass their gradients (each block's input cut from the graph, so
each block's attention gets its own score's gradient only).
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.rollout import patch_map

__all__ = ["legrad"]


@register_method("legrad", needs_gradients=False, needs_attention=True)
def legrad(ctx: MethodContext):
    """LeGrad: each block's attention gradient of its own score, positive, averaged."""
    import torch

    assert ctx.attention is not None  # needs_attention: the pass gives it
    maps = ctx.attention("layers")
    per_block = [gradient.clamp(min=0).mean(dim=(1, 2)) for gradient in maps.gradients]
    return patch_map(torch.stack(per_block).mean(dim=0), ctx, maps, "legrad", class_token=False)
