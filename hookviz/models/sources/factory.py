"""Models from a user's factory: ``--model package.module:callable``.

The callable takes no arguments and returns an ``nn.Module``, or a ``(module, transform)``
pair whose ``transform`` (a PIL image in, the (C, H, W) float tensor out: torchvision's
``weights.transforms()``, a ``transforms.Compose``, a function) makes each photo the module's
input, applied as it is (``hookviz.inputs.transforms``). The current folder is
importable while the factory is imported and called, as with ``python -m`` and uvicorn,
and taken off ``sys.path`` again afterwards.

A factory that downloads pretrained weights (torchvision's ``weights="DEFAULT"``, timm's
``pretrained=True``) and cannot gets the cache hint of ``--weights DEFAULT`` (see
``downloads``), and a download from the hub gives up at its first network error.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
from collections.abc import Iterator

from hookviz.errors import UnknownModelError, UsageError, arg, describe
from hookviz.inputs.images import Preprocessing
from hookviz.inputs.transforms import applied_preprocessing
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import (
    LoadedModel,
    load_weights_file,
    prefixes,
    refuse_torchscript,
    register_source,
    reset_parameters,
    seeded,
    weights_kind,
)
from hookviz.models.sources.downloads import failed_download

_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@contextlib.contextmanager
def current_folder_importable() -> Iterator[None]:
    folder = os.getcwd()
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


@register_source
class FactorySource:
    name = "factory"
    priority = 50  # after the prefixed sources (timm:, hf:), before bare names
    prefix = None

    def about(self) -> str:
        return "your own model: --model package.module:callable (a function that returns an nn.Module)"

    def claims(self, name: str) -> bool:
        if name.startswith(prefixes()):  # timm:convnext_tiny is timm's, never "import timm"
            return False
        return bool(_FACTORY.match(name)) and not os.path.exists(name)

    def names(self) -> list[str]:
        return []

    def describe(self, name: str) -> str:
        return ""

    def task_of(self, name: str) -> str:
        return "auto"

    def load(self, name: str, weights: str, seed: int, trust_checkpoint: bool = False) -> LoadedModel:
        import torch.nn as nn

        kind = weights_kind(weights)
        from hookviz.models.sources.hub import fail_fast

        with seeded(seed), current_folder_importable(), fail_fast():
            model, transform = _model_and_transform(self._build(name))
            if not isinstance(model, nn.Module):
                raise UnknownModelError(
                    f"{arg('model', name)}: the factory returned {type(model).__name__}, not a torch.nn.Module "
                    "(or a (module, transform) pair)"
                )
            refuse_torchscript(model, arg("model", name))
            if kind == "none":
                import torch

                torch.manual_seed(seed)  # the factory may have used or seeded the generator itself
                reset_parameters(model)
        if kind == "default":
            loaded = LoadedWeights(f"as built by {name}", None)
        elif kind == "none":
            loaded = LoadedWeights(f"none (random init, seed {seed})", None)
        else:
            loaded = load_weights_file(model, weights)
        said: tuple[str, ...] = ()
        processing = Preprocessing()
        if transform is not None:  # its own: applied as it is (a callable hookviz cannot read as resize and crop)
            processing, said = applied_preprocessing(transform, f"{name}'s transform", name)
        return LoadedModel(
            name,
            model,
            loaded.label,
            None,
            processing,
            source=self.name,
            task="auto",
            notes=loaded.notes + said,
            weights_sha256=loaded.sha256,
            sample_kind=_sample_kind(model, name),
        )

    @staticmethod
    def _build(name: str):
        module_name, _, attribute = name.partition(":")
        try:
            target = importlib.import_module(module_name)
        except ImportError as exc:
            raise UnknownModelError(f"{arg('model', name)}: cannot import {module_name!r} ({exc})") from None
        except Exception as exc:  # the user's module failed while importing: name it, in one line
            raise UnknownModelError(f"{arg('model', name)}: importing {module_name!r} failed ({describe(exc)})") from None
        for part in attribute.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise UnknownModelError(f"{arg('model', name)}: module {module_name!r} has no attribute {attribute!r}") from None
        if not callable(target):
            raise UnknownModelError(f"{arg('model', name)}: {attribute!r} is not callable")
        try:
            return target()
        except Exception as exc:  # the factory is the user's code: say which one failed, and how
            raise failed_download(name, exc) or UnknownModelError(
                f"{arg('model', name)}: the factory raised {describe(exc)}"
            ) from None


def _model_and_transform(built) -> tuple:
    """A factory's result as (module, transform): a ``(module, transform)`` pair gives the
    transform that makes a photo the module's input; a module alone has none (``None``)."""
    if isinstance(built, tuple) and len(built) == 2:
        return built
    return built, None


def _sample_kind(model, name: str) -> str:
    """The sample kind a factory's module declares (``hookviz_sample_kind``), else ``photo``.

    Raises:
        UnknownModelError: it names no registered kind (a plug-in not imported?).
    """
    from hookviz.samples import SAMPLE_KINDS, get_sample_kind

    kind = getattr(model, "hookviz_sample_kind", "photo")
    try:
        return get_sample_kind(kind).name
    except UsageError:
        choices = ", ".join(SAMPLE_KINDS.names())
        raise UnknownModelError(
            f"{arg('model', name)}: its hookviz_sample_kind {kind!r} is no registered sample kind ({choices}); "
            "import the plug-in that registers it (HOOKVIZ_PLUGINS)"
        ) from None
