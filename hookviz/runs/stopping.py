"""Stopping a run: where it is (``Phase``) and whether it was asked to stop, was interrupted or
stopped on an error (``RunState``), and the hooks that end a model's pass at the next module
once a stop was asked for, instead of at the end of the batch (``stoppable``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from enum import Enum

from hookviz.hooks import HookSet

__all__ = ["Phase", "RunState", "Stopped", "stoppable"]


class Phase(Enum):
    """Where a run is, which decides what a stop asked for does."""

    LOADING = "loading"  # torch, the model and the explainer: a stop ends the run there and then
    RUNNING = "running"  # the batches: a stop abandons the batch at its next module
    FINISHING = "finishing"  # the run file and the gallery are being written


class RunState:
    """A run's phase and how it ends. ``stopping`` is the one flag the loader, the model's
    hooks (``stoppable``) and a signal handler share; setting it is all ``request_stop`` does,
    so a signal handler may call it."""

    def __init__(self) -> None:
        self.phase = Phase.LOADING
        self.stopping = threading.Event()
        self.interrupted = False
        self.error: str | None = None  # what stopped the run, in one line

    @property
    def loading(self) -> bool:
        return self.phase is Phase.LOADING

    @property
    def stop_asked(self) -> bool:
        return self.stopping.is_set()

    def request_stop(self) -> None:
        self.stopping.set()

    def begin_batches(self) -> None:
        """The model is loaded: from now on a stop abandons the batch being explained."""
        if self.phase is not Phase.LOADING:
            raise RuntimeError(f"a run in its {self.phase.value} phase cannot begin its batches")
        self.phase = Phase.RUNNING

    def begin_finishing(self) -> bool:
        """The last phase, from either other; whether the run was stopped (it is interrupted then)."""
        self.phase = Phase.FINISHING
        self.interrupted = self.interrupted or self.stop_asked
        return self.interrupted

    def interrupt(self) -> None:
        """Stopped for good (a second Ctrl-C): asked to stop, and interrupted already."""
        self.stopping.set()
        self.interrupted = True

    def fail(self, error: str) -> None:
        self.error = error

    @property
    def unfinished_reason(self) -> str | None:
        """What the run file says of an image the run did not reach; ``None`` when it ran to its end."""
        if self.interrupted:
            return "interrupted"
        return "the run stopped on an error" if self.error else None


class Stopped(BaseException):
    """Raised inside the model's pass when a stop was asked for (not an Exception: the
    model's own ``except Exception`` must not take it for a failure)."""


@contextlib.contextmanager
def stoppable(model, stopping: threading.Event) -> Iterator[None]:
    """For one pass of ``model``: a stop asked for midway ends the pass as the next module
    starts (forward) or the next module's output gets its gradient (backward), not when
    the batch ends. One 37x1000 photo through fcn_resnet50 (520x14054 pixels) takes
    minutes. The hooks only read ``stopping``; they are all removed when the block ends."""
    import torch

    def check(*_) -> None:
        if stopping.is_set():
            raise Stopped

    def watch(_module, _args, output) -> None:
        if isinstance(output, torch.Tensor) and output.requires_grad:
            hooks.add(output.register_hook(check))

    with HookSet() as hooks:
        for module in model.modules():
            if not isinstance(module, torch.jit.ScriptModule):  # which take no Python hooks
                hooks.add(module.register_forward_pre_hook(check))
                hooks.add(module.register_forward_hook(watch))
        yield
