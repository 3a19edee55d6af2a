"""Which photos of a vision-language model's run are done already (``--skip-existing``): a photo
whose folder holds a report.json of this photo (its bytes' SHA-256), made by this run's recipe
(the model, its weights, the prompt, what is explained and how, the dtype, the largest photo
taken), with every file the report lists there and whole. A report written before hookviz kept
the recipe is redone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VlmRecipe", "recipe_of"]


def recipe_of(request, dtype: str, max_pixels: int) -> dict:
    """What a photo's report.json keeps of how it was made (``recipe``), less the photo's hash."""
    return {
        "prompt": request.prompt,
        "answer": request.answer,
        "max_new_tokens": request.max_new_tokens,
        "tokens": request.tokens,
        "words": request.words,
        "methods": list(request.methods),
        "layers": list(request.layers),
        "objective": request.objective,
        "steps": request.steps,
        "dtype": dtype,
        "max_pixels": max_pixels,
    }


@dataclass(frozen=True)
class VlmRecipe:
    """A run's recipe, to tell a photo done already by it (``made``)."""

    model: str
    weights: str
    recipe: dict
    save_tensors: bool

    def made(self, folder: Path, photo: Path) -> dict | None:
        """The report.json in ``folder`` when it is of ``photo`` made by this recipe, with every
        file it lists there and whole; else ``None``. Raises nothing."""
        from hookviz.inputs.identity import file_sha256
        from hookviz.store.vlm_files import REPORT_KIND

        try:
            document = json.loads((folder / "report.json").read_text(encoding="utf-8"))
            same = (
                isinstance(document, dict)
                and document.get("kind") == REPORT_KIND
                and (document.get("model"), document.get("weights")) == (self.model, self.weights)
                and document.get("recipe") == {**self.recipe, "photo_sha256": file_sha256(photo)}
            )
        except (OSError, ValueError):
            return None
        return document if same and self._files_there(folder, document) else None

    def _files_there(self, folder: Path, document: dict) -> bool:
        from hookviz.store.fingerprints import looks_whole

        pictures = document.get("pictures")
        if not isinstance(pictures, dict) or not isinstance(pictures.get("tokens"), list):
            return False
        names = [pictures.get("strip"), pictures.get("photo"), *pictures["tokens"]]
        if self.save_tensors:
            if document.get("tensors") is None or not looks_whole(folder / str(document["tensors"])):
                return False
        return all(isinstance(name, str) and (folder / name).is_file() for name in names)
