"""Where each photo of a vision-language model's run goes, and which are done already
(``--skip-existing``). As a photo run's (``store.folders.plan_folders``): a photo never takes
or overwrites another photo's folder (each report.json records its photo's
``sample_identity``), and one whose folder holds its result made by this run's recipe (the
model, its weights, the prompt, what is explained and how, the dtype, the largest photo taken),
with every file the report lists there and whole, is done already. A report written before
hookviz kept the recipe is redone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["VlmRecipe", "made_by", "plan_vlm_folders", "recipe_of"]


def recipe_of(request, dtype: str, max_pixels: int) -> dict:
    """What a photo's report.json keeps of how it was made (``recipe``)."""
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


def made_by(path: Path, recipe: dict) -> dict:
    """What a report.json of the photo at ``path`` made by ``recipe`` records of that
    (``store.vlm_files.vlm_report``'s ``made``). Raises OSError when the photo cannot be read."""
    from hookviz.inputs.identity import SampleIdentity

    return {"sample_identity": SampleIdentity.of(path).to_json(), "recipe": recipe}


@dataclass(frozen=True)
class VlmRecipe:
    """A run's recipe, to tell a photo done already by it (``made``)."""

    model: str
    weights: str
    recipe: dict
    save_tensors: bool

    def made(self, folder: Path, report) -> bool:
        """Whether ``report`` (``folder``'s ``VlmReport``, of this photo) was made by this recipe,
        with every file it lists there and whole."""
        from hookviz.store.fingerprints import looks_whole
        from hookviz.store.vlm_files import VlmReport

        if not isinstance(report, VlmReport):  # a photo run's, of this photo
            return False
        if (report.model, report.weights, report.recipe) != (self.model, self.weights, self.recipe):
            return False
        if self.save_tensors and (report.tensors is None or not looks_whole(folder / report.tensors)):
            return False
        names = [report.strip, report.photo, *(target.picture for target in report.targets)]
        return all(name is not None and (folder / name).is_file() for name in names)


def plan_vlm_folders(out: Path, paths, names: dict, recipe: VlmRecipe | None):
    """``store.folders.plan_folders`` for a vision-language model's run, which reads its own
    reports and a photo run's (a folder of another photo's results is never taken)."""
    from hookviz.store.folders import plan_folders

    return plan_folders(out, paths, names, recipe, read=_read_either)


def _read_either(path: Path):
    """A vision-language model's report.json, else a photo run's, else ``None``."""
    from hookviz.store.records import read_report
    from hookviz.store.vlm_files import read_vlm_report

    return read_vlm_report(path) or read_report(path)
