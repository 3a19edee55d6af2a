"""What an atlas is asked for: one frozen, checked value, made where the arguments enter."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hookviz.errors import UsageError, arg

__all__ = ["AtlasRequest", "MAX_TOP", "parse_shard"]

#: The most examples a channel may keep.
MAX_TOP = 100


@dataclass(frozen=True)
class AtlasRequest:
    """Args:
    model, weights, seed: the model, as ``hookviz run`` loads it.
    layers: the layers (``--layer``), at least one.
    sources: the files, folders and patterns of the samples (``--from-list``'s included).
    out: the atlas's folder.
    top: examples kept per channel (``--top``).
    rank: the ranking of a channel's examples (``hookviz.atlas.ranking.RANKINGS``).
    shard: ``(K, N)``: this process takes the K-th of N slices of the samples; ``None``: all.
    skip_existing: resume from the state a killed run left in ``out``.
    batch_size, device: how the forward passes run.
    sample_options: sample kinds' option groups, as ``hookviz run`` takes them (a clip's
        ``VideoOptions``: ``--frames``, ``--clips``); a kind's defaults where none is given.
    """

    model: str
    layers: tuple[str, ...]
    sources: tuple[str, ...]
    out: Path
    weights: str = "DEFAULT"
    seed: int = 0
    top: int = 9
    rank: str = "max"
    shard: tuple[int, int] | None = None
    skip_existing: bool = False
    batch_size: int = 32
    device: str = "cpu"
    sample_options: tuple = ()
    notes: list[str] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        from hookviz.atlas.ranking import RANKINGS

        if not self.layers:
            raise UsageError(f"no layer given: pass {arg('layers', 'LAYER')} (hookviz layers --model {self.model} lists them)")
        if not 1 <= self.top <= MAX_TOP:
            raise UsageError(f"{arg('top', self.top)}: give a number from 1 to {MAX_TOP}")
        if not 1 <= self.batch_size <= 4096:
            raise UsageError(f"{arg('batch_size', self.batch_size)}: give a number from 1 to 4096")
        RANKINGS.get(self.rank)

    def recipe(self) -> dict:
        """What must match for two runs' states to be parts of one atlas (the shard aside)."""
        return {
            "model": self.model,
            "weights": self.weights,
            "seed": self.seed,
            "layers": list(self.layers),
            "top": self.top,
            "rank": self.rank,
        }


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``K/N`` -> ``(K, N)``; ``auto`` -> torchrun's or a Slurm array's; ``None`` -> torchrun's, if any.

    Raises:
        UsageError: not of the form K/N with 1 <= K <= N.
    """
    from hookviz.runs.cluster import AUTO, command_shard, launcher_shard

    given = command_shard(text)
    if given is None or isinstance(given, tuple):
        return given
    if given == AUTO:
        return launcher_shard()
    parts = given.split("/")
    if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
        k, n = int(parts[0]), int(parts[1])
        if 1 <= k <= n:
            return None if n == 1 else (k, n)
    raise UsageError(f"{arg('shard', given)}: give K/N with 1 <= K <= N (2/4: the second of four slices), or auto")
