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
import time

__all__ = ["FRAGILE_IMPORTS", "Interrupted", "catch_signals", "deferred", "importing_fragile", "interrupted_line", "on_signal"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A signal came before the command took signals in hand: nothing was written yet.

    Not a KeyboardInterrupt (typer would swallow it) and not an Exception (no ``except
    Exception`` on the way may take it for a failure)."""


def on_signal(signum, _frame) -> None:
    if deferred(on_signal, signum):
        return
    for number in SIGNALS:  # the command is ending: a second signal must not cut its last line short
        signal.signal(number, signal.SIG_IGN)
    raise Interrupted


#: Packages whose import runs C++ that calls back into Python (torch's ``_c10d_init``): an
#: exception raised there by a signal handler ends the process with "terminate called after
#: throwing an instance of 'pybind11::error_already_set'" and a core dump.
FRAGILE_IMPORTS = ("torch", "torchvision")


def importing_fragile() -> bool:
    """Whether one of ``FRAGILE_IMPORTS`` is being imported now."""
    for name in FRAGILE_IMPORTS:
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if getattr(spec, "_initializing", False):
            return True
    return False


def deferred(handler, signum: int) -> bool:
    """Called first by a signal handler that raises: while a fragile package imports, take
    the signal in hand later, once the import has ended (``handler(signum)`` then runs as if
    the signal came at that moment), and return True; otherwise return False. The import
    takes a second or two; nothing else waits."""
    if not importing_fragile():
        return False
    _take_later(lambda frame: handler(signum, frame))
    return True


def _take_later(action) -> None:
    """Have the main thread run ``action(frame)`` as a signal handler, as soon as it can and
    no fragile import runs: the signal handlers are replaced by one that does only that,
    after putting them back. Another thread asks for it (``interrupt_main`` only marks it):
    asked from a handler or an unraisable hook, it would run at once, where it cannot raise."""
    replaced = {number: signal.getsignal(number) for number in SIGNALS}

    def replay(_number, frame):
        if importing_fragile():  # a signal meanwhile: the waiting one is taken once the import ends
            return
        for number, previous in replaced.items():
            signal.signal(number, previous)
        action(frame)

    for number in SIGNALS:
        signal.signal(number, replay)
    _thread.start_new_thread(_when_imported, ())


def _when_imported() -> None:
    """In a thread of its own: once no fragile import runs, have the main thread take the
    waiting signal in hand."""
    while importing_fragile():
        time.sleep(0.02)
    _thread.interrupt_main(signal.SIGINT)


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
    the main thread once the callback has returned (``_take_later``). Should it land in
    such a callback again, it comes back here and is asked for again."""
    kind = unraisable.exc_type
    if kind is None or not issubclass(kind, (Interrupted, KeyboardInterrupt)):
        _raise_again.previous(unraisable)  # type: ignore[attr-defined]
        return

    def raise_it(_frame):
        raise kind

    _take_later(raise_it)


def interrupted_line(argv: list[str] | None = None) -> str:
    """The one line an ``Interrupted`` command prints."""
    argv = sys.argv if argv is None else argv
    if argv[1:2] == ["run"]:
        return "hookviz: interrupted: stopped before any image was explained"
    if argv[1:2] == ["atlas"] and "--merge" not in argv:  # its state is saved batch by batch
        return "hookviz: interrupted: rerun the same command with --skip-existing to go on from the samples mapped so far"
    return "hookviz: interrupted"
