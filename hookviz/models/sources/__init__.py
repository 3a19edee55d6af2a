"""Model sources: one module per place models come from (see ``base`` for the interface).

Importing this package registers every source, in the order they are asked.
"""

from hookviz.models.sources.base import SOURCES, LoadedModel, ModelSource, register_source

# Each registers its source. SOURCES sorts them by priority; equal priorities keep this order, so it is not sorted by name.
from hookviz.models.sources import factory, builtin, torchvision_models, torchvision_video  # noqa: F401  # isort: skip
from hookviz.models.sources import timm_models, huggingface, yolo_models, open_clip_models  # noqa: F401  # isort: skip

__all__ = ["SOURCES", "LoadedModel", "ModelSource", "register_source"]
