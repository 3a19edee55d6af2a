"""A Hugging Face backbone as an embedding model (imports torch: loaded on first use)."""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["BackboneEmbedding"]


class BackboneEmbedding(nn.Module):
    """Image in, the backbone's (N, D) embedding out: its ``pooler_output`` (``pooled``), else
    the class token of its ``last_hidden_state``. The backbone is kept under the name its
    classifier gives it (``base_model_prefix``: ``vit``, ``dinov2``)."""

    def __init__(self, model: nn.Module, pooled: bool):
        super().__init__()
        self.prefix = getattr(model, "base_model_prefix", "") or "backbone"
        self.add_module(self.prefix, model)
        self.pooled = pooled
        self.config = model.config  # what hookviz.anatomy.geometry reads (patch size, depths)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        output = getattr(self, self.prefix)(pixel_values=pixel_values)
        return output.pooler_output if self.pooled else output.last_hidden_state[:, 0]

    def extra_repr(self) -> str:
        return "pooler_output" if self.pooled else "class token of last_hidden_state"
