"""hookviz: see what a PyTorch vision model computes inside.

The library behind the ``hookviz`` command. Importing it is cheap: torch is loaded only
when one of these is first used.

* ``record(model, layers)``: a context manager that records the inputs, outputs and
  gradients of layers around your own forward and backward pass.
* ``explain(model, image, layers=..., target=...)``: the whole ``hookviz run`` pipeline for
  one image, returning an ``Explanation`` with ``.save(dir)`` and ``.figure()``.
* ``Explainer.create(load_model(...), ...)``: the same, kept for many images.
* ``load_model(name, weights)``, ``list_models()``, ``list_layers(model)``.
* ``run(images, ModelOptions(...), ...)``: ``hookviz run`` as a function; in a notebook its
  result shows the run's explorer, as ``show_run(folder)`` shows a run folder's.
* ``diff_runs(base, new)``: ``hookviz diff`` as a function; a ``RunDiff`` comes back.
* ``hookviz.trust``: how far to trust a map (deletion and insertion, ROAD, the randomisation
  check); ``explain(..., faithfulness=True, sanity=True)`` and ``run(..., trust=TrustOptions(...))``.

Nothing here changes the caller's process or model: random state, ``sys.path``, backend
flags, the model's mode and its parameters' flags are as they were after every call.
"""

__version__ = "0.2.0"

_LAZY = {
    "record": ("explaining.recording", "record"),
    "Recording": ("explaining.recording", "Recording"),
    "Capture": ("explaining.recording", "Capture"),
    "explain": ("explaining.notebook", "explain"),
    "Explainer": ("explaining.explainer", "Explainer"),
    "Explanation": ("explaining.passes", "Explanation"),
    "LayerResult": ("explaining.passes", "LayerResult"),
    "load_model": ("models.loading", "load_model"),
    "list_models": ("models.loading", "list_models"),
    "LoadedModel": ("models.loading", "LoadedModel"),
    "list_layers": ("anatomy.layers", "list_layers"),
    "Preprocessing": ("inputs.images", "Preprocessing"),
    "ModelOptions": ("options", "ModelOptions"),
    "InputOptions": ("options", "InputOptions"),
    "LayerOptions": ("options", "LayerOptions"),
    "TargetOptions": ("options", "TargetOptions"),
    "DetectOptions": ("tasks", "DetectOptions"),
    "EmbedOptions": ("tasks", "EmbedOptions"),
    "PictureOptions": ("options", "PictureOptions"),
    "RunOptions": ("options", "RunOptions"),
    "CheckOptions": ("options", "CheckOptions"),
    "run": ("runs.runner", "run"),
    "show_run": ("runs.explorer_embed", "show_run"),
    "diff_runs": ("compare.diffing", "diff_runs"),
    "RunDiff": ("compare.measures", "RunDiff"),
    "Tolerances": ("options", "Tolerances"),
    "TrustOptions": ("options", "TrustOptions"),
    "HookvizError": ("errors", "HookvizError"),
    "UsageError": ("errors", "UsageError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hookviz' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
