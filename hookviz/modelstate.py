"""Model state: what a pass reads of a caller's model (the dtype it computes in, the channels
it takes) and what it changes for a while, then puts back.

Every stage that runs a caller's model (tracing its layers, a task's forward call, a pass, the
trust measures) reads these, so they sit below all of them. A pass runs in eval mode (BatchNorm uses its running statistics and leaves them alone,
dropout is off, so the same image gives the same result every time) with every
parameter's gradient switched off (only the recorded tensors need gradients). Both
blocks put back exactly what they found: each module's mode, each parameter's flag.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["evaluation", "frozen_parameters", "TRAIN_MODE_NOTE", "model_dtype", "input_channels", "compiled_original"]

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


def compiled_original(module):
    """The module ``torch.compile`` wrapped, when ``module`` is its wrapper (an ``OptimizedModule``),
    else ``None``. Hooks on a compiled graph's modules never fire, or fire on traced stand-ins,
    and its paths all begin ``_orig_mod.``: the module it wraps is what a pass runs, eagerly.
    Read without importing TorchDynamo: a compiled module has imported it already."""
    import sys

    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    wrapper = getattr(eval_frame, "OptimizedModule", None)
    if wrapper is None or not isinstance(module, wrapper):
        return None
    return getattr(module, "_orig_mod", None)


def model_dtype(module):
    """The floating dtype of the model's parameters (float32 unless it was cast), so that
    photos go in as the model computes: a float64 model gets float64 input."""
    import torch

    return next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)


def input_channels(module) -> int:
    """How many channels the model's first convolution takes: 1 for a grayscale model,
    else 3 (RGB). Only the first ``Conv2d`` registered is looked at (the first ``Conv1d`` or
    ``Conv3d`` of a model without one); models whose stem comes later in registration order
    are taken as RGB."""
    first = _first_convolution(module)
    return 1 if first is not None and first.in_channels == 1 and first.groups == 1 else 3


def input_rank(module) -> int:
    """How many spatial dimensions the model's input has: 1 for a model of signals (its
    first convolution a ``Conv1d``), 3 for one of clips or volumes (a ``Conv3d``), else 2."""
    import torch.nn as nn

    first = _first_convolution(module)
    return 1 if isinstance(first, nn.Conv1d) else 3 if isinstance(first, nn.Conv3d) else 2


def _first_convolution(module):
    """The first ``Conv2d`` registered, else the first ``Conv1d`` or ``Conv3d``, else ``None``."""
    import torch.nn as nn

    convolutions = [m for m in module.modules() if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d))]
    return next((m for m in convolutions if isinstance(m, nn.Conv2d)), convolutions[0] if convolutions else None)
