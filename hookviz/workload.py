"""How far long work inside one photo has got: the passes a method or a trust measure makes
(Score-CAM's masked inputs, integrated gradients' steps, the faithfulness measures' altered
photos, the sanity check's randomised copies) are counted, with a label, and told to whoever
listens. Nothing listens unless a caller asks (``listening``): ``hookviz.explain`` prints
nothing; ``hookviz run`` shows it (``hookviz.progress``).

Example::

    with work("ablationcam at layer4", total=2048, unit="ablated passes", photos=1) as passes:
        for chunk in chunks:
            ...
            passes.advance(len(chunk))

A work begun with ``fed=True`` is advanced by the chunked passes beneath it instead
(``tasks.base.Rescoring``, ``explaining.extra_passes.InputGradients`` call ``passed(rows)``).
A work begun with ``whole=True`` counts the whole of what it does: the works begun inside it
are counted as ever but told to no listener (``--smooth``'s noisy copies: the steps of
integrated gradients within each copy would otherwise start over, "2 of 1026 steps", per copy).

Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Listener", "Work", "listening", "passed", "work"]


@dataclass
class Work:
    """One piece of counted work: ``done`` of ``total`` ``unit`` (``masked passes``) for
    ``photos`` photos, under ``label`` (``scorecam at layer4``), begun at ``started``
    (``time.monotonic``)."""

    label: str
    total: int
    unit: str = "passes"
    photos: int = 1
    done: int = 0
    fed: bool = False
    whole: bool = False
    started: float = field(default_factory=time.monotonic)
    listener: Listener | None = field(default=None, repr=False, compare=False)

    def advance(self, count: int = 1) -> None:
        """``count`` more passes are done (never more than ``total`` in all)."""
        self.done = min(self.total, self.done + count)
        if self.listener is not None:
            self.listener.advanced(self)


class Listener(Protocol):
    """What hears of work: when it begins, each time it advances, and when it ends."""

    def began(self, work: Work) -> None: ...

    def advanced(self, work: Work) -> None: ...

    def ended(self, work: Work) -> None: ...


_LISTENER: contextvars.ContextVar[Listener | None] = contextvars.ContextVar("hookviz_work_listener", default=None)
_CURRENT: contextvars.ContextVar[Work | None] = contextvars.ContextVar("hookviz_current_work", default=None)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Within the block (in this thread), ``listener`` hears of all work."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


@contextlib.contextmanager
def work(
    label: str, total: int, unit: str = "passes", photos: int = 1, *, fed: bool = False, whole: bool = False
) -> Iterator[Work]:
    """Counted work within the block: advance the ``Work`` it gives as passes are done, or,
    with ``fed``, let the chunked passes beneath it advance it (``passed``). With ``whole``,
    or inside a work begun so, the works begun within are told to no listener."""
    outer = _CURRENT.get()
    within = outer is not None and outer.whole
    listener = None if within else _LISTENER.get()
    current = Work(label, max(0, int(total)), unit, max(1, photos), fed=fed, whole=whole or within, listener=listener)
    token = _CURRENT.set(current)
    if listener is not None:
        listener.began(current)
    try:
        yield current
    finally:
        _CURRENT.reset(token)
        if listener is not None:
            listener.ended(current)


def passed(rows: int) -> None:
    """A chunked pass of ``rows`` rows is done: it advances the innermost work, when that
    was begun ``fed``."""
    current = _CURRENT.get()
    if current is not None and current.fed:
        current.advance(rows)
