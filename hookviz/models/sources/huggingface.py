"""Hugging Face transformers image classifiers: ``--model hf:ORG/NAME`` (or ``hf:FOLDER``
for a model saved with ``save_pretrained``). A VideoMAE video classifier is a clip model
(see ``hf_video``).

The repository is read from the Hugging Face cache (see ``hub``) and downloaded into it
only when the hub is reachable. ``--weights DEFAULT`` loads the repository's weights;
``none`` builds the model from its config, randomly initialised and seeded; a file is a
state_dict or ``.safetensors`` of the transformers model. Preprocessing comes from the
repository's image processor, class names from the config's ``id2label``, and the logits
from the output's ``.logits`` (``tasks.classify`` reads them). A checkpoint made for
another task (``SegformerForSemanticSegmentation``), or a classifier whose checkpoint lacks its
head (transformers would give it a random one), is refused. A bare backbone (``ViTModel``,
``Dinov2Model``) is an embedding model (``hf_backbones``), explained with ``--target-image``.

A ``CLIPModel`` or ``SiglipModel`` checkpoint is explained through text prompts
(``--prompt TEXT``), as open_clip's CLIP models are: see ``hf_clip``.

A repository that names its own Python code (an ``auto_map`` in its config.json,
preprocessor_config.json, or a CLIP's tokenizer_config.json) is refused before transformers reads it, and transformers is
always told ``trust_remote_code=False``: left to itself it would ask at a terminal whether
to run the code, and hookviz never runs downloaded code.

transformers is an optional extra, imported only when an ``hf:`` name is loaded.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import re
from collections.abc import Sequence
from pathlib import Path

from hookviz.errors import UnknownModelError, WeightsError, arg, first_line
from hookviz.inputs.images import INTERPOLATIONS, Preprocessing
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import LoadedModel, register_source, seeded, weights_kind, weights_only_loads
from hookviz.models.sources.hf_files import config_categories, state_dict_file

__all__ = ["HuggingFaceSource", "PREFIX", "hf_preprocessing"]

PREFIX = "hf:"
INSTALL = "pip install 'hookviz[hf]'"
_CLASSIFIERS = ("ForImageClassification", "ForImageClassificationWithTeacher", "ForVideoClassification")
#: The files whose ``auto_map`` names a repository's own code for what hookviz loads.
_CODE_MAPS = ("config.json", "preprocessor_config.json")
#: PIL's resampling numbers, as image processors store them.
_PIL_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _installed() -> bool:
    return importlib.util.find_spec("transformers") is not None


def _listed_kind(config: dict) -> str | None:
    """What a cached repository's config.json (read as JSON: transformers is not imported to
    list them) makes it: ``classifier``, ``text`` (a CLIP or SigLIP, explained through text
    prompts), ``backbone`` (``ViTModel``, ``Dinov2Model``: an embedding), or ``None`` (not
    listed), as ``load`` tells them apart (``hf_clip.text_tower``, ``hf_backbones.is_backbone``)."""
    from hookviz.models.sources.hf_backbones import bare

    architectures = [str(a) for a in config.get("architectures") or ()]
    if any(a.endswith(_CLASSIFIERS) for a in architectures):
        return "classifier"
    if config.get("model_type") in ("clip", "siglip"):
        return "text"
    if "text_config" not in config and bare(architectures):
        return "backbone"
    return None


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
    #: A CLIP or SigLIP checkpoint has a text tower: ``load`` takes the prompts it is explained by.
    takes_prompts = True

    def __init__(self):
        self._listed: dict[str, dict] = {}

    def about(self) -> str:
        from hookviz.models.sources.hub import cache_folder

        where = f"image classifiers, CLIP/SigLIP and backbones in the Hugging Face cache ({cache_folder()})"
        if not _installed():
            return f"Hugging Face transformers: --model hf:ORG/NAME, {where} (not installed: {INSTALL})"
        return f"Hugging Face transformers: --model hf:ORG/NAME, {where}"

    def claims(self, name: str) -> bool:
        return name.startswith(PREFIX)

    def names(self) -> list[str]:
        """The image classifiers, CLIP and SigLIP models and bare backbones already in the
        cache (any other repository loads too)."""
        from hookviz.models.sources.hub import cached_repos

        if not _installed():
            return []
        self._listed = {PREFIX + repo: config for repo, config in cached_repos() if _listed_kind(config)}
        return list(self._listed)

    def describe(self, name: str) -> str:
        config = self._listed.get(name) or {}
        kind, model_type = _listed_kind(config), config.get("model_type", "?")
        if kind == "text":  # what each needs said, as ``hookviz models`` lists them
            return f"{model_type}, text tower: needs {arg('prompts', 'TEXT')}, cached"
        if kind == "backbone":
            return f"{model_type}, backbone (embedding): needs {arg('target_image', 'PATH')}, cached"
        labels = config.get("id2label") or {}
        return f"{model_type}, {len(labels)} classes, cached" if config else ""

    def task_of(self, name: str) -> str:
        from hookviz.tasks import DEFAULT_TASK
        from hookviz.tasks.embed import Embed

        return Embed.name if _listed_kind(self._listed.get(name) or {}) == "backbone" else DEFAULT_TASK

    def load(
        self, name: str, weights: str, seed: int, trust_checkpoint: bool = False, prompts: Sequence[str] | None = ()
    ) -> LoadedModel:
        _import_transformers(name)
        repo = name[len(PREFIX) :].strip()
        if not repo:
            raise UnknownModelError(f"{arg('model', name)}: give a repository, such as hf:google/vit-base-patch16-224")
        kind = weights_kind(weights)
        where = _Where(name, repo, pretrained=kind == "default")
        from hookviz.models.sources import hf_vlm

        listed = hf_vlm.read_config(where)
        if hf_vlm.is_vision_language(listed):  # LLaVA and the others: explained token by token (hookviz.vlm)
            return hf_vlm.load(where, weights, seed, prompts)
        hf_vlm.refuse_text_only(where, listed, prompts)
        config = where.config()
        from hookviz.models.sources import hf_clip
        from hookviz.models.sources.hf_backbones import is_backbone, load_backbone

        if hf_clip.text_tower(config) is not None or prompts:
            return hf_clip.load(where, config, weights, seed, prompts)
        from hookviz.models.sources.hf_video import is_video, load_video

        if is_video(config):  # VideoMAE: a clip model
            return load_video(where, config, weights, seed, self.name)
        if is_backbone(config):  # ViTModel, Dinov2Model: an embedding, explained with --target-image
            return load_backbone(name, where, config, weights, seed, source=self.name)
        loading: tuple[str, ...] = ()
        if kind == "default":
            model, loading = where.pretrained(seed)
            loaded = LoadedWeights(f"DEFAULT ({repo}, {where.origin})", None)
        else:
            model = where.from_config(config, seed)
            loaded = (
                LoadedWeights(f"none (random init, seed {seed})", None) if kind == "none" else state_dict_file(model, weights)
            )
        preprocessing, notes = where.preprocessing()
        from hookviz.anatomy.attention_blocks import transformers_attention

        return LoadedModel(
            name,
            model,
            loaded.label,
            config_categories(config),
            preprocessing,
            source=self.name,
            notes=loading + notes + loaded.notes,
            weights_sha256=loaded.sha256,
            declared_attention=transformers_attention(model),
        )


class _Where:
    """Where an ``hf:`` model's files come from (a folder, or the hub through its cache),
    and the one-line errors when they cannot be had."""

    def __init__(self, name: str, repo: str, pretrained: bool):
        from hookviz.models.sources.hub import cache_folder, offline

        self.name, self.repo, self.pretrained_weights = name, repo, pretrained
        # What a missing file is blamed on: the weights asked for, or the model (its config).
        self.label = arg("weights", "DEFAULT") if pretrained else arg("model", name)
        self.folder = Path(repo).expanduser()
        if repo.startswith((".", "/", "~")) and not self.folder.is_dir():  # meant as a folder, not a hub name
            raise UnknownModelError(
                f"{arg('model', name)}: {self.folder} is not a folder; give the folder save_pretrained wrote, or ORG/NAME"
            )
        if self.folder.is_dir():
            self.hub, self.origin = {}, f"folder {self.folder}"
        else:
            self.hub, self.origin = {"cache_dir": str(cache_folder()), "local_files_only": offline()}, "Hugging Face cache"
        self.where = self.folder if not self.hub else self.repo  # how messages name it
        # Never the prompt "Do you wish to run the custom code? [y/N]": the answer is always no.
        self.kwargs = {**self.hub, "trust_remote_code": False}
        self.refuse_custom_code(_CODE_MAPS)

    def file(self, filename: str) -> Path | None:
        """``filename`` in the folder, or in the cache (``None``: not there)."""
        from hookviz.models.sources.hub import cached_file

        path = self.folder / filename if not self.hub else cached_file(self.repo, filename)
        return path if path is not None and path.is_file() else None

    def refuse_custom_code(self, filenames: Sequence[str]) -> None:
        """Refuse a repository whose ``filenames`` name its own Python code, before transformers
        reads them (one not cached yet is refused by transformers itself, told trust_remote_code=False)."""
        for filename in filenames:
            path = self.file(filename)
            try:
                document = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
            except (OSError, ValueError):
                continue  # unreadable: transformers says so, in its own words
            if isinstance(document, dict) and document.get("auto_map"):
                raise self._custom_code(f"auto_map in {filename}")

    def _custom_code(self, why: str) -> UnknownModelError:
        return UnknownModelError(
            f"{arg('model', self.name)}: {self.where} needs its own Python code ({why}), which hookviz never runs; "
            "load the model yourself and pass the module to hookviz.explain"
        )

    def _fail(self, exc: Exception) -> Exception:
        from hookviz.models.sources.hub import not_cached, offline

        text = first_line(exc)
        if "trust_remote_code" in str(exc):
            return self._custom_code("trust_remote_code")
        if self.hub:
            reason = "and HF_HUB_OFFLINE is set" if offline() else f"and loading failed ({text})"
            needs = None if self.pretrained_weights else "as hookviz needs its config.json with any weights"
            return not_cached(self.label, self.repo, reason, needs)
        return WeightsError(f"{self.label}: cannot load {self.folder} ({text})")

    def config(self):
        from transformers import AutoConfig, AutoModelForImageClassification

        from hookviz.models.sources.hub import quiet

        try:
            with quiet():
                config = AutoConfig.from_pretrained(str(self.repo), **self.kwargs)
        except (OSError, ValueError) as exc:
            raise self._fail(exc) from None
        from hookviz.models.sources.hf_video import is_video

        if type(config) not in AutoModelForImageClassification._model_mapping and not is_video(config):
            raise UnknownModelError(
                f"{arg('model', self.name)}: {self.repo} is a {config.model_type!r} model, which transformers "
                "has no image classifier for (nor a video classifier); hookviz explains image and video classifiers"
            )
        self._refuse_other_task(config)
        return config

    def _refuse_other_task(self, config) -> None:
        """Refuse a checkpoint its config says was made for another task: transformers would
        load its backbone into an image classifier and put a random head on it."""
        architectures = [str(a) for a in getattr(config, "architectures", None) or ()]
        if not architectures or any(a.endswith(_CLASSIFIERS) for a in architectures):
            return
        for architecture in architectures:
            task = re.search(r"For([A-Z]\w*)$", architecture)
            if task is None:
                continue  # a bare backbone (ViTModel): the missing head is found as its weights load
            words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", task.group(1)).lower()
            also = (
                " (torchvision's, such as deeplabv3_resnet50, are explained as segmentation)" if "segmentation" in words else ""
            )
            raise UnknownModelError(
                f"{arg('model', self.name)}: {self.where} is a {words} model ({architecture}), not an image "
                f"classifier; hookviz explains transformers' image classifiers{also}"
            )

    def pretrained(self, seed: int, auto=None):
        """The model with the checkpoint's weights, and a note when some were not in it.

        Args:
            auto: the transformers auto class to load it with (``AutoModel`` for a CLIP);
                ``None``: an image classifier, whose head must be in the checkpoint.

        Raises:
            UnknownModelError: the checkpoint has no classifier head.
        """
        from transformers import AutoModelForImageClassification

        model, missing = self.from_pretrained(auto or AutoModelForImageClassification, seed)
        return model, self._missing(model, missing, classifier=auto is None)

    def from_pretrained(self, auto, seed: int):
        """The model ``auto`` (a transformers auto class) makes of the checkpoint, in float32,
        and the names of its weights the checkpoint lacks."""
        import torch
        from safetensors import SafetensorError

        from hookviz.models.sources.hub import quiet

        try:
            # quiet(): transformers' own load report (a table in terminal colours) stays off
            # stderr; what it says that matters is raised or noted here, in hookviz's words.
            with seeded(seed), weights_only_loads(), quiet():
                model, info = auto.from_pretrained(str(self.repo), dtype=torch.float32, output_loading_info=True, **self.kwargs)
        except pickle.UnpicklingError:
            raise WeightsError(
                f"{self.label}: {self.where}'s weights file holds pickled Python objects that could run code when "
                "loaded, so it was not loaded (weights_only=True) and nothing ran; re-save the model with "
                "save_pretrained (safetensors)"
            ) from None
        except (OSError, ValueError, RuntimeError) as exc:
            raise self._fail(exc) from None
        except SafetensorError as exc:  # a model.safetensors cut short
            raise WeightsError(
                f"{self.label}: {self.where}'s weights file is not readable safetensors ({first_line(exc)}); "
                "is it cut short? save it again with save_pretrained"
            ) from None
        # a float16 checkpoint: gradients and CAMs are computed in float32
        return model.float(), sorted(info.get("missing_keys") or ())

    def _missing(self, model, missing: list[str], classifier: bool = True) -> tuple[str, ...]:
        head = sorted(set(missing) & _head_weights(model)) if classifier else []
        if head:
            raise UnknownModelError(
                f"{arg('model', self.name)}: {self.where} has no classifier head ({', '.join(head[:4])} not in "
                "the checkpoint: transformers would initialise them at random), and hookviz explains a class's "
                "logit; choose a checkpoint fine-tuned for image classification"
            )
        if not missing:
            return ()
        listed = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return (f"{len(missing)} of the model's weights are not in {self.where} and were initialised at random: {listed}",)

    @staticmethod
    def from_config(config, seed: int, auto=None):
        """``config``'s model, randomly initialised from ``seed`` (``auto``: as ``pretrained``'s)."""
        from transformers import AutoModelForImageClassification

        with seeded(seed):
            return (auto or AutoModelForImageClassification).from_config(config, trust_remote_code=False).float()

    def preprocessing(self) -> tuple[Preprocessing, tuple[str, ...]]:
        from transformers import AutoImageProcessor

        from hookviz.models.sources.hub import quiet

        try:
            with quiet():
                processor = AutoImageProcessor.from_pretrained(str(self.repo), **self.kwargs)
        except (OSError, ValueError, KeyError) as exc:
            return Preprocessing(), (f"{self.repo} has no usable image processor ({first_line(exc)}); ImageNet defaults used",)
        return hf_preprocessing(processor, self.name)


def _head_weights(model) -> set[str]:
    """The weights of the layers that give the logits: each linear layer with one output per
    class (``classifier``, ``classifier.1``, DeiT's ``cls_classifier`` and ``distillation_classifier``)."""
    import torch.nn as nn

    classes = model.config.num_labels
    return {
        f"{name}.{weight}" if name else weight
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and module.out_features == classes
        for weight, _ in module.named_parameters(recurse=False)
    }


def _get(size, key: str):
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(value) if value else None


def _interpolation(resample) -> str:
    value = getattr(resample, "value", resample)
    name = value if isinstance(value, str) else _PIL_FILTERS.get(value, "bilinear")
    return name if name in INTERPOLATIONS else "bilinear"


def hf_preprocessing(processor, name: str = "hf:") -> tuple[Preprocessing, tuple[str, ...]]:
    """An image processor's resize, crop and normalisation as a ``Preprocessing``, and notes
    where hookviz can only approximate it; where it need not, the processor is kept on it
    (``Preprocessing.transform``). One that resizes nothing, or names no size hookviz reads
    (a longest edge, a pixel budget), is applied as it is (``inputs.transforms``; ``name``,
    the model's, is what its errors name).

    Raises:
        UnknownModelError: a processor applied as it is fails on a probe photo.
    """
    from dataclasses import replace

    from hookviz.inputs.transforms import WeightsTransform, applied_preprocessing

    origin = f"the image processor {type(processor).__name__}"
    size = getattr(processor, "size", None) or {}
    if not getattr(processor, "do_resize", True) or not any(_get(size, k) for k in ("height", "shortest_edge")):
        return applied_preprocessing(processor, origin, name)
    processing, notes = _read_processor(processor)
    if notes:  # approximated: the processor would not describe the fields
        return processing, notes
    return replace(processing, transform=WeightsTransform(processor, origin)), notes


def _read_processor(processor) -> tuple[Preprocessing, tuple[str, ...]]:
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
            notes.append(
                f"the image processor keeps the aspect ratio (shortest edge {shortest}); hookviz crops the centre square"
            )
        return Preprocessing(resize=shortest, size=crop_height or shortest, **common), tuple(notes)
    # a height (hf_preprocessing applies a processor that names neither as it is)
    if width and width != height:
        notes.append(f"the image processor resizes to {height}x{width}; hookviz feeds {height}x{height}")
    if crop_height and crop_height != height:
        notes.append(f"the image processor squashes to {height} and crops {crop_height}; hookviz crops the centre")
        return Preprocessing(resize=height, size=crop_height, **common), tuple(notes)
    return Preprocessing(resize=height, size=height, mode="whole", **common), tuple(notes)
