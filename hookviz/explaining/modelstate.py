"""Model state: explain a caller's model without changing it.

A pass runs in eval mode (BatchNorm uses its running statistics and leaves them alone,
dropout is off, so the same image gives the same result every time) with every
parameter's gradient switched off (only the recorded tensors need gradients). Both
blocks put back exactly what they found: each module's mode, each parameter's flag.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["evaluation", "frozen_parameters", "TRAIN_MODE_NOTE"]

TRAIN_MODE_NOTE = (
    "the model was in train mode: explained in eval mode (running BatchNorm statistics, no dropout), "
    "and its mode restored afterwards"
)


@contextlib.contextmanager
def evaluation(model) -> Iterator[bool]:
    """Put every module of ``model`` in eval mode for the block, then restore each one's mode.

    Yields:
        Whether any module was in train mode (the caller notes it in the result).

    Modes are set and restored module by module, as flags, so a model whose ``train()``
    is overridden is not asked to do anything else.
    """
    modes = [(module, module.training) for module in model.modules()]
    was_training = any(training for _, training in modes)
    try:
        for module, _ in modes:
            module.training = False
        yield was_training
    finally:
        for module, training in modes:
            module.training = training


@contextlib.contextmanager
def frozen_parameters(model) -> Iterator[None]:
    """Switch parameter gradients off for the block, and restore each flag after it."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
