"""Registry: things hookviz looks up by name (tasks, CAM methods, picture kinds, model
sources, sample kinds, checks), filled by a decorator in the manner of torchvision's
``register_model``, which likewise refuses a second entry under a name: two plug-ins must not
shadow each other silently. Every registry is one of these, so each refuses, lists and looks
up alike.

One way to register, for built-ins and plug-ins alike: a module whose import registers its
entries with the registry's decorator. A registry names its built-in modules (``modules``)
and imports them the first time it is read or written, as ``hookviz.plugins`` imports the
modules a user names; no package imports its modules for their side effect. The built-ins
keep the order of ``modules`` whichever of them was imported first; plug-ins come after."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from hookviz.errors import UsageError, arg, did_you_mean

__all__ = ["Registry", "built_in", "registering_built_in"]

T = TypeVar("T")


def built_in(package: str, names: str) -> tuple[str, ...]:
    """The modules ``names`` (separated by white space) of ``package``, for ``Registry(modules=...)``."""
    return tuple(f"{package}.{name}" for name in names.split())


#: Every registry's built-in modules (``Registry(modules=...)``).
_BUILT_IN_MODULES: set[str] = set()


def registering_built_in() -> bool:
    """Whether a registry's built-in module is being imported on this thread (its entries are
    registering), rather than a plug-in or a caller registering its own."""
    return _importing(_BUILT_IN_MODULES) is not None


def _importing(modules) -> str | None:
    """The innermost of ``modules`` whose import is running on this thread's stack, or ``None``."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") in modules:
            return frame.f_globals["__name__"]
        frame = frame.f_back  # type: ignore[assignment]
    return None


class Registry(Generic[T]):
    """Named entries; ``get`` of an unknown name raises one UsageError naming the option.

    Args:
        argument: the option that chooses an entry (``cam``), as messages name it.
        what: what an entry is, in words (``method``).
        extra_choices: names the option takes beside the entries (``none``, ``auto``): no
            entry may take them.
        order: the key ``values()`` sorts the entries by (stable: equal keys keep the order
            they were registered in); ``None``: the order they were registered in.
        modules: the built-in modules that register entries, imported on the registry's
            first use, in this order (which is the entries' order).
    """

    def __init__(
        self,
        argument: str,
        what: str,
        extra_choices: tuple[str, ...] = (),
        order: Callable[[T], Any] | None = None,
        modules: tuple[str, ...] = (),
    ):
        self.argument = argument  # the Python argument's name; messages spell it as the caller did
        self.what = what
        self.extra_choices = extra_choices
        self.order = order
        self.modules = modules
        _BUILT_IN_MODULES.update(modules)
        self._entries: dict[str, T] = {}
        self._ranks: dict[str, int] = {}  # an entry's place: its module's in ``modules``, a plug-in's after them
        self._loaded = not modules
        self._loading = False

    def _load(self) -> None:
        """Import the built-in modules once. Not while one of them is being imported: the
        others may import its names, which do not exist yet, so its decorator's checks see
        what is registered so far (tests/test_registry.py checks the built-ins)."""
        if self._loaded or self._loading or _importing(self.modules) is not None:
            return
        self._loading = True
        try:
            for module in self.modules:
                importlib.import_module(module)
            self._loaded = True
        finally:
            self._loading = False

    def _rank(self) -> int:
        """The place of the entry being added: the index in ``modules`` of the module whose
        import registers it (found on the stack), or after every built-in for a plug-in."""
        module = _importing(self.modules)
        return len(self.modules) if module is None else self.modules.index(module)

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that enters its argument under ``name``.

        Raises:
            UsageError: ``name`` is taken (by an entry, or by one of the extra choices).
        """
        self.check_free(name)

        def wrap(entry: T) -> T:
            self.add(name, entry)
            return entry

        return wrap

    def add(self, name: str, entry: T) -> T:
        """Enter ``entry`` under ``name``. Raises UsageError when ``name`` is taken."""
        self.check_free(name)
        rank = self._rank()
        self._entries[name] = entry
        self._ranks[name] = rank
        if any(other > rank for other in self._ranks.values()):  # a built-in after a plug-in or a later built-in
            order = sorted(self._entries, key=self._ranks.__getitem__)
            self._entries = {key: self._entries[key] for key in order}
        return entry

    def check_free(self, name: str) -> None:
        """Raise UsageError, naming ``name``, when an entry or an extra choice has it, or when
        it could not be typed as one word of a command line (empty, spaces, commas)."""
        self._load()
        if not isinstance(name, str) or not re.fullmatch(r"[^\s,]+", name):
            raise UsageError(
                f"{name!r} cannot name a {self.what}: {arg(self.argument)} takes it as one word; "
                "give a name without spaces or commas"
            )
        if name in self._entries or name in self.extra_choices:
            raise UsageError(
                f"a {self.what} named {name!r} is already registered ({arg(self.argument, name)} chooses it); "
                "register yours under another name"
            )

    def names(self) -> list[str]:
        """The entries' names, in the order they were registered."""
        self._load()
        return list(self._entries)

    def values(self) -> list[T]:
        """The entries, in the registry's ``order``."""
        self._load()
        entries = list(self._entries.values())
        return entries if self.order is None else sorted(entries, key=self.order)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs, in the order they were registered."""
        self._load()
        return list(self._entries.items())

    def find(self, name: str) -> T | None:
        """The entry called ``name``, or ``None``."""
        self._load()
        return self._entries.get(name)

    def registered(self) -> dict[str, T]:
        """The entries registered so far, without importing the built-in modules."""
        return dict(self._entries)

    def snapshot(self) -> dict[str, T]:
        """The entries as they are now, for ``restore`` (tests that register their own)."""
        self._load()
        return dict(self._entries)

    def restore(self, snapshot: dict[str, T]) -> None:
        """Put back the entries of a ``snapshot``, dropping any registered since."""
        self._entries = dict(snapshot)
        self._ranks = {name: self._ranks.get(name, len(self.modules)) for name in snapshot}

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(self._entries)

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def get(self, name: str) -> T:
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            choices = ", ".join([*self._entries, *self.extra_choices])
            raise UsageError(
                f"{arg(self.argument, name)}: unknown {self.what}{did_you_mean(name, self._entries)}; choose from {choices}"
            ) from None
