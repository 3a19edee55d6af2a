"""CAM methods, one module per method, each registering itself (see ``base`` for the
interface): ``gradcam``, ``gradcam_plus_plus`` (``gradcam++``), ``layercam``. A method of
one's own is one decorated function (``register_method``); ``--cam`` then takes its name."""

from . import gradcam, gradcam_plus_plus, layercam  # noqa: F401  (each registers itself)
from .base import (
    METHODS,
    RESCORING_BATCH,
    Method,
    MethodContext,
    get_method,
    method_names,
    register_method,
)

__all__ = ["METHODS", "RESCORING_BATCH", "Method", "MethodContext", "get_method", "method_names", "register_method"]
