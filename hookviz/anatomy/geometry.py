"""Geometry: what a model declares about the layout of its feature maps.

A ViT's block outputs (batch, 1 + 196, channels) at 224 pixels, but a distilled DeiT has
two tokens in front, ``vit_*_reg4`` five, and a model built for 256 pixels a 16x16 grid:
counting tokens cannot tell these apart reliably. The libraries that build these models
say it outright, and this module reads what they say:

* timm: ``num_prefix_tokens``, the patch embedding's ``patch_size`` and ``dynamic_img_pad``
  (with ``grid_size`` at the model's own size), ``feature_info`` strides, ``output_fmt``.
* Hugging Face transformers: the embeddings' class, distillation and register tokens, the
  patch embeddings' ``patch_size``, ``config.patch_size`` and ``config.depths``; VideoMAE's
  ``tubelet_size``: its tokens are (T', H', W') tubelets in raster order, no class token.
  TimeSformer's ``time_embeddings``: a class token, then one token per frame and patch, run
  position by position with each position's frames in a row ((H', W', T) order, as its
  embeddings reshape them: ``Layout.order`` ``hwt``).
* torchvision's ViT: ``patch_size`` and its class token. Its video transformers: MViT's
  class token and its patch embedding's (frames, rows, cols) stride, its tokens pooled on a
  (T', H', W') grid stage by stage; Swin3D's patch size and its channels-last
  (N, T', H', W', C) maps.
* open_clip's ``VisionTransformer`` (a CLIP's ``visual``): its class embedding and
  ``patch_size`` (else its ``conv1`` stride).

Anything else declares nothing, and ``featuremaps`` guesses from shapes as before.
"""

from __future__ import annotations

from hookviz.anatomy.featuremaps import DeclaredLayout

__all__ = ["declared_layout"]


def declared_layout(model) -> DeclaredLayout | None:
    """What ``model`` (an ``nn.Module``) declares about its layout, or ``None`` if nothing."""
    for cls in type(model).__mro__:  # a user's subclass of a timm model still declares what timm's does
        reader = _READERS.get(cls.__module__.split(".", 1)[0])
        if reader is not None:
            return reader(model)
    return None


def _pair(value) -> tuple[int, int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    return None


def _timm(model) -> DeclaredLayout | None:
    said = []
    prefix = getattr(model, "num_prefix_tokens", None)
    prefix = prefix if isinstance(prefix, int) and not isinstance(prefix, bool) else None
    if prefix is not None:
        said.append(f"num_prefix_tokens={prefix}")
    patch, pad = None, False
    embed = getattr(model, "patch_embed", None)
    # timm's own PatchEmbed (stride = patch size, tokens in raster order); PVT's
    # overlapping embedding or Hiera's unrolled one are not, and their grids are left alone.
    if embed is not None and callable(getattr(embed, "dynamic_feat_size", None)):
        patch = _pair(getattr(embed, "patch_size", None))
        pad = bool(getattr(embed, "dynamic_img_pad", False))
        grid = getattr(embed, "grid_size", None)
        said.append(f"patch_embed.patch_size={patch}" + (f", grid_size={tuple(grid)}" if grid else ""))
    strides = tuple(
        sorted(
            {
                int(f["reduction"])
                for f in getattr(model, "feature_info", None) or ()
                if isinstance(f, dict) and isinstance(f.get("reduction"), (int, float))
            }
        )
    )
    if strides:
        said.append("feature_info strides " + ",".join(map(str, strides)))
    output_fmt = str(getattr(model, "output_fmt", "") or "")
    channels_last = True if output_fmt.upper().endswith("NHWC") else None
    if channels_last:
        said.append("output_fmt=NHWC")
    if not said:
        return None
    return DeclaredLayout(prefix or 0, patch, pad, strides, channels_last, "timm: " + ", ".join(said))


_HF_PREFIX_TOKENS = ("cls_token", "distillation_token", "register_tokens")


def _transformers(model) -> DeclaredLayout | None:
    import torch

    config = getattr(model, "config", None)
    if config is None:
        return None
    embeddings = next((m for m in model.modules() if hasattr(m, "patch_embeddings")), None)
    said, prefix, patch, pad = [], 0, None, False
    if embeddings is not None:
        for name in _HF_PREFIX_TOKENS:
            token = getattr(embeddings, name, None)
            if isinstance(token, torch.Tensor) and token.dim() == 3:
                prefix += int(token.shape[1])
                said.append(f"{name} x{int(token.shape[1])}")
        patch = _pair(getattr(embeddings.patch_embeddings, "patch_size", None))
        if patch is not None:
            said.append(f"patch_embeddings.patch_size={patch}")
        pad = callable(getattr(embeddings.patch_embeddings, "maybe_pad", None))  # Swin pads to whole patches
    stem = _pair(getattr(config, "patch_size", None))
    depths = getattr(config, "depths", None)
    strides: tuple[int, ...] = ()
    if stem is not None and stem[0] == stem[1]:
        stages = len(depths) if isinstance(depths, (list, tuple)) else 1
        strides = tuple(stem[0] * 2**k for k in range(stages))
        said.append("config.patch_size" + (", config.depths" if stages > 1 else ""))
    if not said:
        return None
    origin = f"transformers ({type(model).__name__}): " + ", ".join(said)
    tubelet = getattr(getattr(embeddings, "patch_embeddings", None), "tubelet_size", None)
    if isinstance(tubelet, int) and patch is not None:  # VideoMAE: (T', H', W') tubelets in raster order
        return DeclaredLayout(prefix, strides=(patch[0],), origin=f"{origin}, tubelet_size={tubelet}", temporal=tubelet)
    if isinstance(getattr(embeddings, "time_embeddings", None), torch.Tensor) and patch is not None:
        # TimeSformer: one token per frame and patch, run position by position, each position's frames in a row
        origin += ", time_embeddings (tokens position-major, frames in a row)"
        return DeclaredLayout(prefix, strides=(patch[0],), origin=origin, temporal=1, token_order="hwt")
    return DeclaredLayout(prefix, patch, pad, strides, None, origin)


def _torchvision(model) -> DeclaredLayout | None:
    import torch

    video = _torchvision_video(model)
    if video is not None:
        return video
    patch = _pair(getattr(model, "patch_size", None))
    token = getattr(model, "class_token", None)
    if patch is None or not isinstance(token, torch.Tensor):
        return None  # only torchvision's ViT declares its tokens
    return DeclaredLayout(1, patch, False, (patch[0],), None, f"torchvision: class_token, patch_size={patch[0]}")


def _torchvision_video(model) -> DeclaredLayout | None:
    """MViT's (class token, patch embedding stride) or Swin3D's (patch size, channels last),
    by the attributes torchvision's builders give them; ``None`` for any other model."""
    from torch import nn

    conv, encoding = getattr(model, "conv_proj", None), getattr(model, "pos_encoding", None)
    if isinstance(conv, nn.Conv3d) and hasattr(encoding, "temporal_size"):  # MViT
        frames, rows, _ = (int(n) for n in conv.stride)
        stages = 1 + sum(1 for block in getattr(model, "blocks", ()) if getattr(block, "pool_skip", None) is not None)
        prefix = 1 if getattr(encoding, "class_token", None) is not None else 0  # one (C,) class token
        strides = tuple(rows * 2**k for k in range(stages))
        origin = f"torchvision MViT: class token, conv_proj stride {tuple(conv.stride)}, {stages} stages"
        return DeclaredLayout(prefix=prefix, strides=strides, origin=origin, temporal=frames)
    embed = getattr(model, "patch_embed", None)
    size = getattr(embed, "tuple_patch_size", None) or getattr(embed, "patch_size", None)
    if isinstance(size, (tuple, list)) and len(size) == 3 and hasattr(model, "features"):  # Swin3D
        frames, rows = int(size[0]), int(size[1])
        strides = tuple(rows * 2**k for k in range(len(model.features) // 2 + 1))
        origin = f"torchvision SwinTransformer3d: patch_size {tuple(size)}, channels-last maps"
        return DeclaredLayout(strides=strides, channels_last=True, origin=origin, temporal=frames)
    return None


def _open_clip(model) -> DeclaredLayout | None:
    import torch

    visual = getattr(model, "visual", model)  # a whole CLIP, or its image tower
    token = getattr(visual, "class_embedding", None)
    conv = getattr(visual, "conv1", None)
    patch = _pair(getattr(visual, "patch_size", None)) or _pair(getattr(conv, "stride", None))
    if patch is None or not isinstance(token, torch.Tensor):
        return None  # a ModifiedResNet or a timm tower: no token grid of open_clip's own
    return DeclaredLayout(1, patch, False, (patch[0],), None, f"open_clip: class_embedding, patch_size={patch[0]}")


_READERS = {"timm": _timm, "transformers": _transformers, "torchvision": _torchvision, "open_clip": _open_clip}
