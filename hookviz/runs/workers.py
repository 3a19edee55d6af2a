"""The run's render workers: the pool that draws and writes while the model computes, how
its processes start (signals held, then ignored; gone when the parent dies) and how they
are ended at once."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from hookviz.store.files import remove_unfinished

__all__ = ["kill_workers", "render_pool", "signals_held", "warm_up"]


def render_pool(workers: int):
    """Processes render in parallel with the model (matplotlib holds the GIL); with no
    pictures to draw, one thread writing files is enough."""
    if workers <= 0:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="hookviz-write")
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=init_worker,
        initargs=(os.getpid(),),
    )


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


def init_worker(parent: int) -> None:
    # Ctrl-C and SIGTERM go to the whole process group (a terminal, `timeout`, `scancel`):
    # the parent decides how to stop, and lets workers finish the file they are writing.
    # They were held back while this process started; ignored from now on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    threading.Thread(target=exit_with_parent, args=(parent,), name="hookviz-parent-watch", daemon=True).start()
    from hookviz.render.worker import configure_worker

    configure_worker()


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
