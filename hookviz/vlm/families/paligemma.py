"""PaliGemma (``PaliGemmaForConditionalGeneration``): a SigLIP tower at a fixed square size
(224, 448 or 896 pixels of 14-pixel patches), a linear projector, and a Gemma that reads one
token per patch, row by row, where the processor put its ``<image>`` tokens (before the prompt).
No class token, no merge: the image tokens' grid is the tower's patch grid."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from hookviz.vlm.families.base import ImageTokens, model_type, part, positions_of, qualified_name, register_vlm_family

__all__ = ["PaliGemma"]


def _tower_layers(model):
    tower = part(model, "model.vision_tower", "vision_tower")
    return part(tower, "vision_model.encoder.layers", "encoder.layers")


@register_vlm_family
class PaliGemma:
    name = "paligemma"

    def matches(self, model) -> bool:
        return type(model).__name__ == "PaliGemmaForConditionalGeneration" or model_type(model) == "paligemma"

    def vision_grid(self, model, inputs: Mapping) -> tuple[int, int]:
        vision = model.config.vision_config
        height, width = inputs["pixel_values"].shape[-2:] if "pixel_values" in inputs else (vision.image_size,) * 2
        return int(height) // int(vision.patch_size), int(width) // int(vision.patch_size)

    def vision_order(self, model, inputs: Mapping) -> torch.Tensor:
        """The tower's tokens are its patches row by row: 0, 1, 2, ..."""
        rows, cols = self.vision_grid(model, inputs)
        return torch.arange(rows * cols)

    def image_tokens(self, model, inputs: Mapping) -> list[ImageTokens]:
        grid = self.vision_grid(model, inputs)
        token = int(getattr(model.config, "image_token_id", None) or model.config.image_token_index)
        return [ImageTokens(positions, grid) for positions in positions_of(inputs["input_ids"], token)]

    def default_layers(self, model) -> dict[str, str]:
        projector = part(model, "model.multi_modal_projector", "multi_modal_projector")
        return {"vision": qualified_name(model, _tower_layers(model)[-1]), "projector": qualified_name(model, projector)}

    def language_layers(self, model) -> list[str]:
        language = part(model, "model.language_model", "language_model.model", "language_model")
        return [qualified_name(model, layer) for layer in language.layers]
