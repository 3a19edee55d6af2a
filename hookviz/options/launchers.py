"""The shard a launcher's variables give this process: torchrun's ``RANK`` and ``WORLD_SIZE``,
or a Slurm array's task ids (``hookviz.runs.cluster`` says how a run uses it). It is read where
``shard="auto"`` is parsed (``RunOptions``), so it sits with the options."""

from __future__ import annotations

import os
from collections.abc import Mapping

from hookviz.errors import UsageError, arg

__all__ = ["launcher_shard", "whole_number"]

_TORCHRUN = ("RANK", "WORLD_SIZE")
_SLURM_ID, _SLURM_COUNT, _SLURM_MIN, _SLURM_MAX, _SLURM_STEP = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
)


def whole_number(environ: Mapping[str, str], name: str, lowest: int) -> int:
    """The environment variable ``name`` as a whole number of at least ``lowest``; UsageError otherwise."""
    text = environ[name]
    try:
        value = int(text.strip())
    except ValueError:
        value = lowest - 1
    if value < lowest:
        raise UsageError(
            f"the environment variable {name}={text!r} is not a whole number of at least {lowest}; "
            f"fix the launcher's settings or pass {arg('shard', 'K/N')}"
        )
    return value


def _torchrun_shard(environ: Mapping[str, str]) -> tuple[int, int] | None:
    present = [name for name in _TORCHRUN if name in environ]
    if not present:
        return None
    if len(present) == 1:
        missing = next(name for name in _TORCHRUN if name not in environ)
        raise UsageError(
            f"{present[0]} is set but {missing} is not, so this process cannot tell its share of the photos; "
            f"launch with torchrun, which sets both, or pass {arg('shard', 'K/N')}"
        )
    rank, world = whole_number(environ, "RANK", 0), whole_number(environ, "WORLD_SIZE", 1)
    if rank >= world:
        raise UsageError(
            f"RANK={rank} is not below WORLD_SIZE={world}; fix the launcher's settings or pass {arg('shard', 'K/N')}"
        )
    return None if world == 1 else (rank + 1, world)


def _slurm_shard(environ: Mapping[str, str]) -> tuple[int, int] | None:
    if _SLURM_ID not in environ:
        return None
    if _SLURM_COUNT not in environ:
        raise UsageError(
            f"{_SLURM_ID} is set but {_SLURM_COUNT} is not (Slurm sets both in an array job); pass {arg('shard', 'K/N')}"
        )
    task, count = whole_number(environ, _SLURM_ID, 0), whole_number(environ, _SLURM_COUNT, 1)
    first = whole_number(environ, _SLURM_MIN, 0) if _SLURM_MIN in environ else 0
    step = whole_number(environ, _SLURM_STEP, 1) if _SLURM_STEP in environ else 1
    last = whole_number(environ, _SLURM_MAX, 0) if _SLURM_MAX in environ else first + (count - 1) * step
    k, off_step = divmod(task - first, step)
    if off_step or not 0 <= k < count or last != first + (count - 1) * step:
        raise UsageError(
            f"the Slurm array's task ids are not one evenly spaced range ({_SLURM_ID}={task}, {_SLURM_MIN}={first}, "
            f"{_SLURM_MAX}={last}, {_SLURM_STEP}={step}, {_SLURM_COUNT}={count}); submit it as --array=1-{count} "
            f"or pass {arg('shard', 'K/N')}"
        )
    return k + 1, count


def launcher_shard(environ: Mapping[str, str] | None = None, *, slurm: bool = True) -> tuple[int, int] | None:
    """``(K, N)`` from torchrun's ``RANK``/``WORLD_SIZE`` or (with ``slurm``) a Slurm array's
    variables; ``None`` when neither is set, or when one process does all the work.

    Raises:
        UsageError: the variables contradict each other, or both launchers ask to split the photos.
    """
    environ = os.environ if environ is None else environ
    torchrun = _torchrun_shard(environ)
    array = _slurm_shard(environ) if slurm else None
    if torchrun and array and array[1] > 1:
        raise UsageError(
            f"both torchrun (WORLD_SIZE={torchrun[1]}) and a Slurm array ({_SLURM_COUNT}={array[1]}) would split the "
            f"photos; use one of them, or pass {arg('shard', 'K/N')}"
        )
    return torchrun or (array if array and array[1] > 1 else None)
