"""CAM methods, one module per method, each registering itself (see ``base`` for the
interface). Maps of a layer: ``gradcam``, ``gradcam_plus_plus`` (``gradcam++``), ``layercam``,
``xgradcam``, ``hirescam``, ``eigencam``, ``scorecam``, ``ablationcam``, ``ss-cam`` and ``is-cam``
(Score-CAM smoothed over noisy masks, integrated along a path of masks); maps of the input:
``guided_backprop``, ``guided_gradcam``, ``integrated_gradients`` (``guided-backprop`` ...),
``lrp`` (zennit's relevance propagation, the ``lrp`` extra), ``attnlrp`` (AttnLRP for a
vision transformer, the ``attnlrp`` extra), ``rise`` (random masks) and ``occlusion`` (a sliding
window), which re-score the input many times; maps of a vision transformer's attention, at its
token grid: ``rollout``, ``chefer``, ``legrad``.
A method of one's own is one decorated function (``register_method``); ``--cam`` then takes
its name."""

from hookviz.methods.base import (
    METHODS,
    RESCORING_BATCH,
    RESOLUTIONS,
    MapFigures,
    Method,
    MethodContext,
    get_method,
    method_names,
    register_method,
)

# Each registers itself; --help lists them in this order, so it is not sorted by name.
from hookviz.methods import gradcam, gradcam_plus_plus, layercam, xgradcam, hirescam, eigencam, scorecam, ablationcam  # noqa: F401  # isort: skip
from hookviz.methods import guided_backprop, guided_gradcam, integrated_gradients, lrp, attnlrp  # noqa: F401  # isort: skip
from hookviz.methods import rollout, chefer, legrad  # noqa: F401  # isort: skip
from hookviz.methods import sscam, iscam, rise, occlusion  # noqa: F401  # isort: skip

__all__ = [
    "METHODS",
    "MapFigures",
    "RESCORING_BATCH",
    "RESOLUTIONS",
    "Method",
    "MethodContext",
    "get_method",
    "method_names",
    "register_method",
]
