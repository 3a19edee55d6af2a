"""torchvision's classification, segmentation and detection models, through torchvision's
own registry (``list_models``, ``get_model``, ``get_model_weights``): each weights entry
brings its transform and category names.

Segmentation and detection models are built without a separately pretrained backbone
(``weights_backbone=None``) unless their own weights are loaded: nothing is downloaded
that ``--weights`` did not ask for.

``--weights DEFAULT`` reads the torch hub cache and downloads into it when it can; with no
network and no file it fails in one line that says where to put the file. Every load is
``weights_only``: torchvision's loader passes ``weights_only=False``, and PyTorch's
``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` overrides that for the duration of the load.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from hookviz.errors import WeightsError, arg, first_line
from hookviz.inputs.images import Preprocessing
from hookviz.lazy_dynamo import import_torchvision
from hookviz.models.sources.base import LoadedModel, random_or_file, register_source, seeded, weights_kind, weights_only_loads
from hookviz.tasks import DEFAULT_TASK, TASKS, get_task


def _models():
    return import_torchvision().models


def names_by_task() -> dict[str, list[str]]:
    """torchvision's model names, per task (each task says where torchvision keeps its models)."""
    import importlib

    models = _models()
    return {
        name: sorted(models.list_models(module=importlib.import_module(task.torchvision_module)))
        for name, task in TASKS.items()
        if task.torchvision_module is not None
    }


def torchvision_names() -> list[str]:
    """Names of torchvision's models: classifiers, then segmentation, then detection models."""
    return [name for names in names_by_task().values() for name in names]


def task_of(name: str) -> str:
    return next((task for task, names in names_by_task().items() if name in names), DEFAULT_TASK)


def imagenet_categories() -> tuple[str, ...]:
    return tuple(_models().ResNet50_Weights.IMAGENET1K_V1.meta["categories"])


def _required_input_size(model) -> tuple[int, int] | None:
    """The (height, width) a model insists on: torchvision's ViT checks ``image_size``."""
    size = getattr(model, "image_size", None)
    return (size, size) if isinstance(size, int) else None


@register_source
class TorchvisionSource:
    name = "torchvision"
    priority = 90
    prefix = None

    def about(self) -> str:
        return "--model NAME; DEFAULT weights from the torch hub cache"

    def claims(self, name: str) -> bool:
        return name in torchvision_names()

    def names(self) -> list[str]:
        return torchvision_names()

    def describe(self, name: str) -> str:
        return ""

    def task_of(self, name: str) -> str:
        return task_of(name)

    def load(self, name: str, weights: str, seed: int, trust_checkpoint: bool = False) -> LoadedModel:
        models = _models()
        task = task_of(name)
        enum = models.get_model_weights(name)
        kind = weights_kind(weights)
        member = weights if kind == "default" else weights_member(enum, weights)
        if member is not None:
            entry = enum.DEFAULT if kind == "default" else enum[member]
            with seeded(seed):
                model = _pretrained(name, weights, entry)
            categories = tuple(entry.meta.get("categories") or ()) or None
            return self._loaded(name, task, model, f"{member} ({entry})", categories, preprocessing_of(entry, task, True))
        refuse_unknown_weights(enum, weights, kind)
        with seeded(seed):
            model = _untrained(name, None if kind == "none" else weights)
        loaded = random_or_file(model, weights, seed)
        categories = tuple(enum.DEFAULT.meta.get("categories") or ()) or None
        processing = preprocessing_of(enum.DEFAULT, task, False)
        return self._loaded(
            name, task, model, loaded.label, categories, processing, notes=loaded.notes, weights_sha256=loaded.sha256
        )

    def _loaded(self, name, task, model, label, categories, preprocessing, **weights) -> LoadedModel:
        from hookviz.anatomy.attention_blocks import torchvision_attention

        return LoadedModel(
            name,
            model,
            label,
            categories,
            preprocessing,
            source=self.name,
            task=task,
            input_size=_required_input_size(model),
            declared_attention=torchvision_attention(model),
            **weights,
        )


def weights_member(enum, weights: str) -> str | None:
    """The member of the weights enum that ``weights`` names (``IMAGENET1K_V1``, or as torchvision
    spells it, ``ResNet18_Weights.IMAGENET1K_V1``, as its ``get_weight`` takes it); ``None`` for
    any other value (a file)."""
    member = weights.removeprefix(f"{enum.__name__}.")
    return member if member in enum.__members__ else None


def refuse_unknown_weights(enum, weights: str, kind: str) -> None:
    """Refuse a ``--weights`` that names no file and none of the enum's members: a bare word
    (``IMAGENET1K_V9``), or one spelt as the enum's (``ResNet18_Weights.IMAGENET1K_V9``)."""
    as_member = weights.startswith(f"{enum.__name__}.") or not any(c in weights for c in "/\\.")
    if kind == "other" and as_member and not Path(weights).exists():
        names = ", ".join(m for m in enum.__members__ if m != "DEFAULT")
        raise WeightsError(f"{arg('weights', weights)}: not a file, nor one of DEFAULT, none, {names}")


def _untrained(name: str, weights_file: str | None):
    """``name`` with random weights (to be overwritten by ``weights_file`` if given): never a
    pretrained backbone, and with the auxiliary head a segmentation checkpoint holds."""
    import inspect

    models = _models()
    takes = inspect.signature(models.get_model_builder(name)).parameters
    options: dict[str, object] = {}
    if "weights_backbone" in takes:  # segmenters and detectors
        options["weights_backbone"] = None
    if "aux_loss" in takes and weights_file is not None and _has_aux_head(weights_file):
        options["aux_loss"] = True
    return models.get_model(name, weights=None, **options)


def _has_aux_head(path: str) -> bool:
    from hookviz.models.checkpoints import read_state_dict

    return any(key.startswith("aux_classifier.") for key in read_state_dict(Path(path)))


def _pretrained(name: str, weights: str, entry):
    cached = ensure_cached(name, entry.url, weights)
    try:
        with weights_only_loads():
            return _models().get_model(name, weights=entry)
    except pickle.UnpicklingError:
        raise WeightsError(
            f"{arg('weights', weights)}: refused {cached}: it holds pickled Python objects that could run code, "
            "so it was not loaded (weights_only=True) and nothing ran; delete it and fetch it again"
        ) from None
    except (OSError, RuntimeError, ValueError, EOFError) as exc:
        raise WeightsError(
            f"{arg('weights', weights)}: could not load {name}'s weights from {cached} ({first_line(exc)}); "
            f"delete the file to fetch it again, or pass {arg('weights', 'PATH')} to a local state_dict"
        ) from None


def preprocessing_of(entry, task: str = DEFAULT_TASK, pretrained: bool = True) -> Preprocessing:
    """The weights' own eval transform (torchvision records it with each weights entry), as
    the task reads it (``Task.torchvision_preprocessing``): a segmenter's resizes the shorter
    side and crops nothing; a detector's hands the photo over as it is, in [0, 1] (the model
    resizes and normalises it itself); a classifier with other weights gets the usual one.
    The pretrained weights' transform object is kept on it (``Preprocessing.transform``): the
    fields reproduce it, on the same PIL path (tests/test_transforms.py proves it)."""
    from dataclasses import replace

    from hookviz.inputs.transforms import WeightsTransform

    transform = entry.transforms()
    processing = get_task(task).torchvision_preprocessing(transform, pretrained)
    if not pretrained:
        return processing
    return replace(processing, transform=WeightsTransform(transform, f"{entry}'s transforms() ({type(transform).__name__})"))


def ensure_cached(name: str, url: str, weights: str = "DEFAULT") -> Path:
    """Download the weights into the torch hub cache unless they are there already.

    Returns:
        The cached file.

    Raises:
        WeightsError: in one line, when the download is impossible (no network).
    """
    import torch.hub

    target = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        match = torch.hub.HASH_REGEX.search(target.name)
        torch.hub.download_url_to_file(url, str(target), hash_prefix=match.group(1) if match else None, progress=False)
    except Exception as exc:  # urllib raises many kinds; each means "no file"
        raise not_in_torch_hub(arg("weights", weights), f"{name}'s pretrained weights", url, target, first_line(exc)) from None
    return target


def not_in_torch_hub(label: str, what: str, url: str, target, reason: str, alternatives: str | None = None) -> WeightsError:
    """The one-line error for weights that are neither in the torch hub cache nor downloadable.

    Args:
        what: the weights, in words ("resnet18's pretrained weights").
        alternatives: what else to do, when not ``--weights PATH`` or ``none``.
    """
    alternatives = alternatives or f"or pass {arg('weights', 'PATH')} (a local state_dict) or {arg('weights', 'none')}"
    return WeightsError(
        f"{label}: {what} are not in the torch hub cache and downloading them failed ({reason}); "
        f"fetch {url} elsewhere and copy it to {target}, {alternatives}"
    )
