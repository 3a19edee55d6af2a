"""The ``hookviz`` command's own process: what belongs to it and never to a library caller's
(its streams' encoding, its signals, its exit, PIL's plug-ins, torch's thread policy).
``cli`` calls these; the library never does.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import typer

from hookviz.interrupts import Interrupted, deferred, interrupted_line
from hookviz.progress import Progress, stopped_line

if TYPE_CHECKING:
    from hookviz.runs.runner import Run
    from hookviz.runs.vlm_run import VlmRunner

__all__ = [
    "Stopper",
    "closed_streams_to_devnull",
    "exit_with",
    "open_heif",
    "plain_text_only",
    "prepare",
    "print_what_cannot_be_encoded",
    "stop_resource_tracker",
]


def prepare() -> None:
    """The speed tricks and stream settings that belong to the command's own process."""
    from hookviz import lazy_dynamo

    # torch's OpenMP threads otherwise spin after each operation, taking CPU from the
    # render workers: measured over 32 photos on 2 cores, a run with pictures finished ~8%
    # sooner with this, and one without pictures no later. A value you set is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    lazy_dynamo.enable()  # import torchvision without torch._dynamo: ~1 s of every run
    closed_streams_to_devnull()
    print_what_cannot_be_encoded()


def closed_streams_to_devnull() -> None:
    """A command started with a standard stream closed (``hookviz run ... >&- 2>&-``, a daemon's)
    gets os.devnull there: Python made the stream ``None``, which every line printed and the exit's
    flush would fail on, and the next file opened would take its number (a library's message to
    descriptor 2 would land in an output file). Only this process's streams: a library caller's
    are left as they are."""
    for number, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(number)
        except OSError:  # closed
            null = os.open(os.devnull, os.O_RDWR)
            if null != number:
                os.dup2(null, number)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(number, "r" if number == 0 else "w", encoding="utf-8", closefd=False))


class Stopper:
    """Ctrl-C and SIGTERM during ``hookviz run``. The first asks the run to stop: the batch
    being explained is abandoned at its next module, the pictures being drawn are finished
    (while the model loads, it stops there and then). A second ends the process at once:
    the render workers are killed, run.json says which images were finished, and no file
    is half-written under its real name (every file is renamed into place when whole)."""

    def __init__(self, progress: Progress):
        self.run: Run | VlmRunner | None = None
        self.progress = progress
        self.signals = 0

    def __call__(self, signum, _frame):
        if deferred(self, signum):  # torch is being imported: the signal is taken in hand right after
            return
        self.signals += 1
        if self.signals > 1:
            self._end_now()
        if self.run is None:  # the run was not yet made: nothing to describe
            raise Interrupted
        if self.run.state.loading:
            raise KeyboardInterrupt
        self.run.request_stop()

    def _end_now(self) -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
        summary = self.run.abandon() if self.run is not None else None
        self.progress.close()
        line = stopped_line(summary, self.progress.stopped_while()) if summary is not None else interrupted_line()
        # This handler may have interrupted a write to sys.stderr: write around it.
        stream = sys.stderr
        os.write(stream.fileno(), f"{line}\n".encode(stream.encoding or "utf-8", "backslashreplace"))
        stop_resource_tracker()
        os._exit(130)


def plain_text_only() -> bool:
    """Whether messages must be plain ASCII lines: a dumb terminal, NO_COLOR, a locale that is
    not UTF-8 (Python itself writes UTF-8 under LC_ALL=C, the terminal may not), or an output
    encoding without box-drawing characters (PYTHONIOENCODING=ascii)."""
    if os.environ.get("TERM") == "dumb" or os.environ.get("NO_COLOR"):
        return True
    locale = next((os.environ[k] for k in ("LC_ALL", "LC_CTYPE", "LANG") if os.environ.get(k)), "C")
    if "utf-8" not in locale.lower().replace("utf8", "utf-8"):
        return True
    try:
        "╭─│".encode(sys.stderr.encoding or "ascii")
    except (LookupError, UnicodeEncodeError):
        return True
    return False


def print_what_cannot_be_encoded() -> None:
    """A console that cannot spell a file's name (cp1252 and emoji_🐱.png) gets it escaped
    (emoji_\\U0001f431.png): printing a line must never end a run. Only this process's
    streams: a library caller's are left as they are."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a stream someone replaced may lack it
        with contextlib.suppress(ValueError, OSError):  # closed
            if reconfigure is not None:
                reconfigure(errors="backslashreplace")


def open_heif() -> None:
    """Let PIL read HEIC photos (an iPhone's) when pillow-heif is installed: the command owns
    its process, while the library leaves PIL's plug-ins to its caller."""
    try:
        from pillow_heif import register_heif_opener
    except ImportError:
        return
    register_heif_opener()


def exit_with(command: Callable[[], None]) -> NoReturn:
    """Run ``command`` (the whole ``hookviz`` command), then end the process at once with its
    exit status.

    When a command returns, every file it wrote is complete and closed, and its worker
    processes and threads have finished. A normal interpreter shutdown would then spend
    0.15 s to 0.7 s (measured on 2 cores) freeing the objects torch and torchvision
    create at import, which the operating system reclaims anyway. So the exit-time
    handlers run (``atexit``: logging's flush, handlers a ``--model pkg:build`` factory
    registered, coverage in subprocesses), the output streams are flushed, and the process
    ends there. An unexpected exception still gets Python's usual exit.
    """
    status: str | int | None
    try:
        command()
        status = 0
    except SystemExit as exit:
        status = exit.code
    except Interrupted:  # Ctrl-C or SIGTERM before the command took them in hand
        typer.echo(interrupted_line(), err=True)
        status = 130
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    for number in (signal.SIGINT, signal.SIGTERM):  # the files are complete: nothing is left to stop
        signal.signal(number, signal.SIG_IGN)
    atexit._run_exitfuncs()
    stop_resource_tracker()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (hookviz models | head): nothing to save
            pass
    os._exit(status)


def stop_resource_tracker() -> None:
    """The render pool's semaphores brought up multiprocessing's resource tracker, a process
    that would outlive this one for a moment: end it first, so that the command returns
    with no process of its own left."""
    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    if tracker is not None:
        with contextlib.suppress(Exception):  # private (Python 3.8 to 3.14): at worst it lingers a moment
            tracker._stop()
