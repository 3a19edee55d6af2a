"""Qwen2-VL and Qwen2.5-VL (``Qwen2VLForConditionalGeneration``, ``Qwen2_5_VLForConditionalGeneration``):
dynamic resolution. The processor scales a photo to a multiple of the patch side times the merge
(14 x 2 pixels) and cuts it into a (t, h, w) grid of patches, which it reports as
``image_grid_thw``; the tower reads the patches in merge blocks (each 2 x 2 block of neighbours
one after the other, the blocks row by row), and its merger makes each block one token of the
language model, so a photo's tokens form an (h / 2, w / 2) grid, row by row, where the prompt
had its image pad token.

A CAM at a tower block sees the tower's order; ``vision_order`` gives, for each cell of the
(h, w) patch grid row by row, the tower's token there. Qwen2.5-VL's tower (window attention)
reads the merge blocks window by window, not row by row, through its blocks and its merger (put
back in order only after it): ``vision_order`` and ``projector_order`` follow its windows."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from hookviz.vlm.families.base import ImageTokens, model_type, part, positions_of, qualified_name, register_vlm_family

__all__ = ["Qwen2Vl"]

CLASSES = ("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration")


def _merge(model) -> int:
    return int(model.config.vision_config.spatial_merge_size)


def _block_places(model, inputs: Mapping) -> torch.Tensor | None:
    """Qwen2.5-VL: for each merge block of the first image, row by row, its place among the tower's
    blocks, which run window by window (transformers' own window index); ``None`` for Qwen2-VL,
    whose tower reads them row by row."""
    vision = model.config.vision_config
    window = getattr(vision, "window_size", None)
    if not window:
        return None
    grid = inputs["image_grid_thw"][:1]
    merge, patch = _merge(model), int(vision.patch_size)
    try:
        from transformers.vision_utils import get_vision_window_index
    except ImportError:  # transformers 4: the tower's own method
        index, _ = part(model, "model.visual", "visual").get_window_index(grid)
    else:
        index, _ = get_vision_window_index(grid, spatial_merge_size=merge, window_size=int(window), patch_size=patch)
    return torch.argsort(torch.as_tensor(index))


def _grids(inputs: Mapping) -> list[tuple[int, int]]:
    """Each image's (h, w) patch grid, as ``image_grid_thw`` gives it (a photo's t is 1)."""
    return [(int(h), int(w)) for _t, h, w in inputs["image_grid_thw"].tolist()]


@register_vlm_family
class Qwen2Vl:
    name = "qwen2_vl"

    def matches(self, model) -> bool:
        return type(model).__name__ in CLASSES or model_type(model) in ("qwen2_vl", "qwen2_5_vl")

    def vision_grid(self, model, inputs: Mapping) -> tuple[int, int]:
        return _grids(inputs)[0]

    def vision_order(self, model, inputs: Mapping) -> torch.Tensor:
        """(h * w,) long: for each patch of the first image's grid, row by row, its index among
        the tower's tokens (which run merge block by merge block)."""
        (height, width), merge = self.vision_grid(model, inputs), _merge(model)
        rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        block = (rows // merge) * (width // merge) + cols // merge
        places = _block_places(model, inputs)
        if places is not None:  # Qwen2.5-VL: the blocks window by window
            block = places[block]
        return (block * merge * merge + (rows % merge) * merge + cols % merge).flatten()

    def projector_order(self, model, inputs: Mapping) -> torch.Tensor:
        """(h/2 * w/2,) long: for each of the first image's tokens, row by row, its index among the
        merger's outputs (Qwen2.5-VL's run window by window; Qwen2-VL's row by row)."""
        (height, width), merge = self.vision_grid(model, inputs), _merge(model)
        places = _block_places(model, inputs)
        return places if places is not None else torch.arange((height // merge) * (width // merge))

    def photo_pixels(self, model, inputs: Mapping, summed: bool = False) -> torch.Tensor:
        """(C, H, W): the first image's pixel values laid back as a photo. The processor gives
        each patch as a row of (C, temporal, P, P) values, merge block by merge block; a photo's
        temporal copies are the same pixels: the first is taken, or with ``summed`` (an
        attribution to the pixel values) their sum."""
        (height, width), merge = self.vision_grid(model, inputs), _merge(model)
        vision = model.config.vision_config
        side, channels = int(vision.patch_size), int(getattr(vision, "in_channels", 3))
        patches = inputs["pixel_values"][: height * width].reshape(
            height // merge, width // merge, merge, merge, channels, -1, side, side
        )
        patches = patches.sum(5) if summed else patches[:, :, :, :, :, 0]
        return patches.permute(4, 0, 2, 5, 1, 3, 6).reshape(channels, height * side, width * side)

    def image_tokens(self, model, inputs: Mapping) -> list[ImageTokens]:
        merge, found = _merge(model), []
        token = int(model.config.image_token_id)
        for positions, (height, width) in zip(positions_of(inputs["input_ids"], token), _grids(inputs)):
            found.append(ImageTokens(positions, (height // merge, width // merge)))
        return found

    def default_layers(self, model) -> dict[str, str]:
        tower = part(model, "model.visual", "visual")
        return {"vision": qualified_name(model, tower.blocks[-1]), "projector": qualified_name(model, tower.merger)}

    def language_layers(self, model) -> list[str]:
        language = part(model, "model.language_model", "model")
        return [qualified_name(model, layer) for layer in language.layers]
