"""The one family of errors hookviz raises on purpose.

Every message names the argument or file at fault and says what to do, in one line.
The CLI maps each class to an exit code in one place (``cli._exit_code_for``); the
library never prints or exits.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class HookvizError(Exception):
    """Base class: a failure the user can fix. ``str(error)`` is the one line to show."""

    exit_code = 1


class UsageError(HookvizError):
    """An argument is wrong: the run cannot start (exit code 2)."""

    exit_code = 2


class UnknownModelError(UsageError):
    """``--model`` names nothing hookviz can build."""


class UnknownLayerError(UsageError):
    """``--layer`` or ``--layer-type`` matches no module of the model."""


class TargetError(UsageError):
    """``--target`` is out of range or not a class name of the model."""


class WeightsError(UsageError):
    """``--weights`` cannot be read, or does not fit the model."""


class OutputError(UsageError):
    """``--out`` cannot be written."""


class ImageError(HookvizError):
    """One image cannot be read or used; the run goes on with the others (exit code 1)."""


class RecordingError(HookvizError):
    """A layer's values could not be recorded faithfully (for example a module that
    overwrites its own input in place)."""


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type's name when it has none), for one-line errors."""
    lines = str(error).strip().splitlines()
    return lines[0][:limit] if lines else type(error).__name__


def describe(error: BaseException) -> str:
    """``"RuntimeError: first line"`` for an exception from code hookviz does not own."""
    text = first_line(error)
    return type(error).__name__ if text == type(error).__name__ else f"{type(error).__name__}: {text}"


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str:
    """Return ``" (did you mean 'a', 'b'?)"`` for the closest choices, or ``""``."""
    choices = list(dict.fromkeys(choices))
    close = difflib.get_close_matches(word, choices, n=n, cutoff=0.5)
    if not close:
        lowered = word.lower()
        close = [c for c in choices if lowered and lowered in c.lower()][:n]
    if not close:
        return ""
    return " (did you mean " + ", ".join(repr(c) for c in close) + "?)"
