"""Registry: things hookviz looks up by name (tasks, CAM methods, picture kinds, model
sources, checks), filled by a decorator in the manner of torchvision's ``register_model``,
which likewise refuses a second entry under a name: two plug-ins must not shadow each other
silently. Every registry is one of these, so each refuses, lists and looks up alike."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from hookviz.errors import UsageError, arg, did_you_mean

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries; ``get`` of an unknown name raises one UsageError naming the option.

    Args:
        argument: the option that chooses an entry (``cam``), as messages name it.
        what: what an entry is, in words (``method``).
        extra_choices: names the option takes beside the entries (``none``, ``auto``): no
            entry may take them.
        order: the key ``values()`` sorts the entries by (stable: equal keys keep the order
            they were registered in); ``None``: the order they were registered in.
    """

    def __init__(self, argument: str, what: str, extra_choices: tuple[str, ...] = (), order: Callable[[T], Any] | None = None):
        self.argument = argument  # the Python argument's name; messages spell it as the caller did
        self.what = what
        self.extra_choices = extra_choices
        self.order = order
        self._entries: dict[str, T] = {}

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
        self._entries[name] = entry
        return entry

    def check_free(self, name: str) -> None:
        """Raise UsageError, naming ``name``, when an entry or an extra choice has it, or when
        it could not be typed as one word of a command line (empty, spaces, commas)."""
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
        return list(self._entries)

    def values(self) -> list[T]:
        """The entries, in the registry's ``order``."""
        entries = list(self._entries.values())
        return entries if self.order is None else sorted(entries, key=self.order)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs, in the order they were registered."""
        return list(self._entries.items())

    def find(self, name: str) -> T | None:
        """The entry called ``name``, or ``None``."""
        return self._entries.get(name)

    def snapshot(self) -> dict[str, T]:
        """The entries as they are now, for ``restore`` (tests that register their own)."""
        return dict(self._entries)

    def restore(self, snapshot: dict[str, T]) -> None:
        """Put back the entries of a ``snapshot``, dropping any registered since."""
        self._entries.clear()
        self._entries.update(snapshot)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            choices = ", ".join([*self._entries, *self.extra_choices])
            raise UsageError(
                f"{arg(self.argument, name)}: unknown {self.what}{did_you_mean(name, self._entries)}; choose from {choices}"
            ) from None
