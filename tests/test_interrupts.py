"""A signal that lands while Python runs a callback it cannot raise from (a weakref callback,
a finalizer) must still end the command: Python only prints "Exception ignored in" there
and carries on. The import system's module locks use such callbacks, so a Ctrl-C while
hookviz starts can land in one (it did, in CI)."""

import subprocess
import sys
import textwrap

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
