"""LLaVA (``LlavaForConditionalGeneration``): a CLIP-like vision tower, a projector of its
patch tokens, and a language model that reads one token per patch where the prompt had its
image token. The processor expands the image token into the vision tower's patch grid, row by
row; with ``vision_feature_select_strategy == "full"`` the class token comes first."""

from __future__ import annotations

from collections.abc import Mapping

from hookviz.vlm.families.base import ImageTokens, model_type, part, positions_of, qualified_name, register_vlm_family

__all__ = ["Llava"]


def _tower(model):
    return part(model, "model.vision_tower", "vision_tower")


@register_vlm_family
class Llava:
    name = "llava"

    def matches(self, model) -> bool:
        return type(model).__name__ == "LlavaForConditionalGeneration" or model_type(model) == "llava"

    def vision_grid(self, model, inputs: Mapping) -> tuple[int, int]:
        vision = model.config.vision_config
        height, width = inputs["pixel_values"].shape[-2:] if "pixel_values" in inputs else (vision.image_size,) * 2
        return int(height) // int(vision.patch_size), int(width) // int(vision.patch_size)

    def image_tokens(self, model, inputs: Mapping) -> list[ImageTokens]:
        grid = self.vision_grid(model, inputs)
        token = int(getattr(model.config, "image_token_id", None) or model.config.image_token_index)
        found = []
        for positions in positions_of(inputs["input_ids"], token):
            if positions.numel() == grid[0] * grid[1] + 1:  # "full": the class token first
                positions = positions[1:]
            found.append(ImageTokens(positions, grid))
        return found

    def default_layers(self, model) -> dict[str, str]:
        tower = _tower(model)
        layers = part(tower, "vision_model.encoder.layers", "encoder.layers")
        chosen = model.config.vision_feature_layer
        index = chosen if isinstance(chosen, int) else chosen[-1]
        # hidden_states[k] is the output of layer k - 1 (hidden_states[0]: the embeddings)
        layer = (index if index >= 0 else len(layers) + 1 + index) - 1
        projector = part(model, "model.multi_modal_projector", "multi_modal_projector")
        return {"vision": qualified_name(model, layers[max(layer, 0)]), "projector": qualified_name(model, projector)}

    def language_layers(self, model) -> list[str]:
        language = part(model, "model.language_model", "language_model.model", "language_model")
        layers = getattr(language, "layers", None) or language.model.layers
        return [qualified_name(model, layer) for layer in layers]
