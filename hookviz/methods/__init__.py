"""CAM methods, one module per method, each registering itself (see ``base`` for the
interface); ``--help`` lists them in the order imported here. Maps of a layer:

* Grad-CAM's family: ``gradcam``, ``gradcam_plus_plus`` (``gradcam++``), ``layercam``, ``xgradcam``,
  ``hirescam``, ``gradcam_elementwise``, ``eigengradcam``, ``shapley_cam`` (Hessian-vector
  products), ``cam`` (from the classifier's weights), ``finer_cam`` (``finer-cam``, a contrast with the nearest classes), ``smoothgradcam_pp`` (``smoothgradcam++``); ``smoothing`` holds ``--smooth``'s group, which wraps any gradient method; ``time_weights`` holds the clip's
  ``--time-weights`` group several of them share;
* without gradients: ``eigencam``, ``kpca_cam``, ``fem``, ``random_cam`` (a seeded baseline for the
  trust measures);
* re-scoring: ``scorecam``, ``ablationcam``, ``sscam`` (``ss-cam``), ``iscam`` (``is-cam``);
* a vision transformer's attention, at its token grid: ``rollout``, ``chefer``, ``legrad``.

Maps of the input: ``guided_backprop``, ``guided_gradcam``, ``integrated_gradients``, captum's
gradient maps (``saliency``, ``input_x_gradient``, ``deconvolution``, ``deeplift``, ``deeplift_shap``,
``gradient_shap``), ``fullgrad`` and ``refine_cam`` (of many layers), ``lrp`` and ``attnlrp`` (the
``lrp`` and ``attnlrp`` extras), ``rise`` and ``occlusion``, and over superpixels (SLIC, the
``superpixels`` extra, their options shared in ``superpixels``) ``feature_ablation``, ``lime`` and
``kernel_shap``.

A method of one's own is one decorated function (``register_method``); ``--cam`` then takes
its name."""

from hookviz.methods.base import (
    METHODS,
    RESCORING_BATCH,
    RESOLUTIONS,
    ExtraPasses,
    InputGradient,
    MapFigures,
    Method,
    MethodContext,
    NoMap,
    get_method,
    method_names,
    register_method,
)

__all__ = [
    "METHODS",
    "ExtraPasses",
    "InputGradient",
    "MapFigures",
    "RESCORING_BATCH",
    "RESOLUTIONS",
    "Method",
    "MethodContext",
    "NoMap",
    "get_method",
    "method_names",
    "register_method",
]
