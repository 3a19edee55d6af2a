"""A CLIP model as a classifier over text prompts (imports torch: loaded on first use)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ClipLogits", "TransformersClipLogits", "TEXT_BATCH"]

#: Prompts encoded at a time: a file of 100,000 prompts (CLIP's text tower: 77 tokens, 2048-wide
#: MLPs) through the tower at once needed tens of GB; the features are the same in parts.
TEXT_BATCH = 256


class ClipLogits(nn.Module):
    """Image in, CLIP's image-text logits over fixed prompts out: (N, prompts).

    ``logits = logit_scale.exp() * normalize(visual(x)) @ text_features.T (+ logit_bias)``,
    as open_clip's ``CLIP.forward`` and its zero-shot classifier compute them. The text
    features are computed once here, under ``no_grad`` and in eval mode, and kept as a
    buffer; the text tower is not kept, so only the image tower's layers are listed.

    Args:
        model: an open_clip ``CLIP`` (or ``CustomTextCLIP``).
        tokens: the prompts as ``open_clip.get_tokenizer(arch)`` returns them.
    """

    text_features: torch.Tensor

    def __init__(self, model, tokens: torch.Tensor):
        super().__init__()
        self.visual = model.visual
        self.logit_scale = model.logit_scale
        bias = getattr(model, "logit_bias", None)
        self.logit_bias = bias if isinstance(bias, nn.Parameter) else None
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                text = _encoded(list(tokens.split(TEXT_BATCH)), lambda part: F.normalize(model.encode_text(part), dim=-1))
        finally:
            model.train(was_training)
        self.register_buffer("text_features", text.detach().clone())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        features = F.normalize(self.visual(image), dim=-1)
        logits = self.logit_scale.exp() * features @ self.text_features.to(features.dtype).T
        return logits if self.logit_bias is None else logits + self.logit_bias

    def extra_repr(self) -> str:
        return f"prompts={self.text_features.shape[0]}"


class TransformersClipLogits(nn.Module):
    """Image in, a transformers ``CLIPModel``'s or ``SiglipModel``'s image-text logits over
    fixed prompts out: (N, prompts), as ``model(**inputs).logits_per_image`` computes them:

    ``logits = (normalize(text) @ normalize(image).T * logit_scale.exp() (+ logit_bias)).T``

    The image embedding is the vision tower's pooled output (CLIP's class token through
    ``visual_projection``; SigLIP's attention-pooling head). The text embeddings are computed
    once here, under ``no_grad`` and in eval mode, and kept as a buffer; the text tower is
    not kept, so only the image tower's layers are listed (``vision_model.encoder.layers.1.layer_norm1``).

    Args:
        model: a transformers ``CLIPModel`` or ``SiglipModel``.
        tokens: the prompts as the model's own tokenizer returns them (``return_tensors="pt"``).
    """

    text_features: torch.Tensor

    def __init__(self, model, tokens):
        super().__init__()
        self.vision_model = model.vision_model
        self.visual_projection = getattr(model, "visual_projection", None)  # CLIP's; SigLIP's head is in its tower
        self.logit_scale = model.logit_scale
        bias = getattr(model, "logit_bias", None)
        self.logit_bias = bias if isinstance(bias, nn.Parameter) else None
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                text = _encoded(_parts(tokens), lambda part: _text_features(model, part))
        finally:
            model.train(was_training)
        self.register_buffer("text_features", (text / text.norm(p=2, dim=-1, keepdim=True)).detach().clone())

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        image = self.vision_model(pixel_values=pixel_values).pooler_output
        if self.visual_projection is not None:
            image = self.visual_projection(image)
        image = image / image.norm(p=2, dim=-1, keepdim=True)
        # in transformers' own order (text @ image.T, scaled, shifted, transposed): the same numbers
        logits = self.text_features.to(image.dtype) @ image.t() * self.logit_scale.exp()
        return (logits if self.logit_bias is None else logits + self.logit_bias).t()

    def extra_repr(self) -> str:
        return f"prompts={self.text_features.shape[0]}"


def _encoded(parts: list, encode: Callable) -> torch.Tensor:
    """Each part of the prompts' tokens through ``encode``, in order, saying how far it got
    (``base.prompts_encoded``: the command shows it, and names it if stopped there)."""
    from hookviz.models.sources.base import prompts_encoded

    sizes = [len(part) if isinstance(part, torch.Tensor) else len(next(iter(part.values()))) for part in parts]
    total, done, features = sum(sizes), 0, []
    prompts_encoded(0, total)
    for part, size in zip(parts, sizes):
        features.append(encode(part))
        done += size
        prompts_encoded(done, total)
    return torch.cat(features)


def _parts(tokens: dict) -> list[dict]:
    """A tokenizer's tensors (``input_ids``, ``attention_mask``) in parts of ``TEXT_BATCH`` prompts."""
    count = next(iter(tokens.values())).shape[0]
    return [{key: value[start : start + TEXT_BATCH] for key, value in tokens.items()} for start in range(0, count, TEXT_BATCH)]


def _text_features(model, tokens: dict) -> torch.Tensor:
    text = model.get_text_features(**tokens)
    return getattr(text, "pooler_output", text)  # transformers 5 returns the tower's output, projected
