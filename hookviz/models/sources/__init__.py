"""Model sources: one module per place models come from (see ``base`` for the interface);
``SOURCES`` imports them on first use, and asks them in the order of their priorities.
"""

from hookviz.models.sources.base import SOURCES, LoadedModel, ModelSource, register_source

__all__ = ["SOURCES", "LoadedModel", "ModelSource", "register_source"]
