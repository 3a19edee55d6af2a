"""Where a run writes, in what batches, which slice of the images (``RunOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hookviz.budget import CAP
from hookviz.errors import UsageError, arg
from hookviz.options.base import set_field
from hookviz.options.launchers import launcher_shard

__all__ = ["parse_shard", "RunOptions"]


def parse_shard(text: str) -> tuple[int, int] | None:
    """``"2/8"`` -> (2, 8); ``"auto"`` -> what torchrun's or a Slurm array's variables say
    (``hookviz.options.launchers``), ``None`` without them. Raises UsageError for other forms or K
    outside 1..N."""
    if str(text).strip().lower() == "auto":
        return launcher_shard()
    try:
        k, n = (int(v) for v in str(text).split("/"))
    except ValueError:
        raise UsageError(f"{arg('shard', text)}: expected K/N, such as 1/4, or auto (torchrun's or a Slurm array's)") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"{arg('shard', text)}: K must be between 1 and N")
    return k, n


@dataclass(frozen=True)
class RunOptions:
    """Where and how a run over many images works.

    Attributes:
        out: the output folder (one sub-folder per image).
        save_tensors: also write each image's ``tensors.npz``.
        batch_size: most images per forward pass.
        skip_existing: skip images whose folder already holds this run's results.
        shard: ``(K, N)``: the K-th of N slices of the image list; ``"K/N"``; ``"auto"``:
            from torchrun's ``RANK``/``WORLD_SIZE`` or a Slurm array's variables (``hookviz.options.launchers``).
        workers: rendering processes (0: one per CPU).
        memory_budget: bytes of recorded tensors a batch may hold (``hookviz.budget.CAP``).
        tensorboard: also log to this TensorBoard folder.
        labels: a CSV of each image's true class (``hookviz.runs.sample_table.read_labels``).
        command: the command line, for run.json.
    """

    out: Path = Path("hookviz-out")
    save_tensors: bool = False
    batch_size: int = 8
    skip_existing: bool = False
    shard: tuple[int, int] | None = None
    workers: int = 0
    memory_budget: int = CAP
    tensorboard: Path | None = None
    labels: Path | None = None
    command: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.out, str) and not self.out.strip():
            raise UsageError(f"{arg('out', repr(self.out))}: give a folder name, such as hookviz-out")
        set_field(self, "out", Path(self.out))
        if isinstance(self.shard, str):
            set_field(self, "shard", parse_shard(self.shard))
        elif self.shard is not None:
            parse_shard("/".join(map(str, self.shard)))
            set_field(self, "shard", tuple(self.shard))
        if not isinstance(self.batch_size, int) or not 1 <= self.batch_size <= 1024:
            raise UsageError(f"{arg('batch_size', self.batch_size)}: must be from 1 to 1024")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise UsageError(f"{arg('workers', self.workers)}: must be 0 (one per CPU) or more")
        if self.tensorboard is not None:
            if isinstance(self.tensorboard, str) and not self.tensorboard.strip():
                raise UsageError(f"{arg('tensorboard', repr(self.tensorboard))}: give a folder name")
            logdir = Path(self.tensorboard)
            if logdir.exists() and not logdir.is_dir():
                raise UsageError(f"{arg('tensorboard', logdir)}: is a file, not a folder; choose a folder for the logs")
            set_field(self, "tensorboard", logdir)
        if self.labels is not None:
            if not Path(self.labels).is_file():
                raise UsageError(f"{arg('labels', self.labels)}: no such file; give a CSV of image,class rows")
            set_field(self, "labels", Path(self.labels))
