"""The atlas's files: the crops (``crops/<layer>/<i>/<k>.png``, and ``<k>.map.png`` with the
channel's map over it), ``atlas.json`` (schema ``hookviz/atlas/1``, in
``hookviz/schemas/atlas.schema.json``) and ``atlas.npz`` (the crops' maps, ``<layer>/<i>/<k>``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from hookviz.atlas.crops import Example
from hookviz.atlas.fields import ReceptiveField
from hookviz.atlas.plan import AtlasPlan
from hookviz.atlas.sketch import ALPHA
from hookviz.atlas.state import AtlasState

__all__ = ["AtlasWriter", "SCHEMA", "crop_name"]

SCHEMA = "hookviz/atlas/1"

#: How opaque the map lies over a crop where the channel fires most.
HEAT_ALPHA = 0.6


def crop_name(stem: str, channel: int, ranking: str, primary: str, rank: int) -> str:
    """A crop's path in the folder: the primary ranking's ``crops/<layer>/<i>/<k>.png``, another's
    ``crops/<layer>/<i>/<ranking>/<k>.png``."""
    folder = f"crops/{stem}/{channel}" + ("" if ranking == primary else f"/{ranking}")
    return f"{folder}/{rank}.png"


class AtlasWriter:
    """Takes each cut example (``take``), writes its crop and overlay at once and keeps what
    atlas.json and atlas.npz say of it; ``document`` is atlas.json's content."""

    def __init__(self, out: Path, plan: AtlasPlan, state: AtlasState, fields: dict[str, ReceptiveField], stems: dict[str, str]):
        import matplotlib

        self.out, self.plan, self.state, self.fields, self.stems = out, plan, state, fields, stems
        self.examples: dict[tuple[str, str, int, int], dict] = {}
        self.maps: dict[str, np.ndarray] = {}
        self._colours = (matplotlib.colormaps["inferno"](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.float32)

    def take(self, layer: str, ranking: str, channel: int, rank: int, example: Example) -> None:
        crop = crop_name(self.stems[layer], channel, ranking, self.plan.request.rank, rank)
        high = self.state.layers[layer].statistics.high[channel]
        _png(self.out / crop, example.pixels)
        _png(self.out / crop.replace(".png", ".map.png"), self._overlay(example, high))
        self.examples[(layer, ranking, channel, rank)] = {
            "position": list(example.position),
            "box": list(example.box),
            "frame": example.frame,
            "crop": crop,
            "overlay": crop.replace(".png", ".map.png"),
        }
        if ranking == self.plan.request.rank:
            self.maps[f"{layer}/{channel}/{rank}"] = example.cells

    def _overlay(self, example: Example, high: float) -> np.ndarray:
        scale = high if np.isfinite(high) and high > 0 else 1.0
        level = np.clip(np.nan_to_num(example.heat) / scale, 0, 1)
        colour = self._colours[(level * 255).astype(np.int64)]
        alpha = (HEAT_ALPHA * level)[..., None]
        return (example.pixels * (1 - alpha) + colour * alpha).round().astype(np.uint8)

    def document(self) -> dict:
        request = self.plan.request
        model = self.plan.model
        return {
            "schema": SCHEMA,
            "model": request.model,
            "weights": model.weights,
            "rank": request.rank,
            "top": request.top,
            "samples": self.state.done - len(self.state.failed),
            "failed": [{"source": str(self.plan.dataset.paths[i]), "error": line} for i, line in self.state.failed],
            "relevance": None,
            "classes_from": self.plan.classes,
            "quantiles_relative_error": ALPHA,
            "layers": [self._layer(name) for name in self.state.layers],
        }

    def _layer(self, name: str) -> dict:
        layer = self.state.layers[name]
        return {
            "name": name,
            "channels": layer.channels,
            "grid": list(layer.grid),
            "receptive_field": self.fields[name].to_json(),
            "items": [self._item(name, channel) for channel in range(layer.channels)],
        }

    def _item(self, name: str, channel: int) -> dict:
        layer = self.state.layers[name]
        item: dict = {"index": channel, "stats": layer.statistics.summary(channel)}
        for ranking, top in layer.tops.items():
            key = "top" if ranking == self.plan.request.rank else f"{ranking}_top"
            item[key] = [
                {"source": str(self.plan.dataset.paths[sample]), "score": score, **self.examples[(name, ranking, channel, rank)]}
                for rank, (sample, score, _peak) in enumerate(top.ranked(channel))
            ]
        item["page"] = f"channels/{self.stems[name]}/{channel}.html"
        return item

    def write_maps(self) -> None:
        from hookviz.store.files import atomic_write

        buffer = io.BytesIO()
        np.savez_compressed(buffer, **self.maps)  # type: ignore[arg-type]
        atomic_write(self.out / "atlas.npz", buffer.getvalue())


def _png(path: Path, pixels: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(pixels)).save(path, compress_level=1)
