"""The atlas's files: the crops (``crops/<layer>/<i>/<k>.png``, and ``<k>.map.png`` with the
channel's map over it, or its relevance for one ranked by relevance), ``atlas.json`` (schema
``hookviz/atlas/1``, in ``hookviz/schemas/atlas.schema.json``) and ``atlas.npz`` (the crops' maps,
``<layer>/<i>/<k>``, and the relevance under those ranked by it, ``<layer>/<i>/relevance/<k>``)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from hookviz.atlas.crops import Example
from hookviz.atlas.dataset import shown_path, source_folders
from hookviz.atlas.fields import ReceptiveField
from hookviz.atlas.plan import AtlasPlan
from hookviz.atlas.request import RELEVANCE
from hookviz.atlas.sketch import ALPHA
from hookviz.atlas.state import AtlasState

__all__ = ["AtlasWriter", "SCHEMA", "crop_name"]

SCHEMA = "hookviz/atlas/1"

#: How opaque the map lies over a crop where the channel fires most; below ``HEAT_FLOOR`` of
#: the channel's largest value over the dataset the crop shows as it is, so that where it fires stands out.
HEAT_ALPHA, HEAT_FLOOR = 0.7, 0.25

#: Relevance's colours over a crop ranked by it: signed, red for the class and blue against, as
#: hookviz's pictures draw gradients (``hookviz.render.figures.GRADIENT_CMAP``, not imported: 0.25 s).
RELEVANCE_CMAP = "RdBu_r"

#: The outline of the peak unit's own cell in the overlay.
PEAK_COLOUR = (0, 230, 255)


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
        self.folders = source_folders(plan.request.sources)
        self.maps: dict[str, np.ndarray] = {}
        self._colours = (matplotlib.colormaps["inferno"](np.linspace(0.45, 1, 256))[:, :3] * 255).astype(np.float32)
        self._signed: np.ndarray | None = None  # relevance's colours, made when a crop ranked by relevance comes

    def take(self, layer: str, ranking: str, channel: int, rank: int, example: Example) -> None:
        crop = crop_name(self.stems[layer], channel, ranking, self.plan.request.rank, rank)
        _png(self.out / crop, example.pixels)
        if ranking == RELEVANCE:  # what it is ranked by: the channel's relevance, for (red) or against (blue) the class
            overlay = self._relevance_overlay(example)
            self.maps[f"{layer}/{channel}/{RELEVANCE}/{rank}"] = example.cells
        else:
            overlay = self._overlay(example, self.state.layers[layer].statistics.high[channel])
        _png(self.out / crop.replace(".png", ".map.png"), overlay)
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
        alpha = (HEAT_ALPHA * np.clip((level - HEAT_FLOOR) / (1 - HEAT_FLOOR), 0, 1))[..., None]
        blended = (example.pixels * (1 - alpha) + colour * alpha).round().astype(np.uint8)
        return _outlined(blended, example.cell)

    def _relevance_overlay(self, example: Example) -> np.ndarray:
        """The crop under its relevance, on the scale of its most relevant unit (the peak, 1: deep red; -1: deep blue)."""
        if self._signed is None:
            import matplotlib

            self._signed = (matplotlib.colormaps[RELEVANCE_CMAP](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.float32)
        peak = float(example.peak_value)
        scale = peak if np.isfinite(peak) and peak > 0 else float(np.nanmax(np.abs(example.heat), initial=0.0)) or 1.0
        level = np.clip(np.nan_to_num(example.heat) / scale, -1, 1)
        colour = self._signed[((level + 1) / 2 * 255).round().astype(np.int64)]
        alpha = (HEAT_ALPHA * np.clip((np.abs(level) - HEAT_FLOOR) / (1 - HEAT_FLOOR), 0, 1))[..., None]
        blended = (example.pixels * (1 - alpha) + colour * alpha).round().astype(np.uint8)
        return _outlined(blended, example.cell)

    def document(self) -> dict:
        request = self.plan.request
        model = self.plan.model
        return {
            "schema": SCHEMA,
            "model": request.model,
            "weights": model.weights,
            "rank": request.rank,
            "top": request.top,
            "samples": self.state.mapped,
            "failed": [{"source": str(self.plan.dataset.paths[i]), "error": line} for i, line in self.state.failed],
            "relevance": request.relevance,
            "relevance_rule": request.relevance_rule if request.relevance is not None else None,
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
                {
                    "source": str(self.plan.dataset.paths[sample]),
                    "shown": shown_path(self.plan.dataset.paths[sample], self.folders),
                    "score": score,
                    **self.examples[(name, ranking, channel, rank)],
                }
                for rank, (sample, score, _peak) in enumerate(top.ranked(channel))
            ]
        item["page"] = f"channels/{self.stems[name]}/{channel}.html"
        return item

    def write_maps(self) -> None:
        from hookviz.store.files import atomic_write

        buffer = io.BytesIO()
        np.savez_compressed(buffer, **self.maps)  # type: ignore[arg-type]
        atomic_write(self.out / "atlas.npz", buffer.getvalue())


def _outlined(pixels: np.ndarray, cell: tuple[int, int, int, int]) -> np.ndarray:
    """``pixels`` with the peak cell's outline drawn (as much of it as lies in the crop)."""
    height, width = pixels.shape[:2]
    x0, y0, x1, y1 = max(cell[0], 0), max(cell[1], 0), min(cell[2], width), min(cell[3], height)
    if x1 - x0 < 4 or y1 - y0 < 4:  # a cell of a few pixels: its outline would hide it
        return pixels
    line = max(1, min(height, width) // 80)
    outlined = pixels.copy()
    outlined[y0 : y0 + line, x0:x1] = outlined[max(y1 - line, y0) : y1, x0:x1] = PEAK_COLOUR
    outlined[y0:y1, x0 : x0 + line] = outlined[y0:y1, max(x1 - line, x0) : x1] = PEAK_COLOUR
    return outlined


def _png(path: Path, pixels: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(pixels)).save(path, compress_level=1)
