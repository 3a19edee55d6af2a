"""Which slice of the photos this process takes, and which GPU, when a launcher started it.

``torchrun --nproc-per-node N -m hookviz run ...`` starts N processes, each with ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK`` set: each takes shard ``RANK + 1`` of ``WORLD_SIZE`` (the
``--shard K/N`` machinery: ``run-K-of-N.json``, one shared gallery) and, with ``--device
auto`` and CUDA present, the GPU ``cuda:LOCAL_RANK``. A Slurm array job's tasks take their
shard from ``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_MIN``, ``SLURM_ARRAY_TASK_STEP`` and
``SLURM_ARRAY_TASK_COUNT`` when asked with ``--shard auto`` (a Slurm job may be an array for
reasons of its own, so its variables are not read unasked). An explicit ``--shard K/N`` wins
over both; without these variables nothing changes.

Only the ``hookviz`` command and ``shard="auto"`` read the environment: ``hookviz.run`` with
``shard=None`` runs the whole list even inside a torchrun process of the caller's own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from hookviz.errors import UsageError, arg
from hookviz.options.launchers import launcher_shard, whole_number
from hookviz.options.model import check_device

__all__ = [
    "AUTO",
    "launcher_shard",
    "command_shard",
    "local_rank",
    "auto_cuda_device",
    "cpu_share",
    "resolve_device",
    "run_file_name",
    "shard_of",
]

#: The ``shard`` value that reads torchrun's or a Slurm array's variables.
AUTO = "auto"


def command_shard(given: str | None, environ: Mapping[str, str] | None = None) -> str | tuple[int, int] | None:
    """The ``hookviz run`` command's shard: ``given`` as it is (``K/N``, or ``auto``, which
    ``RunOptions`` reads); when not given, torchrun's (only a launcher that starts several
    copies of the command at once sets ``RANK`` and ``WORLD_SIZE``)."""
    if given is not None:
        return given
    return launcher_shard(environ, slurm=False)


def local_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """torchrun's ``LOCAL_RANK`` (this process's place on its machine), or ``None``."""
    environ = os.environ if environ is None else environ
    if "LOCAL_RANK" not in environ:
        return None
    return whole_number(environ, "LOCAL_RANK", 0)


def auto_cuda_device(count: int, environ: Mapping[str, str] | None = None) -> str:
    """``--device auto`` where ``count`` CUDA devices exist: ``cuda:LOCAL_RANK`` in a process
    torchrun started (each process its own GPU), else ``cuda``.

    Raises:
        UsageError: ``LOCAL_RANK`` names a GPU this machine does not have.
    """
    rank = local_rank(environ)
    if rank is None:
        return "cuda"
    if rank >= count:
        raise UsageError(
            f"LOCAL_RANK={rank}, but this machine has {count} CUDA device{'' if count == 1 else 's'}: "
            f"start at most {count} processes per machine (torchrun --nproc-per-node {count}) "
            f"or pass {arg('device')}"
        )
    return f"cuda:{rank}"


def cpu_share(environ: Mapping[str, str] | None = None) -> int:
    """The CPUs this process may use (its affinity, which Slurm's ``--cpus-per-task`` sets),
    divided among the processes torchrun started on this machine (``LOCAL_WORLD_SIZE``)."""
    environ = os.environ if environ is None else environ
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        processes = max(1, int(environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        processes = 1
    return max(1, cpus // processes)


def shard_of(items: Sequence, shard: tuple[int, int] | None) -> list:
    """The K-th of N deterministic slices (round-robin), K counted from 1."""
    if shard is None:
        return list(items)
    k, n = shard
    return [item for i, item in enumerate(items) if i % n == k - 1]


def run_file_name(shard: tuple[int, int] | None) -> str:
    """``run.json``, or ``run-K-of-N.json`` for a shard (shards may share a folder)."""
    return "run.json" if shard is None else f"run-{shard[0]}-of-{shard[1]}.json"


def resolve_device(device: str) -> str:
    """``auto`` -> the first of cuda (``cuda:LOCAL_RANK`` in a torchrun process), mps, cpu that
    exists. Raises UsageError for one that does not."""
    import torch

    check_device(device)  # as a run's ModelOptions does: torch's own words for another are a traceback's
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if device == "auto":
        return auto_cuda_device(torch.cuda.device_count()) if torch.cuda.is_available() else "mps" if mps else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"{arg('device', device)}: no CUDA device is available here; use {arg('device', 'cpu')}")
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise UsageError(f"{arg('device', device)}: only {torch.cuda.device_count()} CUDA devices here")
    if device == "mps" and not mps:
        raise UsageError(f"{arg('device', 'mps')}: Apple's MPS backend is not available here; use {arg('device', 'cpu')}")
    return device
