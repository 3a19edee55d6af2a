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


def test_end_at_once_comes_after_the_later_exit_handlers_and_skips_the_teardown(tmp_path):
    """The exit handlers registered after it run first, once; what one wrote, unflushed, still
    comes out; the interpreter is not torn down (an object still held would be freed then)."""
    import os
    import subprocess

    ran, freed = tmp_path / "ran", tmp_path / "freed"
    code = (
        "import atexit, os, pathlib, sys\n"
        "from hookviz.runs.workers import end_at_once\n"
        "class Held:\n"
        "    def __init__(self, path): self.fd, self.write = os.open(path, os.O_WRONLY | os.O_CREAT), os.write\n"
        "    def __del__(self): self.write(self.fd, b'freed at teardown')\n"
        f"held = Held({str(freed)!r})\n"
        "atexit.register(end_at_once)\n"
        f"atexit.register(lambda: open({str(ran)!r}, 'a').write('ran '))\n"
        "atexit.register(sys.stdout.write, 'written at exit, never flushed')\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}  # stdout buffered, as usual
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "written at exit, never flushed"
    assert ran.read_text() == "ran "
    assert freed.read_bytes() == b""
