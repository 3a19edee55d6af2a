"""The running state of an atlas: per layer its top-K and statistics, and how far the samples
went. It is saved atomically (``save``: a temporary file and a rename) after every chunk of
samples, so a killed run resumes (``--skip-existing``) where its last save left it, without
counting a sample twice; each shard saves its own, and ``merge`` adds shards' states into one.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hookviz.atlas.sketch import MaxSketch
from hookviz.atlas.statistics import ChannelStatistics
from hookviz.atlas.topk import TopK

__all__ = ["LayerState", "AtlasState", "STATE_FOLDER", "state_path", "load_state"]

#: Where in the atlas's folder the states are kept.
STATE_FOLDER = ".atlas-state"


@dataclass
class LayerState:
    """One layer's part: ``grid`` of its maps, ``tops`` per ranking name, ``statistics``."""

    name: str
    channels: int
    grid: tuple[int, ...]
    tops: dict[str, TopK]
    statistics: ChannelStatistics

    @classmethod
    def empty(cls, name: str, channels: int, grid: tuple[int, ...], rankings: tuple[str, ...], k: int) -> "LayerState":
        return cls(name, channels, grid, {r: TopK(channels, k) for r in rankings}, ChannelStatistics(channels))

    def merge(self, other: "LayerState") -> None:
        for ranking, top in other.tops.items():
            self.tops[ranking].merge(top)
        self.statistics.merge(other.statistics)


@dataclass
class AtlasState:
    """``recipe``: the request's (``AtlasRequest.recipe``) and the samples' digest; ``done``:
    how many of this part's samples were taken (in order); ``failed``: samples that could not
    be read, each with its one line; ``finished``: every sample of the part was taken;
    ``rendering``: the options of the atlas's later steps it was run with (naming, visualising:
    ``AtlasRequest.rendering``), which ``hookviz atlas --merge`` takes; ``None``: not recorded
    (a state of an older hookviz)."""

    recipe: dict
    shard: tuple[int, int] | None
    layers: dict[str, LayerState] = field(default_factory=dict)
    done: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    finished: bool = False
    rendering: dict | None = None

    @property
    def mapped(self) -> int:
        """The samples taken into the atlas: those read, less those that could not be."""
        return self.done - len(self.failed)

    def merge(self, other: "AtlasState") -> None:
        for name, layer in other.layers.items():
            if name in self.layers:
                self.layers[name].merge(layer)
            else:
                self.layers[name] = layer
        self.done += other.done
        self.failed = sorted(self.failed + other.failed)

    def save(self, path: Path) -> None:
        from hookviz.store.files import atomic_write

        arrays: dict[str, np.ndarray] = {}
        layers: list[dict] = []
        header: dict[str, Any] = {"recipe": self.recipe, "shard": self.shard, "done": self.done, "failed": self.failed}
        header.update(finished=self.finished, layers=layers, rendering=self.rendering)
        for number, layer in enumerate(self.layers.values()):
            stats = layer.statistics
            layers.append(
                {
                    "name": layer.name,
                    "channels": layer.channels,
                    "grid": list(layer.grid),
                    "count": stats.count,
                    "rankings": list(layer.tops),
                    "classes": list(stats.classes),
                }
            )
            for ranking, top in layer.tops.items():
                for part in ("scores", "samples", "peaks"):
                    arrays[f"{number}/top/{ranking}/{part}"] = getattr(top, part)
            for part in ("sums", "dead", "low", "high"):
                arrays[f"{number}/{part}"] = getattr(stats, part)
            arrays[f"{number}/sketch"] = stats.sketch.counts
            arrays[f"{number}/class_sums"] = np.array([s for s, _ in stats.classes.values()]).reshape(-1, layer.channels)
            arrays[f"{number}/class_counts"] = np.array([c for _, c in stats.classes.values()], dtype=np.int64)
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
        atomic_write(path, buffer.getvalue())


def state_path(out: Path, shard: tuple[int, int] | None) -> Path:
    """The state file of ``shard`` (``None``: the whole run) in atlas folder ``out``."""
    return out / STATE_FOLDER / ("state.npz" if shard is None else f"state-{shard[0]}-of-{shard[1]}.npz")


def load_state(path: Path) -> AtlasState:
    """The state saved at ``path``. Raises ``OSError`` or ``ValueError`` for a file that is no state."""
    with np.load(path) as saved:
        header = json.loads(bytes(saved["header"]).decode())
        shard = tuple(header["shard"]) if header["shard"] else None
        state = AtlasState(header["recipe"], shard, done=header["done"], finished=header["finished"])  # type: ignore[arg-type]
        state.rendering = header.get("rendering")
        state.failed = [(int(i), str(line)) for i, line in header["failed"]]
        for number, entry in enumerate(header["layers"]):
            state.layers[entry["name"]] = _layer(saved, number, entry)
    return state


def _layer(saved, number: int, entry: dict) -> LayerState:
    tops = {
        ranking: TopK.of_arrays(*(saved[f"{number}/top/{ranking}/{part}"] for part in ("scores", "samples", "peaks")))
        for ranking in entry["rankings"]
    }
    stats = ChannelStatistics(entry["channels"])
    stats.count = entry["count"]
    for part in ("sums", "dead", "low", "high"):
        setattr(stats, part, saved[f"{number}/{part}"])
    stats.sketch = MaxSketch(entry["channels"], saved[f"{number}/sketch"])
    sums, counts = saved[f"{number}/class_sums"], saved[f"{number}/class_counts"]
    stats.classes = {name: [sums[i].astype(np.float64), int(counts[i])] for i, name in enumerate(entry["classes"])}
    return LayerState(entry["name"], entry["channels"], tuple(entry["grid"]), tops, stats)
