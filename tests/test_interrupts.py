"""A signal that lands while Python runs a callback it cannot raise from (a weakref callback,
a finalizer) must still end the command: Python only prints "Exception ignored in" there
and carries on. The import system's module locks use such callbacks, so a Ctrl-C while
hookviz starts can land in one (it did, in CI)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# The signal's handler runs inside the weakref callback: the exception it raises there is
# "unraisable". The loop after it stands for the rest of start-up.
SWALLOWED = textwrap.dedent(
    """
    import os, signal, sys, time, weakref
    from hookviz.interrupts import Interrupted, catch_signals

    class Thing:
        pass

    def callback(_ref):
        os.kill(os.getpid(), signal.{signal})
        len([])  # the handler runs here, inside the callback

    catch_signals()
    {before}
    try:
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        start = time.monotonic()
        while time.monotonic() - start < 5:
            sum(range(100))
    except {caught}:
        print("stopped")
        sys.exit(130)
    print("went on")
    """
)


def _run(signal_name: str, *, before: str = "", caught: str = "Interrupted") -> subprocess.CompletedProcess:
    code = SWALLOWED.format(signal=signal_name, before=before, caught=caught)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_signal_swallowed_by_a_callback_still_stops_the_command():
    for name in ("SIGINT", "SIGTERM"):
        done = _run(name)
        assert (done.returncode, done.stdout.strip(), done.stderr) == (130, "stopped", ""), done


def test_a_swallowed_keyboard_interrupt_of_a_command_handler_is_raised_again():
    """``hookviz run`` raises KeyboardInterrupt from its own handler while the model loads."""
    before = "def stop(*_):\n    raise KeyboardInterrupt\nsignal.signal(signal.SIGINT, stop)"
    done = _run("SIGINT", before=before, caught="KeyboardInterrupt")
    assert (done.returncode, done.stdout.strip(), done.stderr) == (130, "stopped", ""), done


def test_other_unraisable_exceptions_are_still_reported():
    code = textwrap.dedent(
        """
        import weakref
        from hookviz.interrupts import catch_signals

        class Thing:
            pass

        def callback(_ref):
            raise ValueError("a bug in a callback")

        catch_signals()
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing
        print("went on")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "went on" and "ValueError: a bug in a callback" in done.stderr, done


# A stand-in for torch: its import takes a while, and a signal comes in the middle of it.
FRAGILE_PACKAGE = """
import os, signal, time
os.kill(os.getpid(), signal.{signal})
start = time.monotonic()
while time.monotonic() - start < 0.5:
    sum(range(100))  # the real torch runs C++ here that calls back into Python
FINISHED = True
"""

WAIT_FOR_IMPORT = textwrap.dedent(
    """
    import sys, time
    from hookviz.interrupts import Interrupted, catch_signals
    {handler}
    try:
        import torch
        start = time.monotonic()
        while time.monotonic() - start < 5:
            sum(range(100))
    except {caught}:
        print("stopped; torch imported:", getattr(sys.modules.get("torch"), "FINISHED", False))
        sys.exit(130)
    print("went on")
    """
)


def _import_stopped(tmp_path, signal_name: str, handler: str, caught: str) -> subprocess.CompletedProcess:
    (tmp_path / "torch").mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text(FRAGILE_PACKAGE.format(signal=signal_name))
    code = WAIT_FOR_IMPORT.format(handler=handler, caught=caught)
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_a_signal_while_torch_imports_is_taken_in_hand_once_the_import_ends(tmp_path):
    """Raised inside torch's import, it can land in C++ (torch._C._c10d_init) that calls back
    into Python: the process then aborts with a core dump ("terminate called after throwing an
    instance of 'pybind11::error_already_set'"), as a CI-like run showed."""
    for name in ("SIGINT", "SIGTERM"):
        done = _import_stopped(tmp_path / name, name, "catch_signals()", "Interrupted")
        assert (done.returncode, done.stdout.strip(), done.stderr) == (130, "stopped; torch imported: True", ""), done


def test_the_runs_own_handler_also_waits_for_torchs_import(tmp_path):
    """``hookviz run`` imports torch while the model loads, under ``process.Stopper``."""
    handler = (
        "import signal\n"
        "from hookviz.process import Stopper\n"
        "from types import SimpleNamespace\n"
        "stopper = Stopper(SimpleNamespace(close=lambda: None))\n"
        "stopper.run = SimpleNamespace(state=SimpleNamespace(loading=True))\n"
        "signal.signal(signal.SIGINT, stopper)\n"
    )
    done = _import_stopped(tmp_path, "SIGINT", handler, "KeyboardInterrupt")
    assert (done.returncode, done.stdout.strip(), done.stderr) == (130, "stopped; torch imported: True", ""), done


@pytest.mark.slow
def test_an_interrupted_atlas_says_how_to_go_on(tmp_path):
    """It said only "hookviz: interrupted", though its state is saved batch by batch and
    --skip-existing goes on from it."""
    from PIL import Image

    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    root = str(Path(__file__).resolve().parent.parent)
    command = [sys.executable, "-m", "hookviz", "atlas", str(tmp_path / "a.png"), "--model",
               "tests.conftest:interrupting_factory", "--weights", "none", "--layer", "x", "--out", str(tmp_path / "o")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=root)
    assert (done.returncode, done.stderr) == (
        130,
        "hookviz: interrupted: rerun the same command with --skip-existing to go on from the samples mapped so far\n",
    ), done
