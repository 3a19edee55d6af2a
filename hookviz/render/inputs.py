"""The pictures of a sample's other inputs (``hookviz.samples.multi``): each input as the model
took it, shown beside the first in the gallery (``input.NAME.jpg``: a photo as preprocessed, a
map such as a depth map in grey, min to max), each pixel method's map of it at its own resolution
(``NAME.pixel_maps.png``), and a vector's attributions as a bar chart by feature name
(``NAME.attributions.png``: the CSV's header)."""

from __future__ import annotations

import io

import numpy as np

__all__ = ["input_pictures", "attribution_chart", "input_maps_chart", "ATTRIBUTIONS_SUFFIX", "INPUT_PREFIX", "MAPS_SUFFIX"]

#: The other inputs' pictures are ``input.NAME.jpg``; a vector's chart ``NAME.attributions.png``;
#: another input's pixel maps ``NAME.pixel_maps.png``.
INPUT_PREFIX, ATTRIBUTIONS_SUFFIX, MAPS_SUFFIX = "input.", ".attributions.png", ".pixel_maps.png"


def input_pictures(explanation) -> list[tuple[str, bytes]]:
    """``(file name, bytes)`` per picture of the sample's other inputs; ``[]`` for a sample of one input."""
    sample = explanation.image
    kinds = getattr(sample, "kinds", None)
    if not kinds:
        return []
    made = []
    for name, kind in kinds.items():
        if name == sample.main:
            continue
        if kind == "vector":
            chart = attribution_chart(explanation, name)
            if chart is not None:
                made.append((f"{name}{ATTRIBUTIONS_SUFFIX}", chart))
            continue
        pixels = sample.views.get(name) if kind == "photo" else _grey(sample.tensors[name])
        if pixels is not None:
            made.append((f"{INPUT_PREFIX}{name}.jpg", _jpeg(pixels)))
            maps = input_maps_chart(explanation, name, pixels)
            if maps is not None:
                made.append((f"{name}{MAPS_SUFFIX}", maps))
    return made


def input_maps_chart(explanation, name: str, pixels: np.ndarray) -> bytes | None:
    """A PNG of input ``name`` (``pixels``) beside each pixel method's map of it at its own
    resolution (the map's magnitude summed over channels, min to max); ``None``: no method mapped it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    maps = {m: np.asarray(p.inputs[name]) for m, p in explanation.pixel_maps.items() if p.inputs and name in p.inputs}
    maps = {m: np.abs(v).sum(axis=0) if v.ndim == 3 else np.abs(v) for m, v in maps.items()}
    maps = {m: v for m, v in maps.items() if v.ndim == 2}
    if not maps:
        return None
    figure = Figure(figsize=(2.6 * (len(maps) + 1), 2.8), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, len(maps) + 1, 1)
    axes.imshow(pixels)
    axes.set_title(f"{name} ({pixels.shape[1]}x{pixels.shape[0]})", fontsize=9)
    axes.axis("off")
    for column, (method, values) in enumerate(maps.items()):
        axes = figure.add_subplot(1, len(maps) + 1, column + 2)
        shown = axes.imshow(values, cmap="inferno")
        figure.colorbar(shown, ax=axes, fraction=0.046, pad=0.04)
        axes.set_title(f"{method}: |map|", fontsize=9)
        axes.axis("off")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _grey(tensor) -> np.ndarray | None:
    """A map's first channel, min to max in grey (H, W, 3) uint8, or ``None`` for one without two spatial axes."""
    values = np.asarray(tensor.detach().float().cpu().numpy() if hasattr(tensor, "detach") else tensor, dtype=np.float32)
    if values.ndim == 3:
        values = values[0]
    if values.ndim != 2:
        return None
    values = np.nan_to_num(values)
    low, high = float(values.min()), float(values.max())
    scaled = (values - low) / (high - low) if high > low else np.zeros_like(values)
    grey = (scaled * 255).round().astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=2)


def attribution_chart(explanation, name: str) -> bytes | None:
    """A PNG of input ``name``'s attributions, a bar per feature, one panel per pixel method that mapped it; ``None``: none did."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    maps = {m: p.inputs[name] for m, p in explanation.pixel_maps.items() if p.inputs and name in p.inputs}
    if not maps:
        return None
    first = np.asarray(next(iter(maps.values()))).reshape(-1)
    features = tuple(explanation.image.features.get(name, ())) or tuple(f"feature {i}" for i in range(first.size))
    height = 0.6 + 0.28 * len(features)
    figure = Figure(figsize=(4.5 * len(maps), max(2.2, height)), dpi=100)
    FigureCanvasAgg(figure)
    for column, (method, values) in enumerate(maps.items()):
        given = np.asarray(values, dtype=np.float32).reshape(-1)
        values = np.where(np.isfinite(given), given, 0.0)  # a NaN or infinite bar is drawn empty and labelled
        axes = figure.add_subplot(1, len(maps), column + 1)
        colours = ["#c0392b" if v > 0 else "#2e6fb0" for v in values]
        axes.barh(range(values.size), values, color=colours)
        for row in np.flatnonzero(~np.isfinite(given)):
            axes.text(0, float(row), f" {given[row]}", va="center", fontsize=8)
        axes.set_yticks(range(values.size), features[: values.size] if len(features) >= values.size else None)
        axes.invert_yaxis()
        axes.axvline(0, color="black", linewidth=0.8)
        axes.set_title(f"{name}: {method}", fontsize=9)
        axes.set_xlabel("attribution (red: raises the score)", fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()
