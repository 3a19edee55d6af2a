"""Ctrl-C and SIGTERM in the ``hookviz`` command's own process before a command takes them in hand.

Starting takes a second or more: typer, then torch, then the model are imported. A signal
in that time must end the command with one line and exit status 130. Python's own
KeyboardInterrupt cannot promise that: typer turns one raised in a command into a silent
exit 130, and one raised while a module imports prints a traceback. So the command's
process raises ``Interrupted`` instead, from its first line (``hookviz.__main__``) until
a command installs its own handler (``hookviz run``: ``process.Stopper``); ``process.exit_with``
turns it into the line. Nothing here is used by the library, and importing it costs nothing.
"""

from __future__ import annotations

import _thread
import signal
import sys

__all__ = ["Interrupted", "catch_signals", "interrupted_line", "on_signal"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A signal came before the command took signals in hand: nothing was written yet.

    Not a KeyboardInterrupt (typer would swallow it) and not an Exception (no ``except
    Exception`` on the way may take it for a failure)."""


def on_signal(_signum, _frame) -> None:
    for number in SIGNALS:  # the command is ending: a second signal must not cut its last line short
        signal.signal(number, signal.SIG_IGN)
    raise Interrupted


def catch_signals() -> None:
    """From now on, Ctrl-C and SIGTERM raise ``Interrupted`` in this process, even where
    Python cannot raise them at once (see ``_raise_again``)."""
    for number in SIGNALS:
        signal.signal(number, on_signal)
    if sys.unraisablehook is not _raise_again:
        _raise_again.previous = sys.unraisablehook  # type: ignore[attr-defined]
        sys.unraisablehook = _raise_again


def _raise_again(unraisable) -> None:
    """A signal handler's exception raised inside a callback Python cannot raise from (a
    weakref callback such as the import system's module locks use, a finalizer) is only
    printed as "Exception ignored in", and the command would carry on. Raise it again in
    the main thread once the callback has returned, by a handler that does only that and
    then puts back the one it replaced. Another thread asks for it: asked from here, the
    handler would run at once, inside the callback still. Should it land in such a
    callback again, it comes back here and is asked for again."""
    kind = unraisable.exc_type
    if kind is None or not issubclass(kind, (Interrupted, KeyboardInterrupt)):
        _raise_again.previous(unraisable)  # type: ignore[attr-defined]
        return
    replaced = signal.getsignal(signal.SIGINT)

    def raise_it(_signum, _frame):
        signal.signal(signal.SIGINT, replaced)
        raise kind

    signal.signal(signal.SIGINT, raise_it)
    _thread.start_new_thread(_thread.interrupt_main, (signal.SIGINT,))


def interrupted_line(argv: list[str] | None = None) -> str:
    """The one line an ``Interrupted`` command prints."""
    argv = sys.argv if argv is None else argv
    if argv[1:2] == ["run"]:
        return "hookviz: interrupted: stopped before any image was explained"
    return "hookviz: interrupted"
