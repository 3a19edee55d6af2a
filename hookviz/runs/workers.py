"""The run's render workers: the pool that draws and writes while the model computes, how
its processes start (signals held, then ignored; gone when the parent dies), how they are
ended at once, and how a pool whose worker was killed (the OOM killer, ``kill -9``) is
replaced by a fresh one; and what a run has with them (``Renderers``)."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from hookviz.errors import HookvizError, UsageError, arg
from hookviz.store.files import remove_unfinished

__all__ = [
    "RenderPool",
    "Renderers",
    "broken",
    "kill_workers",
    "killed_note",
    "killed_reason",
    "lower_priority",
    "portable",
    "render_pool",
    "signals_held",
    "warm_up",
]


#: Fresh pools that may die one after another, no image drawn in between, before the run stops.
DEATHS = 3

#: How far below the run's own a render worker's scheduling priority is (``os.nice``). The
#: run's passes are what the end waits for; pictures only have to keep up. On a machine with
#: fewer free cores than the workers and the passes' threads (2 cores: the passes' 2 threads
#: and 2 workers), the workers then draw in the time the passes leave, instead of slowing them.
#: (On a machine busy with other people's work at the usual priority, they yield to it too.)
NICENESS = 10


@dataclass
class Renderers:
    """A run's renderers and what it gave them: the pool, its number of processes, the
    TensorBoard log a written image goes to, and the images handed over and not yet
    collected, in order: (path, explanation, the future of its files)."""

    pool: Any = None  # the RenderPool, once the run has started it
    workers: int = 0
    board: Any = None  # store.tensorboard.TensorBoardLog, with --tensorboard
    pending: list[tuple[Path, Any, Future]] = field(default_factory=list)


def render_pool(processes: int, draws: bool = False) -> "RenderPool":
    """Processes render in parallel with the model (matplotlib holds the GIL). With none,
    one thread of this process writes the files, and draws the pictures if ``draws``."""
    return RenderPool(processes, draws)


class RenderPool:
    """The run's renderers: ``processes`` worker processes, or one thread of this process.

    Each job carries a number (the image's), and each worker process notes in shared memory
    the job it is doing, so that when one dies (the OOM killer, ``kill -9``) ``restart``
    can say whose pictures died with it, and start a fresh pool for the others.
    """

    def __init__(self, processes: int, draws: bool = False):
        self.processes, self.draws = processes, draws
        self.deaths = 0  # pools that died since an image was last drawn
        self.executor = self._executor()

    def _executor(self):
        if self.processes <= 0:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="hookviz-write")
        context = multiprocessing.get_context("spawn")
        self.slots = context.Array("q", [0, -1] * self.processes)  # (process id, job) of each worker
        return ProcessPoolExecutor(
            max_workers=self.processes, mp_context=context, initializer=init_worker, initargs=(os.getpid(), self.slots)
        )

    def warm_up(self) -> None:
        """Start every worker now (they start with Ctrl-C and SIGTERM held back, so that a
        signal to the process group cannot interrupt one before it ignores them). Drawing
        in this process, import matplotlib now, while the caller imports torch, as a worker
        would."""
        if self.processes <= 0 and self.draws:
            self.executor.submit(_import_drawing)
        with signals_held():
            for _ in range(self.processes):
                self.executor.submit(warm_up)

    def submit(self, job: int, function: Callable, *args, **kwargs) -> Future:
        """``function(*args, **kwargs)`` in a renderer; a pool that died gives a future that says so."""
        if self.processes <= 0:
            if self.draws:
                return self.executor.submit(_here, function, *args, **kwargs)
            return self.executor.submit(function, *args, **kwargs)
        try:
            future = self.executor.submit(_job, job, function, *args, **kwargs)
        except BrokenExecutor as broken:
            future = Future()
            future.set_exception(broken)
        future.add_done_callback(self._drawn)
        return future

    def _drawn(self, future: Future) -> None:
        if not future.cancelled() and not isinstance(future.exception(), BrokenExecutor):
            self.deaths = 0

    def restart(self) -> tuple[set[int], set[int]]:
        """After a worker died: end this pool's other workers, start a fresh pool, and return
        the jobs the dead workers were doing and the ids of every process of the old pool.

        Raises:
            HookvizError: fresh pools died ``DEATHS`` times with no image drawn in between.
        """
        processes = list((getattr(self.executor, "_processes", None) or {}).values())
        ended = set(wait([process.sentinel for process in processes], timeout=0))
        dead = {process.pid for process in processes if process.sentinel in ended}
        slots = self.slots.get_obj()
        lost = {slots[i + 1] for i in range(0, len(slots), 2) if slots[i] in dead and slots[i + 1] >= 0}
        killed = self.kill()
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.deaths += 1
        if self.deaths >= DEATHS:
            raise HookvizError(
                f"render workers were killed {self.deaths} times in a row (out of memory, or a signal such as "
                f"kill -9) before drawing an image; run with fewer {arg('workers')} or fewer pictures, then "
                f"with {arg('skip_existing')} to resume{_script_hint()}"
            )
        self.executor = self._executor()
        self.warm_up()
        return lost, killed

    def kill(self, release: bool = False) -> set[int]:
        """``kill_workers`` of this pool."""
        return kill_workers(self.executor, release)

    def shutdown(self) -> None:
        """Wait for the jobs submitted, then end the workers."""
        self.executor.shutdown(wait=True, cancel_futures=True)


def killed_reason() -> str:
    """Why an image whose pictures a killed worker was drawing failed, and what to do."""
    return (
        "its render worker was killed while drawing its pictures (out of memory, or a signal such as kill -9); "
        f"rerun with {arg('skip_existing')} to draw it"
    )


def killed_note(images: list[str]) -> str:
    """One line for the images a killed render worker was drawing."""
    return (
        f"a render worker was killed (out of memory, or a signal such as kill -9) while drawing "
        f"{', '.join(images)}: {'that image' if len(images) == 1 else 'those images'} failed; "
        "a fresh worker drew the others"
    )


def refuse_in_a_starting_worker() -> None:
    """A render worker starts by importing the caller's script (spawn); a script that calls
    ``run`` outside ``if __name__ == "__main__":`` would run it again in every worker."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise UsageError(
            "hookviz.run was called while a render worker imported the calling script: put the call under "
            '`if __name__ == "__main__":` (workers are started fresh, by spawn, and import the script)'
        )


def _script_hint() -> str:
    """Where a Python script called the run: that each worker imports the script, and dies
    running it again unless the call is under ``if __name__ == "__main__":``."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or ""
    if not path or "hookviz" in Path(path).parts or Path(path).name == "pytest":
        return ""
    return (
        f'; or {Path(path).name} calls hookviz.run without `if __name__ == "__main__":`, which each render '
        "worker then runs again as it imports the script (workers are started fresh, by spawn)"
    )


def broken(future: Future) -> bool:
    """Whether the render worker of ``future`` died before finishing it (waits until it is done)."""
    return not future.cancelled() and isinstance(future.exception(), BrokenExecutor)


def portable(explanation):
    """The explanation without torch tensors or the decoded photo, cheap to send to a worker."""
    import numpy as np

    image = explanation.image
    source = replace(image.source, rgb=None) if hasattr(image.source, "rgb") else image.source
    if "tensors" in {entry.name for entry in fields(image)}:  # a sample of named inputs (``hookviz.samples.Sample``)
        return replace(
            explanation, image=replace(image, source=source, tensors={k: np.asarray(v) for k, v in image.tensors.items()})
        )
    return replace(explanation, image=replace(image, source=source, tensor=np.asarray(image.tensor)))


def _import_drawing() -> None:
    import hookviz.render.figures  # noqa: F401  (matplotlib, its Agg canvas)
    import hookviz.render.kinds  # noqa: F401


def _here(function: Callable, *args, **kwargs):
    from hookviz.render.worker import drawing_here

    with drawing_here():
        return function(*args, **kwargs)


_slot: list = []  # in a worker: its (shared array, index of its job)


def _job(job: int, function: Callable, *args, **kwargs):
    slots, index = _slot or (None, None)
    if slots is not None:
        slots[index] = job
    try:
        return function(*args, **kwargs)
    finally:
        if slots is not None:
            slots[index] = -1


_HELD = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def signals_held():
    """Hold Ctrl-C and SIGTERM back in this thread while worker processes start (they inherit
    the mask); a signal that arrives meanwhile is delivered when the block ends."""
    hold = getattr(signal, "pthread_sigmask", None)
    if hold is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = hold(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        hold(signal.SIG_SETMASK, previous)


def init_worker(parent: int, slots=None) -> None:
    atexit.register(end_at_once)  # exit handlers run newest first: registered now, it runs after any a job registers
    # Ctrl-C and SIGTERM go to the whole process group (a terminal, `timeout`, `scancel`):
    # the parent decides how to stop, and lets workers finish the file they are writing.
    # They were held back while this process started; ignored from now on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lower_priority()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    if slots is not None:
        _claim(slots)
    threading.Thread(target=exit_with_parent, args=(parent,), name="hookviz-parent-watch", daemon=True).start()
    from hookviz.render.worker import configure_worker

    configure_worker()


def end_at_once() -> None:
    """A render worker's end, once the pool has sent it away: after the exit handlers registered
    since the worker started (a plug-in's), logging flushed and the streams flushed, the process
    ends without tearing the interpreter down, as ``process.exit_with`` ends the command's
    process and multiprocessing's forked children end. Freeing every module and the figures a
    worker keeps took ~0.1 s of CPU per worker, and the run waited for it before writing its
    gallery (``RenderPool.shutdown``: 90 to 130 ms, now ~5 ms). Nothing is lost: a job's files
    are complete when it returns, its result is on the pool's queue at once, and its errors
    travel back with it."""
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def lower_priority() -> None:
    """This worker's scheduling priority ``NICENESS`` below its parent's, where the system has
    priorities (``os.nice``; not on Windows). Only this process's: the run's own is left as is."""
    with contextlib.suppress(AttributeError, OSError):
        os.nice(NICENESS)


def _claim(slots) -> None:
    """Take this worker's place in the pool's shared array (``RenderPool.restart`` reads it)."""
    with slots.get_lock():
        raw = slots.get_obj()
        index = next((i for i in range(0, len(raw), 2) if raw[i] == 0), None)
        if index is None:  # no place left (a pool that started more workers than it said)
            return
        raw[index] = os.getpid()
    _slot[:] = [raw, index + 1]


def exit_with_parent(parent: int) -> None:
    """A worker whose parent died (``kill -9``) exits within a second instead of lingering."""
    while True:
        if os.getppid() != parent:
            remove_unfinished()  # the picture being written now will not be finished
            os._exit(1)
        time.sleep(0.5)


def kill_workers(pool, release: bool = False) -> set[int]:
    """End the render processes now (a thread pool's writer ends with the process) and
    return their process ids, once they have ended. With ``release``, for a process about
    to end at once: unlink the pool's semaphores now, as a normal exit would, or
    multiprocessing's resource tracker warns of leaked ones."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    kill = getattr(pool, "kill_workers", None)  # Python 3.14
    if kill is not None:
        kill()
    else:
        for process in processes:
            with contextlib.suppress(OSError, ValueError):
                process.kill()
    for process in processes:  # killed ones end at once; reaped, no file of theirs is still open
        with contextlib.suppress(OSError, ValueError, AssertionError):
            process.join(timeout=2)
    if release:
        from multiprocessing import util

        util._run_finalizers(0)  # type: ignore[attr-defined]  # the semaphores' (exit priority 0), not the threads' joins
    return {process.pid for process in processes if process.pid is not None}


def warm_up() -> None:
    from hookviz.render.worker import warm_up  # in the worker only: the main process never draws

    warm_up()
