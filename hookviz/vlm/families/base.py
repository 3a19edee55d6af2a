"""What a vision-language family declares, and the registry of families.

A family (``llava``, ``qwen2_vl``, ``paligemma``, ``idefics3``) says where one image's tokens
sit in the language model's input, the (rows, cols) grid they form, the vision tower's own
patch grid, and its layers, so that a map at a layer of the vision tower or the projector,
or over the image tokens, is mapped back to the photo."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from hookviz.errors import UnknownModelError, arg
from hookviz.registry import Registry, built_in

__all__ = ["ImageTokens", "VLM_FAMILIES", "VlmFamily", "family_of", "register_vlm_family"]


@dataclass(frozen=True)
class ImageTokens:
    """One image's tokens in the language model's input.

    Attributes:
        positions: (n,) long: where they sit in ``input_ids``, row-major over ``grid``.
        grid: the (rows, cols) they form, after any merge (Qwen2-VL's 2x2).
    """

    positions: torch.Tensor
    grid: tuple[int, int]

    def __post_init__(self):
        if self.positions.numel() != self.grid[0] * self.grid[1]:
            raise ValueError(f"{self.positions.numel()} image tokens cannot form a {self.grid[0]}x{self.grid[1]} grid")


class VlmFamily(Protocol):
    """A vision-language architecture, as hookviz reads it.

    A family whose processor or tower does not go row by row over one photo adds, each
    ``(model, inputs)``: ``vision_order`` and ``projector_order`` (for each cell of the grid, row
    by row, the tower's or the projector's token there: Qwen2-VL's merge blocks, Idefics3's
    tiles), and ``photo_pixels`` (the pixel values, or with ``summed`` an attribution to them, laid
    out as the photo, (C, H, W): Qwen2-VL's patches, Idefics3's tiles side by side).
    """

    name: str  # "llava", "qwen2_vl", "paligemma", "idefics3"

    def matches(self, model) -> bool:
        """Whether ``model`` is of this family (by its class name or ``config.model_type``)."""
        ...

    def image_tokens(self, model, inputs: Mapping) -> list[ImageTokens]:
        """One per sequence of ``inputs``: its image's tokens."""
        ...

    def vision_grid(self, model, inputs: Mapping) -> tuple[int, int]:
        """The vision tower's patch grid (rows, cols), as a CAM at a tower layer forms it."""
        ...

    def default_layers(self, model) -> dict[str, str]:
        """``{"vision": name, "projector": name}``: qualified module names to explain at."""
        ...

    def language_layers(self, model) -> list[str]:
        """The language model's decoder layers, first to last (rollout, Chefer's relevancy)."""
        ...


VLM_FAMILIES: Registry[Any] = Registry(
    "model", "vision-language family", modules=built_in("hookviz.vlm.families", "llava qwen2_vl paligemma idefics3")
)


def register_vlm_family(family_class):
    """Class decorator: register one instance of a family under its ``name``."""
    VLM_FAMILIES.add(family_class.name, family_class())
    return family_class


def family_of(model, name: str = "model") -> VlmFamily:
    """The family ``model`` belongs to.

    Raises:
        UnknownModelError: none matches (``name``: the model as the caller named it).
    """
    for family in VLM_FAMILIES.values():
        if family.matches(model):
            return family
    kinds = ", ".join(VLM_FAMILIES.names())
    raise UnknownModelError(
        f"{arg('model', name)}: {type(model).__name__} is no vision-language model hookviz knows ({kinds}); "
        "give a model with a vision tower and a language model"
    )


def positions_of(input_ids: torch.Tensor, token_id: int) -> list[torch.Tensor]:
    """For each row of ``input_ids`` (B, L), the positions holding ``token_id``."""
    return [torch.nonzero(row == token_id).flatten() for row in input_ids]


def model_type(model) -> str:
    """``model.config.model_type`` (``""`` when it has none)."""
    return str(getattr(getattr(model, "config", None), "model_type", "") or "")


def qualified_name(model, module) -> str:
    """``module``'s qualified name in ``model`` (as ``named_modules`` gives it)."""
    for name, candidate in model.named_modules():
        if candidate is module:
            return name
    raise ValueError(f"{type(module).__name__} is not a module of {type(model).__name__}")


def part(model, *names: str):
    """The first of ``names`` (attribute paths, ``model.vision_tower``) that ``model`` has, or ``None``."""
    for path in names:
        found = model
        for attribute in path.split("."):
            found = getattr(found, attribute, None)
            if found is None:
                break
        if found is not None:
            return found
    return None
