"""hookviz: see what a PyTorch vision model computes inside.

The library behind the ``hookviz`` command. Importing it is cheap: torch is loaded only
when one of these is first used.

* ``record(model, layers)``: a context manager that records the inputs, outputs and
  gradients of layers around your own forward and backward pass.
* ``explain(model, image, layers=..., target=...)``: the whole ``hookviz run`` pipeline for
  one image, returning an ``Explanation`` with ``.save(dir)`` and ``.figure()``.
* ``load_model(name, weights)``: torchvision, built-in and ``package.module:callable`` models.
"""

__version__ = "0.1.0"

_LAZY = {
    "record": ("recording", "record"),
    "Recording": ("recording", "Recording"),
    "Capture": ("recording", "Capture"),
    "explain": ("explaining", "explain"),
    "Explanation": ("explaining", "Explanation"),
    "load_model": ("models", "load_model"),
    "Preprocessing": ("images", "Preprocessing"),
    "HookvizError": ("errors", "HookvizError"),
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
