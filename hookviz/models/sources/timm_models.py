"""timm's models by name: ``--model timm:convnext_tiny``, any name ``timm.list_models()``
gives, with or without a pretrained tag (``timm:vit_base_patch16_224.augreg_in21k``).

* ``--weights DEFAULT``: the weights timm names for the model, read from the Hugging Face
  cache (see ``hub``) and downloaded into it only when the hub is reachable; ``none``:
  timm's own random initialisation, seeded; a file: a state_dict or ``.safetensors`` of
  the timm model.
* Preprocessing: timm's data config of the model (input size, interpolation, crop
  fraction, mean and std), so ``resize = floor(size / crop_pct)`` as timm's eval transform.
* Class names: timm's ImageNet label info for ImageNet-1k, -12k and -22k heads (the first
  of each class's WordNet lemmas, as torchvision names them: ``tabby``).
* Input size: a model that cannot take another (a ViT's fixed patch grid, LeViT, MaxViT)
  says so, and a different ``--crop`` fails in one line before anything runs.

timm is an optional extra, imported only when a ``timm:`` name is loaded or listed.
"""

from __future__ import annotations

import importlib.util
import math
import pickle
from pathlib import Path

from hookviz.errors import UnknownModelError, WeightsError, arg, did_you_mean, first_line, hint
from hookviz.inputs.images import INTERPOLATIONS, Preprocessing
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import LoadedModel, random_or_file, register_source, seeded, weights_kind, weights_only_loads

__all__ = ["TimmSource", "PREFIX", "timm_preprocessing", "timm_categories"]

PREFIX = "timm:"
INSTALL = "pip install 'hookviz[timm]'"
#: The file names timm's weights have in a Hugging Face repository, safest first.
HUB_FILES = ("model.safetensors", "pytorch_model.bin")


def _installed() -> bool:
    return importlib.util.find_spec("timm") is not None


def _import_timm(name: str | None = None):
    try:
        from hookviz.lazy_dynamo import import_torchvision

        import_torchvision()  # timm imports torchvision; the fast way when the command is running
        import timm
        import timm.data
    except ImportError:
        raise UnknownModelError(f"{arg('model', name or PREFIX + 'NAME')} needs timm: {INSTALL}") from None
    return timm


@register_source
class TimmSource:
    name = "timm"
    priority = 10  # prefixed names first
    prefix = PREFIX

    def about(self) -> str:
        if not _installed():
            return f"timm's models: --model timm:NAME (timm is not installed: {INSTALL})"
        return f"timm {_import_timm().__version__}: --model timm:NAME; DEFAULT weights from the Hugging Face cache"

    def claims(self, name: str) -> bool:
        return name.startswith(PREFIX)

    def names(self) -> list[str]:
        return [PREFIX + n for n in _import_timm().list_models()] if _installed() else []

    def describe(self, name: str) -> str:
        try:
            cfg = _import_timm().models.get_pretrained_cfg(name[len(PREFIX) :])
        except RuntimeError:
            return ""
        if cfg is None:
            return ""
        size = "x".join(map(str, cfg.input_size[1:]))
        weights = f"DEFAULT {cfg.tag}" if (cfg.hf_hub_id or cfg.url) else "no pretrained weights"
        head = ", no classifier head (an embedding: explain with --target-image)" if cfg.num_classes == 0 else ""
        return f"{size}, {weights}{head}"

    def load(self, name: str, weights: str, seed: int, trust_checkpoint: bool = False) -> LoadedModel:
        timm = _import_timm(name)
        arch = name[len(PREFIX) :]
        if not arch or not timm.is_model(arch):
            known = [PREFIX + n for n in timm.list_models()]
            raise UnknownModelError(
                f"{arg('model', name)}: timm has no such model{did_you_mean(name, known)}; {hint('list_models')}"
            )
        kind = weights_kind(weights)
        if kind == "other" and not Path(weights).exists() and not any(c in weights for c in "/\\."):
            raise WeightsError(
                f"{arg('weights', weights)}: not a file, nor DEFAULT or none; a timm pretrained tag goes "
                f"after a dot in the name: {arg('model', f'{name}.{weights}')}"
            )
        if kind == "default":
            model, label = _pretrained(timm, name, arch, seed)
            loaded = LoadedWeights(label, None)
        else:
            with seeded(seed):
                model = _create(timm, name, arch)
            loaded = random_or_file(model, weights, seed)
        preprocessing, notes = timm_preprocessing(model)
        categories, more = (None, ()) if getattr(model, "num_classes", None) == 0 else timm_categories(model)
        from hookviz.anatomy.attention_blocks import timm_attention

        return LoadedModel(
            name,
            model,
            loaded.label,
            categories,
            preprocessing,
            source=self.name,
            task=_task(model),
            input_size=_required_input_size(model),
            notes=notes + more + loaded.notes,
            weights_sha256=loaded.sha256,
            declared_attention=timm_attention(model),
        )


def _create(timm, name: str, arch: str, **kwargs):
    try:
        return timm.create_model(arch, **kwargs)
    except (RuntimeError, ValueError, TypeError, KeyError, AssertionError) as exc:  # a bad tag, a broken entry
        raise UnknownModelError(f"{arg('model', name)}: timm cannot build {arch} ({first_line(exc)})") from None


def _task(model) -> str:
    """A model without a classifier head (``num_classes=0``: a feature extractor) returns an
    embedding, explained by its similarity to a reference photo (``target_image``)."""
    from hookviz.tasks import DEFAULT_TASK
    from hookviz.tasks.embed import Embed, headless

    return Embed.name if headless(model) else DEFAULT_TASK


def _pretrained(timm, name: str, arch: str, seed: int):
    """Build ``arch`` with the weights timm names for it, found (or fetched) by hookviz and
    handed to timm as a local file, so timm's own fix-ups (resampled position embeddings,
    remapped keys) apply, and every torch.load is weights_only."""
    from hookviz.models.sources.hub import fetch

    label = arg("weights", "DEFAULT")
    try:
        cfg = timm.models.get_pretrained_cfg(arch)
    except RuntimeError as exc:  # an unknown pretrained tag
        raise UnknownModelError(f"{arg('model', name)}: {first_line(exc)}") from None
    if cfg is None or not (cfg.hf_hub_id or cfg.url):
        raise WeightsError(
            f"{label}: timm has no pretrained weights for {arch}; pass {arg('weights', 'none')} or {arg('weights', 'PATH')}"
        )
    if cfg.hf_hub_id:
        repo, _, revision = cfg.hf_hub_id.partition("@")
        path = fetch(repo, (cfg.hf_hub_filename,) if cfg.hf_hub_filename else HUB_FILES, label, revision or None)
        # The hub holds plain state_dicts, also for models whose original weights were .npz files.
        overlay, where = {"file": str(path), "custom_load": False}, f"{repo}, Hugging Face cache"
    else:
        from hookviz.models.sources.torchvision_models import ensure_cached

        path = ensure_cached(name, cfg.url)
        overlay, where = {"file": str(path)}, f"{path.name}, torch hub cache"
    try:
        with seeded(seed), weights_only_loads():
            model = timm.create_model(arch, pretrained=True, pretrained_cfg_overlay=overlay)
    except (pickle.UnpicklingError, OSError, RuntimeError, ValueError, KeyError, EOFError) as exc:
        # timm re-raises torch's refusal as its own error; the refusal's words say which it was.
        if isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc):
            raise WeightsError(
                f"{label}: refused {path}: it holds pickled Python objects that could run code, so it was not "
                "loaded (weights_only=True) and nothing ran; delete it and fetch it again"
            ) from None
        raise WeightsError(
            f"{label}: could not load {arch}'s weights from {path} ({first_line(exc)}); delete the file to "
            f"fetch it again, or pass {arg('weights', 'PATH')} to a local state_dict"
        ) from None
    return model, f"DEFAULT ({cfg.tag or arch}: {where})"


def timm_preprocessing(model) -> tuple[Preprocessing, tuple[str, ...]]:
    """timm's eval transform of ``model`` as a ``Preprocessing``, and notes where it differs;
    where it does not, timm's own transform object (``create_transform(**data_config)``) is
    kept on it (``Preprocessing.transform``)."""
    from dataclasses import replace

    import timm.data

    from hookviz.inputs.transforms import WeightsTransform

    processing, notes = _read_config(model)
    if notes:  # approximated: the object would not describe the fields
        return processing, notes
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    return replace(processing, transform=WeightsTransform(transform, "timm's eval transform")), notes


def _read_config(model) -> tuple[Preprocessing, tuple[str, ...]]:
    import timm.data

    config = timm.data.resolve_model_data_config(model)
    _, height, width = config["input_size"]
    notes = []
    if height != width:
        notes.append(f"timm's input size is {height}x{width}; hookviz feeds squares, so {height}x{height}")
    crop_pct = float(config.get("crop_pct") or 0.875)
    mode = config.get("crop_mode") or "center"
    interpolation = config.get("interpolation") or "bilinear"
    if interpolation not in INTERPOLATIONS:
        notes.append(f"timm's interpolation {interpolation!r} replaced by bilinear")
        interpolation = "bilinear"
    mean, std = _three(config["mean"]), _three(config["std"])
    if mode == "squash" and crop_pct >= 1.0:  # the whole photo, squashed to a square: hookviz's mode="whole"
        return Preprocessing(resize=height, size=height, mean=mean, std=std, mode="whole", interpolation=interpolation), tuple(
            notes
        )
    if mode != "center":
        notes.append(f"timm's crop_mode {mode!r} (crop_pct {crop_pct}) approximated by a centre crop")
    resize = max(height, math.floor(height / crop_pct))
    return Preprocessing(resize=resize, size=height, mean=mean, std=std, interpolation=interpolation), tuple(notes)


def _three(values) -> tuple[float, float, float]:
    values = tuple(float(v) for v in values)
    return values * 3 if len(values) == 1 else values[:3]  # type: ignore[return-value]


def timm_categories(model) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """Class names of an ImageNet head, as torchvision spells them (``tabby``), and a note when there are none."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    classes = getattr(model, "num_classes", 0)
    subset = infer_imagenet_subset(model)
    if subset is None:
        return None, (f"timm knows no names for this model's {classes} classes; targets are class indices",)
    descriptions = ImageNetInfo(subset).label_descriptions()
    offset = int(getattr(model, "pretrained_cfg", {}).get("label_offset") or 0)  # a 'background' class first
    names = ["background"] * offset + [d.split(",")[0].strip() for d in descriptions]
    return (tuple(names[:classes]) if len(names) >= classes else None), ()


def _required_input_size(model) -> tuple[int, int] | None:
    """The (height, width) ``model`` cannot do without: a strict patch embedding's, or the
    input size of a model timm marks ``fixed_input_size``."""
    embed = getattr(model, "patch_embed", None)
    if getattr(embed, "strict_img_size", False) and not getattr(model, "dynamic_img_size", False):
        size = getattr(embed, "img_size", None)
        if size is not None:
            return int(size[0]), int(size[1])
    cfg = getattr(model, "pretrained_cfg", None) or {}
    if cfg.get("fixed_input_size") and cfg.get("input_size"):
        return int(cfg["input_size"][1]), int(cfg["input_size"][2])
    return None
