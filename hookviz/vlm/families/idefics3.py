"""Idefics3 and SmolVLM (``Idefics3ForConditionalGeneration``, ``SmolVLMForConditionalGeneration``):
image splitting. The processor scales a photo to multiples of the tower's square size and cuts
it into rows x cols tiles, row by row, then adds the whole photo scaled to one tile (the global
tile) last. The tower reads each tile alone; the connector's pixel shuffle makes each
``scale_factor`` x ``scale_factor`` block of a tile's patches one token, row by row, so a tile
gives n x n tokens, where n = tile / patch / scale_factor.

In the prompt, each tile is ``<fake_token_around_image><row_r_col_c>`` then its n * n image
tokens; a line break ends each row of tiles; the global tile comes after
``<fake_token_around_image><global-img>``. A photo too small to split is the global tile alone.
The family reads the rows from the prompt: two tiles whose image tokens are two tokens apart
(the fake token and the tile's tag) sit side by side; a wider gap (a line break) starts a row.

The photo's grid is the tiles' tokens side by side (rows * n, cols * n); the global tile's
tokens, a coarser view of the whole photo, are not in it. ``vision_order`` does the same for the
tower's patches."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from hookviz.vlm.families.base import ImageTokens, model_type, part, positions_of, qualified_name, register_vlm_family

__all__ = ["Idefics3"]

CLASSES = ("Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration")
#: Between two tiles of one row: the fake token and the next tile's ``<row_r_col_c>``.
SIDE_BY_SIDE = 2


def _runs(positions: torch.Tensor) -> list[torch.Tensor]:
    """``positions`` (sorted) cut where they stop being consecutive."""
    breaks = (torch.nonzero(positions.diff() != 1).flatten() + 1).tolist()
    return list(torch.tensor_split(positions, breaks)) if positions.numel() else []


def _tiles(runs: list[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
    """The split tiles' runs (all but the global tile's, or the one run of an unsplit photo) and
    how many rows of tiles they form."""
    if len(runs) == 1:
        return runs, 1
    tiles = runs[:-1]
    gaps = [int(after[0] - before[-1] - 1) for before, after in zip(tiles, tiles[1:])]
    return tiles, 1 + sum(gap != SIDE_BY_SIDE for gap in gaps)


def _mosaic(tiles: list[torch.Tensor], rows: int, side: int) -> torch.Tensor:
    """The tiles' items (each tile ``side`` x ``side``, row by row) as one grid of ``rows`` rows
    of tiles, row by row over the whole grid."""
    cols = len(tiles) // rows
    stacked = torch.stack(tiles).reshape(rows, cols, side, side)
    return stacked.permute(0, 2, 1, 3).reshape(-1)


@register_vlm_family
class Idefics3:
    name = "idefics3"

    def matches(self, model) -> bool:
        return type(model).__name__ in CLASSES or model_type(model) in ("idefics3", "smolvlm")

    def _layout(self, model, input_ids: torch.Tensor) -> tuple[list[torch.Tensor], int, int]:
        """One sequence's tiles' token runs, rows of tiles, and tokens per tile side."""
        tiles, rows = _tiles(_runs(positions_of(input_ids[None], int(model.config.image_token_id))[0]))
        side = math.isqrt(tiles[0].numel()) if tiles else 0
        if not tiles or len(tiles) % rows or any(tile.numel() != side * side for tile in tiles):
            raise ValueError(f"the prompt's image tokens form no grid of square tiles ({[len(t) for t in tiles]})")
        return tiles, rows, side

    def image_tokens(self, model, inputs: Mapping) -> list[ImageTokens]:
        found = []
        for input_ids in inputs["input_ids"]:
            tiles, rows, side = self._layout(model, input_ids)
            grid = (rows * side, len(tiles) // rows * side)
            found.append(ImageTokens(_mosaic(tiles, rows, side), grid))
        return found

    def vision_grid(self, model, inputs: Mapping) -> tuple[int, int]:
        tiles, rows, _side = self._layout(model, inputs["input_ids"][0])
        patches = int(model.config.vision_config.image_size) // int(model.config.vision_config.patch_size)
        return rows * patches, len(tiles) // rows * patches

    def vision_order(self, model, inputs: Mapping) -> torch.Tensor:
        """For each patch of the first photo's tiles side by side, row by row, its index among the
        tower's tokens flattened over (tiles, patches), the tiles in the processor's order."""
        tiles, rows, _side = self._layout(model, inputs["input_ids"][0])
        patches = int(model.config.vision_config.image_size) // int(model.config.vision_config.patch_size)
        indices = torch.arange(len(tiles) * patches * patches)
        return _mosaic(list(indices.reshape(len(tiles), -1)), rows, patches)

    def projector_order(self, model, inputs: Mapping) -> torch.Tensor:
        """For each of the first photo's image tokens, row by row over its grid, its index among
        the connector's tokens flattened over (tiles, tokens): the global tile's left out."""
        tiles, rows, side = self._layout(model, inputs["input_ids"][0])
        return _mosaic(list(torch.arange(len(tiles) * side * side).reshape(len(tiles), -1)), rows, side)

    def photo_pixels(self, model, inputs: Mapping, summed: bool = False) -> torch.Tensor:
        """(C, H, W): the first photo's tiles side by side (its global tile, another scale of the
        photo, left out; ``summed`` changes nothing: each pixel of a tile is in it once)."""
        tiles, rows, _side = self._layout(model, inputs["input_ids"][0])
        pixels = inputs["pixel_values"][0][: len(tiles)]  # (tiles, C, S, S), row by row
        count, channels, height, width = pixels.shape
        laid = pixels.reshape(rows, count // rows, channels, height, width).permute(2, 0, 3, 1, 4)
        return laid.reshape(channels, rows * height, count // rows * width)

    def default_layers(self, model) -> dict[str, str]:
        tower = part(model, "model.vision_model", "vision_model")
        connector = part(model, "model.connector", "connector")
        return {"vision": qualified_name(model, tower.encoder.layers[-1]), "projector": qualified_name(model, connector)}

    def language_layers(self, model) -> list[str]:
        language = part(model, "model.text_model", "text_model")
        return [qualified_name(model, layer) for layer in language.layers]
