"""How many rows a batched pass may take at once: one memory budget, sized from the device,
that every pass of many rows keeps to (integrated gradients' steps, the masked inputs of
Score-CAM, the ablated outputs of Ablation-CAM, the altered photos of the faithfulness
measures, the randomised copies' passes of the sanity check), as captum's
``internal_batch_size`` lets its users do by hand; and the batches of a run, sized from what
recording one image holds.

The budget: on a CUDA device, half of its free memory; elsewhere, a quarter of the memory
the system has available, at most ``CAP`` (the recording budget of a run's batches).
``HOOKVIZ_MEMORY_BUDGET`` (bytes, or ``64M``, ``2G``) sets it instead. What one row costs is
measured on a pass the work makes anyway (``measuring``): a pass that keeps its graph for a
backward pass holds every layer's output of every row until then; one under
``torch.inference_mode`` holds little more than the largest layer's input and output at once.
Chunking changes no result: rows are independent, so a map made in many passes equals the
one made in one (to float rounding, 1e-6).

Nothing here imports torch at module level.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["CAP", "ENVIRONMENT", "RowCost", "check_environment", "device_budget", "measuring", "recorded_bytes", "rows_within"]

#: The most a pass may hold on a CPU (and a run's batches of recorded tensors anywhere).
CAP = 256 << 20
#: Names a budget in bytes (``64M``, ``2G``), in place of the device's.
ENVIRONMENT = "HOOKVIZ_MEMORY_BUDGET"
_CPU_SHARE, _CUDA_SHARE = 0.25, 0.5
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def rows_within(row_bytes: int, budget: int, most: int) -> int:
    """How many rows of ``row_bytes`` each fit in ``budget``: at least 1, at most ``most``."""
    return max(1, min(most, budget // max(1, row_bytes)))


def device_budget(device) -> int:
    """The bytes one pass on ``device`` may hold (see the module's docstring)."""
    given = _given_budget()
    if given is not None:
        return given
    if str(device).startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free * _CUDA_SHARE)
    available = _available_memory()
    return CAP if available is None else min(CAP, int(available * _CPU_SHARE))


def _given_budget() -> int | None:
    """The budget ``HOOKVIZ_MEMORY_BUDGET`` names, or ``None`` where it is not set.

    Raises:
        UsageError: a value that is no positive, finite size (``0``, ``-5``, ``inf``, ``1T``, ``abc``).
    """
    from hookviz.errors import UsageError

    given = os.environ.get(ENVIRONMENT, "")
    text = given.strip().upper().removesuffix("B")
    if not text:
        return None
    number, unit = (text[:-1], text[-1]) if text[-1] in _UNITS else (text, "")
    try:
        value = float(number) * _UNITS[unit]
        if 1 <= value < float("inf"):
            return int(value)
    except ValueError:
        pass
    raise UsageError(
        f"{ENVIRONMENT}={given!r}: a memory budget is a positive number of bytes, or one with K, M or G "
        f"({ENVIRONMENT}=512M); unset it for the device's own"
    )


def check_environment() -> None:
    """Raise UsageError for a ``HOOKVIZ_MEMORY_BUDGET`` that names no budget, before any work."""
    _given_budget()


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), else the free pages, else ``None``."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    with contextlib.suppress(AttributeError, ValueError, OSError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


@dataclass(frozen=True)
class RowCost:
    """What one row of a pass holds, in bytes, as measured on a pass of the model.

    Attributes:
        gradient: a pass that keeps its graph for a backward pass (every layer's output,
            and twice the largest for the gradients flowing back).
        inference: a pass under ``torch.inference_mode`` (twice the largest layer's input
            and output: a residual branch keeps another alive).
    """

    gradient: int = 0
    inference: int = 0

    def rows(self, device, most: int, *, gradients: bool) -> int:
        """How many rows a pass of this kind on ``device`` may take: at most ``most``."""
        return rows_within(self.gradient if gradients else self.inference, device_budget(device), most)


class _Measure:
    def __init__(self, rows: int):
        self.rows, self.total, self.largest, self.widest = max(1, rows), 0, 0, 0
        self.cost = RowCost()

    def leaf(self, _module, args, output) -> None:
        made, taken = _bytes(output), _bytes(args)
        self.total += _bytes(output, _storages(args))  # an in-place op's output (ReLU(inplace=True)) is its input's memory
        self.largest, self.widest = max(self.largest, made), max(self.widest, made + taken)

    def finish(self, floor: int) -> None:
        gradient = (self.total + 2 * self.largest) // self.rows
        inference = 2 * self.widest // self.rows
        self.cost = RowCost(max(gradient, floor), max(inference, floor))


@contextlib.contextmanager
def measuring(module, rows: int, input_row_bytes: int = 0) -> Iterator[_Measure]:
    """Within the block, the model's passes are measured; after it, ``.cost`` is a
    ``RowCost`` per row of a pass of ``rows`` rows (at least ``input_row_bytes``). The hooks
    (forward hooks on the modules without children) are removed when the block ends."""
    from hookviz.hooks import HookSet

    measure = _Measure(rows)
    with HookSet() as hooks:
        for child in module.modules():
            if next(child.children(), None) is None:
                hooks.add(child.register_forward_hook(measure.leaf))
        yield measure
    measure.finish(input_row_bytes)


def _bytes(value, besides: frozenset[int] = frozenset()) -> int:
    """The bytes of the tensors in ``value`` (a tensor, or a tuple, list or dict of them),
    less those whose storage is one of ``besides``."""
    if hasattr(value, "element_size") and hasattr(value, "numel"):
        return 0 if _storages(value) & besides else value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_bytes(item, besides) for item in value)
    if isinstance(value, dict):
        return sum(_bytes(item, besides) for item in value.values())
    return 0


def _storages(value) -> frozenset[int]:
    """Where the tensors in ``value`` (a tensor, a tuple or list of them) keep their data."""
    if hasattr(value, "untyped_storage"):
        return frozenset((value.untyped_storage().data_ptr(),))
    if isinstance(value, (tuple, list)):
        return frozenset().union(*(_storages(item) for item in value))
    return frozenset()


def recorded_bytes(explanation) -> int:
    """What recording one image holds during a batch: value, copy and gradient (float32)
    of every recorded input and output."""
    import math

    elements = sum(
        math.prod(shape)
        for layer in explanation.layers
        for key in ("input", "output")
        if (shape := layer.shapes.get(key)) is not None
    )
    return 4 * 3 * elements + 4 * math.prod(explanation.image.tensor.shape)  # and the photo itself
