"""Plug-ins: modules that register CAM methods, tasks or picture kinds for the command.

A plug-in is an ordinary module whose import registers what it adds (``register_method``,
``register_task``, ``register_kind``). The ``hookviz`` command imports every plug-in before
it reads its options, so that ``--cam``, ``--task`` and ``--pictures`` take their names and
``--help`` lists them. Two ways name one:

* an installed package's entry point in the ``hookviz.plugins`` group
  (``[project.entry-points."hookviz.plugins"] mine = "mypackage.hookviz_plugin"``);
* ``HOOKVIZ_PLUGINS=module[,module...]``, modules importable from the current folder.

Python callers import their plug-in module themselves; nothing here runs on ``import hookviz``.
"""

from __future__ import annotations

import importlib
import os

from hookviz.errors import UsageError, describe

__all__ = ["GROUP", "ENVIRONMENT", "load_plugins"]

GROUP = "hookviz.plugins"
ENVIRONMENT = "HOOKVIZ_PLUGINS"


def load_plugins() -> list[str]:
    """Import every plug-in the environment names; return their module names.

    Raises:
        UsageError: a plug-in cannot be imported (it names the plug-in and where it came from).
    """
    from importlib.metadata import entry_points

    from hookviz.models.sources.factory import current_folder_importable

    named = [(entry.value.split(":")[0], f"entry point {entry.name!r} of {GROUP}") for entry in entry_points(group=GROUP)]
    named += [(module.strip(), f"{ENVIRONMENT}") for module in os.environ.get(ENVIRONMENT, "").split(",") if module.strip()]
    loaded = []
    with current_folder_importable():
        for module, origin in named:
            try:
                importlib.import_module(module)
            except Exception as error:  # a plug-in's own failure: one line, naming it
                raise UsageError(
                    f"plug-in {module!r} ({origin}) cannot be imported: {describe(error)}; fix it, or unset it to run without it"
                ) from None
            loaded.append(module)
    return loaded
