"""The one family of errors hookviz raises on purpose, and how their messages name arguments.

Every message names the argument or file at fault and says what to do, in one line.
The CLI maps each class to an exit code in one place (``command_errors.exit_code_for``); the
library never prints or exits.

A message names an argument the way its caller wrote it: ``--layer features.9`` when
the ``hookviz`` command raised it, ``layers='features.9'`` when a Python call did. Build
those words with ``arg()``; the CLI switches the spelling with ``command_line_spelling()``.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import os
import re
from collections.abc import Iterable, Iterator

__all__ = [
    "HookvizError",
    "UsageError",
    "UnknownModelError",
    "UnknownLayerError",
    "TargetError",
    "WeightsError",
    "OutputError",
    "ComparisonError",
    "SchemaError",
    "ImageError",
    "RecordingError",
    "ModelRunError",
    "AnswerError",
    "MethodError",
    "arg",
    "spell_flag",
    "hint",
    "command_line_spelling",
    "first_line",
    "describe",
    "did_you_mean",
    "display_path",
]


class HookvizError(Exception):
    """Base class: a failure the user can fix. ``str(error)`` is the one line to show."""

    exit_code = 1


class UsageError(HookvizError):
    """An argument is wrong: the run cannot start (exit code 2)."""

    exit_code = 2


class UnknownModelError(UsageError):
    """The model's name names nothing hookviz can build, or its factory failed."""


class UnknownLayerError(UsageError):
    """A layer path, pattern or type matches no module of the model."""


class TargetError(UsageError):
    """The target is out of range or not a class name of the model."""


class WeightsError(UsageError):
    """The weights cannot be had, or do not fit the model."""


class OutputError(UsageError):
    """The output folder cannot be written."""


class ComparisonError(UsageError):
    """Two runs cannot be compared: a folder that is not a run's output, a missing or
    corrupt report or fingerprint, or nothing in common."""


class SchemaError(UsageError):
    """A run's file (report.json, run.json) was written by a newer hookviz, in a schema this
    one does not read."""


class ImageError(HookvizError):
    """One image cannot be read or used; a run goes on with the others (exit code 1)."""


class RecordingError(HookvizError):
    """A layer's values could not be recorded faithfully (for example a module that
    overwrites its own input in place)."""


class ModelRunError(HookvizError):
    """The model itself failed on some input; a run fails those images and goes on."""


class AnswerError(HookvizError):
    """A vision-language model's own answer about one photo holds nothing to explain (special
    tokens alone, or no token before its end); a run fails that photo and goes on (exit code 1)."""


class MethodError(HookvizError):
    """A CAM method (one registered with ``hookviz.methods.register_method``) raised on
    some input; a run fails those images and goes on."""


# ----------------------------------------------------------------------------- spelling

# CLI flags whose names are not "--" + the Python argument's name with dashes (BASE and
# NEW are the positional arguments of `hookviz diff`).
_FLAGS = {
    "prompts": "--prompt",
    "prompts_file": "--prompts",
    "layers": "--layer",
    "layer_types": "--layer-type",
    "whole_image": "--no-crop",
    "target_images": "--target-image",
    "base": "BASE",
    "new": "NEW",
}

_HINTS = {
    "python": {
        "list_layers": "hookviz.list_layers(model) lists every path",
        "list_models": "hookviz.list_models() lists them",
        "debug": "",
        "heif": "install pillow-heif and call pillow_heif.register_heif_opener() first",
        "prompts": "pass prompts=['TEXT', ...] (hookviz.options.read_prompts(path) reads a file of them, one a line)",
    },
    "cli": {
        "list_layers": "`hookviz layers --model NAME` lists every path",
        "list_models": "`hookviz models` lists them",
        "debug": " (rerun with --debug for the traceback)",
        "heif": "install pillow-heif (pip install pillow-heif), which hookviz then uses",
        "prompts": "pass --prompt TEXT (repeatable) or --prompts FILE (one a line)",
    },
}

_spelling: contextvars.ContextVar[str] = contextvars.ContextVar("hookviz_spelling", default="python")
_MISSING = object()


def arg(name: str, value: object = _MISSING) -> str:
    """An argument, and optionally its value, as the caller wrote it.

    >>> arg("layers", "features.9")     # from Python
    "layers='features.9'"
    >>> with command_line_spelling():
    ...     arg("layers", "features.9")
    '--layer features.9'
    """
    if _spelling.get() == "cli":
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        if isinstance(value, str) and (value == "" or value != value.strip()):  # quoted: blanks would read as nothing
            value = repr(value)
        return flag if value is _MISSING else f"{flag} {value}"
    return name if value is _MISSING else f"{name}={value!r}"


def spell_flag(name: str, flag: str) -> None:
    """Have ``arg`` spell ``name`` as ``flag`` on the command line: a declared setting whose
    flag is not its name with dashes (``hookviz.options.declared``)."""
    _FLAGS.setdefault(name, flag)


def hint(key: str) -> str:
    """A pointer to the tool that helps (``hookviz layers`` on the command line,
    ``hookviz.list_layers`` in Python)."""
    return _HINTS[_spelling.get()][key]


@contextlib.contextmanager
def command_line_spelling() -> Iterator[None]:
    """Messages raised inside this block name command-line flags (the CLI's context;
    threads started inside it with ``contextvars.copy_context`` keep it)."""
    token = _spelling.set("cli")
    try:
        yield
    finally:
        _spelling.reset(token)


# ----------------------------------------------------------------------------- helpers


_UNSAFE = re.compile(r"weights_only|allow_pickle|unsafe", re.IGNORECASE)


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type's name when it has none), for one-line errors."""
    lines = str(error).strip().splitlines()
    if not lines:
        return type(error).__name__
    # A library's advice to load a file unsafely (torch's weights_only=False, numpy's
    # allow_pickle) is never passed on: hookviz refuses such files on purpose.
    line = ". ".join(part for part in lines[0].split(". ") if not _UNSAFE.search(part)) or type(error).__name__
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def describe(error: BaseException) -> str:
    """``"RuntimeError: first line"`` for an exception from code hookviz does not own."""
    text = first_line(error)
    return type(error).__name__ if text == type(error).__name__ else f"{type(error).__name__}: {text}"


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str:
    """Return ``" (did you mean 'a', 'b'?)"`` for the closest choices, or ``""``.

    Choices that hold ``word`` as a whole word come first (``cat`` -> ``'tiger cat'``), then
    those that hold it anywhere (``'polecat'``), then those spelt alike (``'crate'``); each
    group from the most alike.
    """
    choices = list(dict.fromkeys(choices))
    lowered = word.lower().strip()
    if not lowered:
        return ""
    whole = re.compile(r"(?<![^\W_])" + re.escape(lowered) + r"(?![^\W_])")
    words = [c for c in choices if whole.search(c.lower())]
    within = [c for c in choices if lowered in c.lower() and c not in words]
    spelt = [c for c in difflib.get_close_matches(word, choices, n=n, cutoff=0.5) if c not in words and c not in within]

    def likeness(choice: str) -> float:
        return -difflib.SequenceMatcher(None, lowered, choice.lower()).ratio()

    close = (sorted(words, key=likeness) + sorted(within, key=likeness) + spelt)[:n]
    if not close:
        return ""
    return " (did you mean " + ", ".join(repr(c) for c in close) + "?)"


def display_path(path) -> str:
    """A path as text that can be printed, drawn and stored as UTF-8: bytes that are not
    UTF-8 (a Latin-1 name such as ``caf\\xe9.png``) are shown as ``\\xe9``."""
    text = path if isinstance(path, str) else os.fspath(path)
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    # A newline or carriage return in a name would break a one-line message (or overwrite it).
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
