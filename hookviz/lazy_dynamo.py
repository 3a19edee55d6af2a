"""Import torchvision without importing torch._dynamo, which hookviz never uses.

``torchvision.ops.roi_align`` imports ``is_compile_supported`` from ``torch._dynamo.utils``
at module level, and every ``import torchvision`` reaches it (models -> ops). That one line
costs about 1 s of the 1.2 s torchvision takes to import on 2 CPU cores: it loads
TorchDynamo, sympy and the inductor's configuration. torchvision meant to keep dynamo out
of eager-mode processes (pytorch/vision#8436 and #8451 made its torch.compile lazy "to avoid
eagerly importing dynamo"); the later ``is_compile_supported`` import brought it back.

While torchvision is imported, ``torch._dynamo`` and ``torch._dynamo.utils`` are stand-in
modules. ``is_compile_supported`` becomes a function that imports the real one when it is
first called (only roi_align on a deterministic GPU, or without torchvision's C++ ops,
calls it); any other attribute asked of a stand-in imports the real module and returns its
attribute, so nothing behaves differently, it is only sooner. After the import the stand-ins
leave ``sys.modules``: a later ``torch.compile`` or ``import torch._dynamo`` loads the real one.
When torchvision or torch._dynamo is already imported, this is a plain import.

This is a speed trick for the ``hookviz`` command's own process, which ``enable()`` turns
on: in anyone else's process (a notebook, a script using the library) ``import_torchvision``
is a plain ``import torchvision``. Should the stand-ins fail in any way, it falls back to
the plain import.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types

__all__ = ["enable", "import_torchvision"]

_DYNAMO = "torch._dynamo"
_UTILS = "torch._dynamo.utils"
_lock = threading.Lock()
_enabled = False


def enable() -> None:
    """Let ``import_torchvision`` use the stand-ins (the ``hookviz`` command's process only)."""
    global _enabled
    _enabled = True


class _StandIn(types.ModuleType):
    """Answers ``is_compile_supported``; anything else loads the real module."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            # inspect.getmodule() looks at every module's __file__: not a reason to load dynamo.
            raise AttributeError(name)
        _remove_stand_ins()
        return getattr(importlib.import_module(self.__name__), name)


def _is_compile_supported(device_type):
    from torch._dynamo.utils import is_compile_supported

    return is_compile_supported(device_type)


def _remove_stand_ins() -> None:
    for name in (_UTILS, _DYNAMO):
        if isinstance(sys.modules.get(name), _StandIn):
            del sys.modules[name]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(torch.__dict__.get("_dynamo"), _StandIn):
        del torch._dynamo


def import_torchvision() -> types.ModuleType:
    """``import torchvision``; in the command's process (``enable()``), without torch._dynamo."""
    with _lock:
        if not _enabled or "torchvision" in sys.modules or _DYNAMO in sys.modules:
            return importlib.import_module("torchvision")
        import torch  # noqa: F401  (first: torch's own import must never meet the stand-ins)

        before = set(sys.modules)
        try:
            return _import_with_stand_ins()
        except Exception:
            # Anything unexpected (another torchvision, another torch): forget the partial
            # import and do the plain one, which raises the real error if there is one.
            _remove_stand_ins()
            for name in set(sys.modules) - before:
                if name == "torchvision" or name.startswith("torchvision."):
                    del sys.modules[name]
            return importlib.import_module("torchvision")


def _import_with_stand_ins() -> types.ModuleType:
    package = _StandIn(_DYNAMO)
    package.__path__ = []  # a package, so that torch._dynamo.utils can be "in" it
    utils = _StandIn(_UTILS)
    utils.is_compile_supported = _is_compile_supported
    package.utils = utils
    sys.modules[_DYNAMO] = package
    sys.modules[_UTILS] = utils
    try:
        return importlib.import_module("torchvision")
    finally:
        _remove_stand_ins()
