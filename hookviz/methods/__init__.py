"""CAM methods, one module per method, each registering itself (see ``base`` for the
interface). Maps of a layer: ``gradcam``, ``gradcam_plus_plus`` (``gradcam++``), ``layercam``,
``xgradcam``, ``hirescam``, ``eigencam``, ``scorecam``, ``ablationcam``; maps of the input:
``guided_backprop``, ``guided_gradcam``, ``integrated_gradients`` (``guided-backprop`` ...),
``lrp`` (zennit's relevance propagation, the ``lrp`` extra), ``attnlrp`` (AttnLRP for a
vision transformer, the ``attnlrp`` extra); maps of a vision transformer's attention, at its
token grid: ``rollout``, ``chefer``, ``legrad``; maps of the input over its superpixels (SLIC, the
``superpixels`` extra, options shared in ``superpixels``): ``feature_ablation``, ``lime``, ``kernel_shap``;
``smoothgradcam_pp`` (``smoothgradcam++``, Grad-CAM++ over noisy copies; its options, which ``--smooth``
shares to wrap any gradient method, in ``smoothing``).
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
from hookviz.methods import feature_ablation, lime, kernel_shap  # noqa: F401  # isort: skip
from hookviz.methods import smoothgradcam_pp  # noqa: F401  # isort: skip

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
