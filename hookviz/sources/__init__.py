"""Model sources: one module per place models come from (see ``base`` for the interface).

Importing this package registers every source, in the order they are asked.
"""

from .base import SOURCES, LoadedModel, ModelSource, register_source
from . import factory, builtin, torchvision_models, timm_models, huggingface  # noqa: F401  (each registers its source)

__all__ = ["SOURCES", "LoadedModel", "ModelSource", "register_source"]
