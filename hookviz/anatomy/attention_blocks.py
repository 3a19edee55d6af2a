"""Attention blocks as each library declares them: where a model's attention is, and how
each block's probabilities are reached, read once when its source loads it, as ``geometry``
reads its token layout.

* timm: its ``Attention`` modules (and kin) with a ``fused_attn`` flag and an ``attn_drop``
  after the softmax; the flag is switched off for the pass.
* Hugging Face transformers: the image tower's attention modules, whose config's
  ``attn_implementation`` is switched to ``eager`` for the pass.
* torchvision: a ``VisionTransformer``'s ``encoder.layers.*.self_attention``, each an
  ``nn.MultiheadAttention`` asked for its weights; its Swin and MaxViT attend in windows
  and are refused.
* open_clip: a ``VisionTransformer`` tower's ``transformer.resblocks.*.attn``: an
  ``nn.MultiheadAttention`` (batch first or not), or open_clip's own ``Attention`` (the
  ``custom`` blocks: ``qk_norm``, ``scale_heads``...), recomputed from its query and key
  because its unfused path fails on its 4-D heads. Scaled cosine attention and an
  attentional pooler are refused in one line naming the module.

``hookviz.anatomy.attention.attention_sites`` reads the declaration first; a factory's
model, which no source declares for, is read by its modules' types instead.
"""

from __future__ import annotations

from hookviz.anatomy.attention import AttentionSite, DeclaredAttention, detected_attention, unreachable_text

__all__ = ["timm_attention", "transformers_attention", "torchvision_attention", "open_clip_attention"]


def timm_attention(model) -> DeclaredAttention:
    """A timm model's attention blocks: the modules with timm's ``fused_attn`` switch."""
    return detected_attention(model, ("timm",), "timm: attention modules with fused_attn, switched off for the pass")


def transformers_attention(model) -> DeclaredAttention:
    """A transformers model's (its image tower's, for a CLIP) attention modules."""
    return detected_attention(model, ("transformers",), "transformers: attention modules, attn_implementation eager for the pass")


def torchvision_attention(model) -> DeclaredAttention:
    """A torchvision ``VisionTransformer``'s encoder blocks' ``self_attention``; any other
    torchvision model's attention modules (none for a CNN) by their types."""
    from torchvision.models.vision_transformer import VisionTransformer

    if not isinstance(model, VisionTransformer):
        return detected_attention(model, ("multihead",), "torchvision: nn.MultiheadAttention modules")
    sites = tuple(
        AttentionSite(f"encoder.layers.{name}.self_attention", f"encoder.layers.{name}", "multihead")
        for name, _ in model.encoder.layers.named_children()
    )
    return _checked(model, sites, "torchvision: VisionTransformer's encoder.layers.*.self_attention")


def open_clip_attention(model, tower: str = "visual") -> DeclaredAttention:
    """An open_clip model's image tower's (``model.<tower>``) blocks' attention; a tower that
    is not open_clip's ``VisionTransformer`` (a timm trunk, a ModifiedResNet) by its types."""
    from open_clip.transformer import VisionTransformer

    visual = model.get_submodule(tower)
    if not isinstance(visual, VisionTransformer):
        return detected_attention(model, origin=f"open_clip: {type(visual).__name__}'s attention modules by their types")
    origin = "open_clip: VisionTransformer's transformer.resblocks.*.attn"
    if getattr(visual, "attn_pool", None) is not None:
        path = f"{tower}.attn_pool"
        why = "an attentional pooler's cross-attention after the blocks, which no token's attention row describes"
        return DeclaredAttention((), unreachable_text(type(visual.attn_pool).__name__, path, why), origin)
    sites: list[AttentionSite] = []
    for name, block in visual.transformer.resblocks.named_children():
        path = f"{tower}.transformer.resblocks.{name}.attn"
        kind = _open_clip_kind(block.attn)
        if kind is None:
            why = "scaled cosine attention, which hookviz does not recompute"
            return DeclaredAttention(tuple(sites), unreachable_text(type(block.attn).__name__, path, why), origin)
        sites.append(AttentionSite(path, path.rsplit(".", 1)[0], kind))
    return _checked(model, tuple(sites), origin)


def _open_clip_kind(attn) -> str | None:
    """``multihead`` for an ``nn.MultiheadAttention``, ``open_clip`` for open_clip's own
    ``Attention`` without scaled cosine, else ``None``."""
    import torch.nn as nn

    if isinstance(attn, nn.MultiheadAttention):
        return "multihead"
    return "open_clip" if getattr(attn, "logit_scale", None) is None and hasattr(attn, "in_proj_weight") else None


def _checked(model, sites: tuple, origin: str) -> DeclaredAttention:
    """The declaration of ``sites``, refused where an ``nn.MultiheadAttention`` among them
    is one whose weights cannot remake its output (separate key and value widths, added
    key bias or zero attention)."""
    for site in sites:
        module = model.get_submodule(site.path)
        if site.kind == "multihead" and not (module._qkv_same_embed_dim and module.bias_k is None and not module.add_zero_attn):
            why = "separate key and value widths, or added key bias or zero attention"
            return DeclaredAttention(sites, unreachable_text(type(module).__name__, site.path, why), origin)
    return DeclaredAttention(sites, None, origin)
