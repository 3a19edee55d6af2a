"""Registry: things hookviz looks up by name (CAM methods, checks), filled by a decorator
in the manner of torchvision's ``register_model``, which likewise refuses a second entry
under a name: two plug-ins must not shadow each other silently."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Generic, TypeVar

from hookviz.errors import UsageError, arg, did_you_mean

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries; ``get`` of an unknown name raises one UsageError naming the option."""

    def __init__(self, argument: str, what: str, extra_choices: tuple[str, ...] = ()):
        self.argument = argument  # the Python argument's name; messages spell it as the caller did
        self.what = what
        self.extra_choices = extra_choices
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
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            choices = ", ".join([*self._entries, *self.extra_choices])
            raise UsageError(
                f"{arg(self.argument, name)}: unknown {self.what}{did_you_mean(name, self._entries)}; choose from {choices}"
            ) from None
