"""Hugging Face transformers image classifiers: ``--model hf:ORG/NAME`` (or ``hf:FOLDER``
for a model saved with ``save_pretrained``).

The repository is read from the Hugging Face cache (see ``hub``) and downloaded into it
only when the hub is reachable. ``--weights DEFAULT`` loads the repository's weights;
``none`` builds the model from its config, randomly initialised and seeded; a file is a
state_dict or ``.safetensors`` of the transformers model. Preprocessing comes from the
repository's image processor, class names from the config's ``id2label``, and the logits
from the output's ``.logits`` (``tasks.classify`` reads them). Repositories that need
their own Python code (``trust_remote_code``) are refused: hookviz never runs it.

transformers is an optional extra, imported only when an ``hf:`` name is loaded.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from ..checkpoints import LoadedWeights
from ..errors import UnknownModelError, WeightsError, arg, first_line
from ..images import INTERPOLATIONS, Preprocessing
from .base import LoadedModel, load_weights_file, register_source, seeded, weights_kind, weights_only_loads

__all__ = ["HuggingFaceSource", "PREFIX", "hf_preprocessing"]

PREFIX = "hf:"
INSTALL = "pip install 'hookviz[hf]'"
_CLASSIFIERS = ("ForImageClassification", "ForImageClassificationWithTeacher")
#: PIL's resampling numbers, as image processors store them.
_PIL_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _installed() -> bool:
    return importlib.util.find_spec("transformers") is not None


def _import_transformers(name: str):
    try:
        import transformers
    except ImportError:
        raise UnknownModelError(f"{arg('model', name)} needs transformers: {INSTALL}") from None
    return transformers


@register_source
class HuggingFaceSource:
    name = "hf"
    priority = 20  # prefixed names first
    prefix = PREFIX

    def __init__(self):
        self._listed: dict[str, dict] = {}

    def about(self) -> str:
        from .hub import cache_folder

        where = f"image classifiers in the Hugging Face cache ({cache_folder()})"
        if not _installed():
            return f"Hugging Face transformers: --model hf:ORG/NAME, {where} (not installed: {INSTALL})"
        return f"Hugging Face transformers: --model hf:ORG/NAME, {where}"

    def claims(self, name: str) -> bool:
        return name.startswith(PREFIX)

    def names(self) -> list[str]:
        """The image classifiers already in the cache (any other repository loads too)."""
        from .hub import cached_repos

        if not _installed():
            return []
        self._listed = {
            PREFIX + repo: config for repo, config in cached_repos()
            if any(str(a).endswith(_CLASSIFIERS) for a in config.get("architectures") or ())
        }
        return list(self._listed)

    def describe(self, name: str) -> str:
        config = self._listed.get(name) or {}
        labels = config.get("id2label") or {}
        return f"{config.get('model_type', '?')}, {len(labels)} classes, cached" if config else ""

    def load(self, name: str, weights: str, seed: int) -> LoadedModel:
        _import_transformers(name)
        repo = name[len(PREFIX):].strip()
        if not repo:
            raise UnknownModelError(f"{arg('model', name)}: give a repository, such as hf:google/vit-base-patch16-224")
        kind = weights_kind(weights)
        where = _Where(name, repo, pretrained=kind == "default")
        config = where.config()
        if kind == "default":
            model = where.pretrained(seed)
            loaded = LoadedWeights(f"DEFAULT ({repo}, {where.origin})", None)
        else:
            model = where.from_config(config, seed)
            loaded = LoadedWeights(f"none (random init, seed {seed})", None) if kind == "none" else _state_dict_file(model, weights)
        preprocessing, notes = where.preprocessing()
        return LoadedModel(name, model, loaded.label, _categories(config), preprocessing, source=self.name,
                           notes=notes + loaded.notes, weights_sha256=loaded.sha256)


def _state_dict_file(model, weights: str) -> LoadedWeights:
    try:
        return load_weights_file(model, weights)
    except WeightsError as error:
        # transformers renames a checkpoint's keys as it loads: its own files load through their folder.
        raise WeightsError(
            f"{error}; a checkpoint written by save_pretrained loads with {arg('model', 'hf:FOLDER')} and "
            f"{arg('weights', 'DEFAULT')}"
        ) from None


class _Where:
    """Where an ``hf:`` model's files come from (a folder, or the hub through its cache),
    and the one-line errors when they cannot be had."""

    def __init__(self, name: str, repo: str, pretrained: bool):
        from .hub import cache_folder, offline

        self.name, self.repo, self.pretrained_weights = name, repo, pretrained
        # What a missing file is blamed on: the weights asked for, or the model (its config).
        self.label = arg("weights", "DEFAULT") if pretrained else arg("model", name)
        self.folder = Path(repo).expanduser()
        if repo.startswith((".", "/", "~")) and not self.folder.is_dir():  # meant as a folder, not a hub name
            raise UnknownModelError(
                f"{arg('model', name)}: {self.folder} is not a folder; give the folder save_pretrained wrote, or ORG/NAME"
            )
        if self.folder.is_dir():
            self.kwargs, self.origin = {}, f"folder {self.folder}"
        else:
            self.kwargs, self.origin = {"cache_dir": str(cache_folder()), "local_files_only": offline()}, "Hugging Face cache"

    def _fail(self, exc: Exception) -> Exception:
        from .hub import not_cached, offline

        text = first_line(exc)
        if "trust_remote_code" in str(exc):
            return UnknownModelError(
                f"{arg('model', self.name)}: {self.repo} needs its own Python code (trust_remote_code), which "
                "hookviz does not run; load it yourself and pass the module to hookviz.explain"
            )
        if self.kwargs:
            reason = "and HF_HUB_OFFLINE is set" if offline() else f"and loading failed ({text})"
            needs = None if self.pretrained_weights else "as hookviz needs its config.json with any weights"
            return not_cached(self.label, self.repo, reason, needs)
        return WeightsError(f"{self.label}: cannot load {self.folder} ({text})")

    def config(self):
        from transformers import AutoConfig, AutoModelForImageClassification

        from .hub import quiet

        try:
            with quiet():
                config = AutoConfig.from_pretrained(str(self.repo), **self.kwargs)
        except (OSError, ValueError) as exc:
            raise self._fail(exc) from None
        if type(config) not in AutoModelForImageClassification._model_mapping:
            raise UnknownModelError(
                f"{arg('model', self.name)}: {self.repo} is a {config.model_type!r} model, which transformers "
                "has no image classifier for; hookviz explains image classifiers"
            )
        return config

    def pretrained(self, seed: int):
        import torch
        from transformers import AutoModelForImageClassification

        from .hub import quiet

        try:
            with seeded(seed), weights_only_loads(), quiet():
                model = AutoModelForImageClassification.from_pretrained(str(self.repo), dtype=torch.float32, **self.kwargs)
            return model.float()  # a float16 checkpoint: gradients and CAMs are computed in float32
        except (OSError, ValueError, RuntimeError) as exc:
            raise self._fail(exc) from None

    @staticmethod
    def from_config(config, seed: int):
        from transformers import AutoModelForImageClassification

        with seeded(seed):
            return AutoModelForImageClassification.from_config(config).float()

    def preprocessing(self) -> tuple[Preprocessing, tuple[str, ...]]:
        from transformers import AutoImageProcessor

        from .hub import quiet

        try:
            with quiet():
                processor = AutoImageProcessor.from_pretrained(str(self.repo), **self.kwargs)
        except (OSError, ValueError, KeyError) as exc:
            return Preprocessing(), (f"{self.repo} has no usable image processor ({first_line(exc)}); ImageNet defaults used",)
        return hf_preprocessing(processor)


def _categories(config) -> tuple[str, ...] | None:
    labels = getattr(config, "id2label", None) or {}
    names = [str(labels.get(i, labels.get(str(i), ""))) for i in range(len(labels))]
    if not names or all(re.fullmatch(r"LABEL_\d+", n) for n in names):
        return None  # transformers' placeholders: no names at all
    return tuple(names)


def _get(size, key: str):
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(value) if value else None


def _interpolation(resample) -> str:
    value = getattr(resample, "value", resample)
    name = value if isinstance(value, str) else _PIL_FILTERS.get(value, "bilinear")
    return name if name in INTERPOLATIONS else "bilinear"


def hf_preprocessing(processor) -> tuple[Preprocessing, tuple[str, ...]]:
    """An image processor's resize, crop and normalisation as a ``Preprocessing``, and notes
    where hookviz can only approximate it."""
    size, crop_size = getattr(processor, "size", None) or {}, getattr(processor, "crop_size", None) or {}
    height, width, shortest = _get(size, "height"), _get(size, "width"), _get(size, "shortest_edge")
    crop_height = _get(crop_size, "height") if getattr(processor, "do_center_crop", False) else None
    crop_pct = getattr(processor, "crop_pct", None)
    normalise = getattr(processor, "do_normalize", True)
    common = {
        "mean": tuple(processor.image_mean) if normalise else (0.0, 0.0, 0.0),
        "std": tuple(processor.image_std) if normalise else (1.0, 1.0, 1.0),
        "interpolation": _interpolation(getattr(processor, "resample", 2)),
    }
    notes: list[str] = []
    if shortest and crop_pct:  # ConvNeXt's processor: below 384 resize to shortest / crop_pct, crop
        if shortest < 384:
            return Preprocessing(resize=int(shortest / crop_pct), size=shortest, **common), ()
        return Preprocessing(resize=shortest, size=shortest, mode="whole", **common), ()
    if shortest:
        if not crop_height:
            notes.append(f"the image processor keeps the aspect ratio (shortest edge {shortest}); hookviz crops the centre square")
        return Preprocessing(resize=shortest, size=crop_height or shortest, **common), tuple(notes)
    if height:
        if width and width != height:
            notes.append(f"the image processor resizes to {height}x{width}; hookviz feeds {height}x{height}")
        if crop_height and crop_height != height:
            notes.append(f"the image processor squashes to {height} and crops {crop_height}; hookviz crops the centre")
            return Preprocessing(resize=height, size=crop_height, **common), tuple(notes)
        return Preprocessing(resize=height, size=height, mode="whole", **common), tuple(notes)
    return Preprocessing(**common), ("the image processor names no size; 256 then a 224 crop used",)
