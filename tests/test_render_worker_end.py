"""A render worker ends at once when the pool sends it away (``workers.end_at_once``): its
streams are flushed first, and it ends with status 0, leaving nothing running."""

from __future__ import annotations

import sys

import pytest


def _say_unflushed(text: str) -> int:
    """In a worker: ``text`` to stdout, left in its buffer (a pipe's stdout is block-buffered)."""
    import os

    sys.stdout.write(text)
    return os.getpid()


def test_a_worker_ends_with_what_it_wrote_flushed_and_status_0(capfd):
    from hookviz.runs.workers import render_pool

    pool = render_pool(1)
    processes = []
    try:
        pool.submit(0, _say_unflushed, "a line the worker never flushed").result(timeout=120)
        processes = list(pool.executor._processes.values())
    finally:
        pool.shutdown()
    assert processes and all(not process.is_alive() for process in processes)
    assert [process.exitcode for process in processes] == [0]
    assert "a line the worker never flushed" in capfd.readouterr().out


def _run_the_exit_handlers() -> str:
    import atexit

    atexit._run_exitfuncs()  # what the interpreter does as the worker ends
    return "the worker went on"


def test_a_render_worker_ends_through_end_at_once():
    """Its exit handlers end the process on the spot: the job running them never returns."""
    from concurrent.futures import BrokenExecutor

    from hookviz.runs.workers import render_pool

    pool = render_pool(1)
    try:
        with pytest.raises(BrokenExecutor):
            pool.submit(0, _run_the_exit_handlers).result(timeout=120)
    finally:
        pool.shutdown()


def test_end_at_once_skips_the_teardown_and_keeps_the_output(tmp_path):
    """An exit handler registered before it never runs (the interpreter is not torn down);
    what one registered after it (so run before it) wrote, unflushed, still comes out."""
    import os
    import subprocess

    marker = tmp_path / "torn-down"
    code = (
        "import atexit, pathlib, sys\n"
        "from hookviz.runs.workers import end_at_once\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'the interpreter was torn down')\n"
        "atexit.register(end_at_once)\n"
        "atexit.register(sys.stdout.write, 'written at exit, never flushed')\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}  # stdout buffered, as usual
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "written at exit, never flushed"
    assert not marker.exists()
