"""What ``hookviz run`` says while it runs, on the command's own streams: a line per image, a
progress bar or a line of counts now and then, and the line a stopped run ends with. The
library reports through callbacks (``Run(on_status=..., on_start=...)``); this module is
where the command turns them into text.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

import typer

__all__ = [
    "FEW_IMAGES",
    "EVERY_VARIABLE",
    "HEAVY_AFTER",
    "PROGRESS_EVERY",
    "WORK_SHOWN_AFTER",
    "Progress",
    "counted",
    "duration",
    "progress_every",
    "stdout_closed",
    "stopped_line",
]

#: A run of at most this many images prints a line per image (any number: ``--verbose``).
FEW_IMAGES = 20
#: Without a terminal (a CI log), a larger run, and long work inside a photo, say how far they
#: got this often, in seconds (``HOOKVIZ_PROGRESS_EVERY`` sets it).
PROGRESS_EVERY = 10.0
#: The environment variable that sets another interval, in seconds (``0``: at every step).
EVERY_VARIABLE = "HOOKVIZ_PROGRESS_EVERY"
#: Work inside one photo (``hookviz.workload``) that will take longer than this, in seconds,
#: shows how far it got (``HOOKVIZ_WORK_SHOWN_AFTER`` sets it).
WORK_SHOWN_AFTER = 5.0
#: Work that will take longer than this a photo says so once, when it begins
#: (``HOOKVIZ_HEAVY_AFTER`` sets it).
HEAVY_AFTER = 60.0
#: Work that ends sooner than this shows no bar on a terminal: a few prompts are encoded at once.
BAR_AFTER = 2.0


def _seconds(name: str) -> float:
    """The setting ``name`` (``PROGRESS_EVERY``): its ``HOOKVIZ_`` variable's value when that is a
    number from 0, else the constant's."""
    with contextlib.suppress(KeyError, ValueError):
        seconds = float(os.environ[f"HOOKVIZ_{name}"])
        if 0 <= seconds < float("inf"):
            return seconds
    return float(globals()[name])


def progress_every() -> float:
    """``PROGRESS_EVERY``, or the seconds ``HOOKVIZ_PROGRESS_EVERY`` gives."""
    return _seconds("PROGRESS_EVERY")


def counted(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"


def duration(seconds: float) -> str:
    """``42 s``, ``14 min``, ``2.5 h``: a time left, as a progress line says it."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def stopped_line(summary, doing: str | None = None) -> str:
    """The line a stopped run ends with; ``doing``: what it was doing before its first image
    (``Progress.stopped_while``), when it was stopped then: it has nothing to resume."""
    if doing is not None:
        return f"hookviz: interrupted while {doing}: stopped before any {summary.noun} was explained; this run wrote nothing to resume"
    where = f"see {summary.run_json}" if summary.run_json.exists() else f"stopped before any {summary.noun} was explained"
    return (
        f"hookviz: interrupted: {counted(summary.count('done'), summary.noun)} written, {len(summary.failed)} failed, "
        f"{summary.count('not_done')} not done; {where} (rerun with --skip-existing to resume)"
    )


def stdout_closed() -> None:
    """The reader of stdout went away (``hookviz layers | head``): say nothing more there."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class Progress:
    """What ``hookviz run`` says while it runs: failures always, as they happen; a line per
    image on stdout for a few images (or ``--verbose``); a rich progress bar when stderr is
    a terminal, else, for a larger run, a line of counts and time left every ``PROGRESS_EVERY``
    seconds (``hookviz: 120 of 3000 images, 2 failed, about 14 min left``; ``progress_every``).
    Before the images, the same for a text tower's prompts (``prompts``).

    It is also the ``hookviz.workload.Listener`` of the work inside each photo: work that will
    take longer than ``WORK_SHOWN_AFTER`` seconds gets a bar, or a line every ``PROGRESS_EVERY``
    seconds (``hookviz: scorecam at layer4: 512 of 2048 masked passes, about 3 min left``), and
    work longer than ``HEAVY_AFTER`` seconds a photo says so once, when its first passes are
    timed (``hookviz: scorecam at layer4: 2048 masked passes a photo, about 9 min a photo here``)."""

    def __init__(self, total: int, *, quiet: bool, stdout_lines: bool, verbose: bool = False):
        self.total = total
        self.quiet = quiet
        self.asked_lines, self.verbose = stdout_lines, verbose
        self.stdout_lines = stdout_lines and (verbose or total <= FEW_IMAGES)
        self.bar: Any = None  # a rich Progress, while one is shown
        self.task: Any = None
        self.failed = self.skipped = 0
        self.errors_said: set[str] = set()  # a reason shared by several samples (a video's clips) is said once
        self.started = self.said = time.monotonic()
        self.shown: dict[int, Any] = {}  # per work begun: "untimed", "quiet", "lines" or ("bar", its task)
        self.heavy: set[str] = set()  # the labels of work said to be heavy
        self.work_said = 0.0
        self.every = progress_every()
        self.begun = False  # the images began (``start``)
        self.noun = "image"  # what the lines that count samples call one (``start``)
        self.one = "photo"  # what a line about one sample calls it: its kind's ``noun`` (``start``)
        self.encoded = (0, 0)  # a text tower's prompts: (encoded, all)
        self.prompts_started = self.started

    def say(self, text: str, nl: bool = True) -> None:
        """A line on stdout; if its reader went away (``| head``), the run goes on silently."""
        try:
            typer.echo(text, nl=nl)
        except BrokenPipeError:
            stdout_closed()
            self.stdout_lines = False

    def start(self, line: str, total: int | None = None, noun: str = "image", one: str = "photo") -> None:
        """The images begin (``line`` says how); ``total``: how many there are, when the run
        found other samples than it was counted with (the model's sample kind's); ``noun``: what
        the lines that count them call one (``samples.counted_noun``); ``one``: what a line about
        one of them calls it (the kind's ``noun``: ``2048 masked passes a photo``)."""
        self.noun, self.one = noun, one
        if total is not None and total != self.total:
            self.total = total
            self.stdout_lines = self.asked_lines and (self.verbose or total <= FEW_IMAGES)
        self.close()  # a bar of the prompts, had it not ended
        self.started = self.said = time.monotonic()  # the model is loaded: the images begin
        self.begun = True
        if self.quiet:
            return
        typer.echo(f"hookviz: {line}", err=True)
        if sys.stderr.isatty() and self.total > 1:
            self._show_bar(f"{noun}s", self.total)

    def _show_bar(self, what: str, total: int) -> None:
        self.bar = _rich_bar()
        self.bar.start()
        self.task = self.bar.add_task(what, total=total, rate="")

    def prompts(self, done: int, total: int) -> None:
        """A text tower's prompts, encoded in parts before the first image (``load_model``'s
        ``on_prompts``): once it takes a while, a bar on a terminal, else a line every
        ``every`` seconds (``hookviz: encoding 10,000 prompts: 2,560 done, about 3 min left``)."""
        now = time.monotonic()
        if done == 0:
            self.prompts_started = self.said = now
        self.encoded = (done, total)
        if self.quiet or done == 0:
            return
        if done >= total:
            self.close()
        elif sys.stderr.isatty():
            if self.bar is None and now - self.prompts_started >= BAR_AFTER:
                self._show_bar("encoding prompts", total)
            if self.bar is not None:
                self.bar.update(self.task, completed=done)
        elif now - self.said >= self.every:
            self.said = now
            left = duration((now - self.prompts_started) / done * (total - done))
            typer.echo(f"hookviz: encoding {total:,} prompts through the text tower: {done:,} done, about {left} left", err=True)

    def stopped_while(self) -> str | None:
        """What the run was doing when stopped before its first image (``None`` once they began)."""
        done, total = self.encoded
        if self.begun:
            return None
        if done < total:
            return f"encoding the prompts ({done:,} of {total:,} through the text tower)"
        return "loading the model"

    def update(self, status, finished: int, total: int) -> None:
        self.failed += status.status == "failed"
        self.skipped += status.status == "skipped"
        if status.status == "failed" and status.error not in self.errors_said:  # shown even with --quiet, as they happen
            self.errors_said.add(status.error)
            if self.bar is not None:
                self.bar.console.print(f"hookviz: failed: {status.error}", markup=False, highlight=False)
            else:
                typer.echo(f"hookviz: failed: {status.error}", err=True)
        if self.task is not None:  # the images' bar
            elapsed = self.bar.tasks[0].elapsed or 0.0
            rate = f"{finished / elapsed:.2f} img/s" if elapsed > 0 else ""
            self.bar.update(self.task, completed=finished, rate=rate)
        if self.quiet:
            return
        if self.stdout_lines:
            if status.status == "done":
                self._result_line(status)
        elif self.bar is None:
            self._how_far(finished, total)

    def _result_line(self, status) -> None:
        from hookviz.render.presentation import presentation_of

        line = presentation_of(status.task).status_line(status)
        if self.bar is not None and sys.stdout.isatty():
            self.bar.console.print(line, markup=False, highlight=False, soft_wrap=True)  # above the bar
        else:
            self.say(line)  # stdout, also when it is piped to a file

    def _how_far(self, finished: int, total: int) -> None:
        now = time.monotonic()
        if now - self.said < self.every or finished >= total:
            return
        self.said = now
        worked = finished - self.skipped  # images found done already took no time
        left = f", about {duration((now - self.started) / worked * (total - finished))} left" if worked else ""
        typer.echo(f"hookviz: {finished} of {total} {self.noun}s, {self.failed} failed{left}", err=True)

    # -- work inside one photo (hookviz.workload): a bar on a terminal, else a line now and then

    def began(self, work) -> None:
        self.shown[id(work)] = "untimed"

    def advanced(self, work) -> None:
        if self.quiet or not work.done or id(work) not in self.shown:
            return
        now = time.monotonic()
        whole = (now - work.started) / work.done * work.total
        if self.shown[id(work)] == "untimed":  # its first passes: now it can be timed
            self.shown[id(work)] = self._first_estimate(work, whole)
        shown = self.shown[id(work)]
        if isinstance(shown, tuple):  # ("bar", its task)
            self.bar.update(shown[1], completed=work.done)
        elif shown == "lines" and now - self.work_said >= self.every and work.done < work.total:
            self.work_said = now
            left = whole - (now - work.started)
            typer.echo(f"hookviz: {work.label}: {work.done} of {work.total} {work.unit}, about {duration(left)} left", err=True)

    def _first_estimate(self, work, whole: float):
        """Says once when the work is heavy; how it is shown: ``quiet``, ``lines`` or ``("bar", task)``."""
        if whole / work.photos > _seconds("HEAVY_AFTER") and work.label not in self.heavy:
            self.heavy.add(work.label)
            a_photo = f"{round(work.total / work.photos)} {work.unit} a {self.one}, about {duration(whole / work.photos)} a {self.one} here"
            self._work_line(f"hookviz: {work.label}: {a_photo}")
        if whole <= _seconds("WORK_SHOWN_AFTER"):
            return "quiet"
        if sys.stderr.isatty():
            return "bar", self._work_bar().add_task(work.label, total=work.total, completed=work.done, rate="")
        self.work_said = 0.0  # its first line now
        return "lines"

    def _work_line(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            typer.echo(line, err=True)

    def _work_bar(self):
        if self.bar is None:
            self.bar = _rich_bar()
            self.bar.start()
        return self.bar

    def ended(self, work) -> None:
        shown = self.shown.pop(id(work), None)
        if self.bar is not None and isinstance(shown, tuple):
            self.bar.remove_task(shown[1])
            if self.task is None and not self.bar.tasks:  # a bar of its own: gone with it
                self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = self.task = None  # the task was the bar's (the prompts', or the images')


def _rich_bar():
    """A rich progress bar on stderr, gone when it stops: description, bar, done of total, rate, time left."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
