"""Smoothing (``--smooth``): every asked gradient method run again on noisy copies of the
batch, its maps aggregated as captum's ``NoiseTunnel`` aggregates them (what and why:
``hookviz.methods.smoothing``).

Each noisy copy goes through the model as the batch did, recorded at the same layers, with
one backward pass per CAM key from the task's score of it (``Task.scorer``); each smoothed
method is then handed that copy's context exactly as the image's: a layer method the copy's
activations and gradients at its layer, an input method the copy as ``ctx.inputs`` (and its
``input_gradient`` of it). The maps' sums and sums of squares make the smoothed map. The
targets stay the image's (the class its prediction picked, the detection it matched), as
captum's ``target`` stays fixed under the noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["smooth_maps"]


@dataclass
class _Sums:
    """Running sums and sums of squares of maps, by where they belong."""

    total: dict = field(default_factory=dict)
    squares: dict = field(default_factory=dict)

    def add(self, where, found: np.ndarray) -> None:
        value = found.astype(np.float64)
        self.total[where] = self.total.get(where, 0.0) + value
        self.squares[where] = self.squares.get(where, 0.0) + value * value

    def made(self, where, count: int, kind: str) -> np.ndarray:
        from hookviz.methods.smoothing import aggregate

        return aggregate(self.total[where], self.squares[where], count, kind).astype(np.float32)


def smooth_maps(explainer, settings, plan, samples, sources, layouts, layer_cams, pixels):
    """``layer_cams`` (one ``LayerMaps`` per capture) and ``pixels`` (``PixelMaps``) with the maps
    of every smoothable method replaced by its smoothed maps (``settings``: a ``SmoothOptions``)."""
    import torch

    from hookviz.methods.smoothing import noise_draws, smoothable
    from hookviz.workload import work

    methods = [m for m in explainer.methods if smoothable(m)]
    layer_methods = [m for m in methods if m.resolution == "layer"]
    input_methods = [m for m in methods if m.resolution == "input" and m.name in pixels.maps]
    if not sources.keys or not (layer_methods or input_methods):
        return layer_cams, pixels
    batch = sources.batch if sources.batch is not None else samples.main_input()
    noise = [noise_draws(batch[n : n + 1], settings) for n in range(len(batch))]
    sums = _Sums()
    count = settings.smooth_samples
    with work(
        f"{settings.smooth} of {', '.join(m.name for m in methods)}", count, "noisy copies", len(batch), whole=True
    ) as copies:
        for s in range(count):
            noisy = torch.stack([batch[n] + noise[n][s] for n in range(len(batch))])
            captures, gradients = _noisy_pass(explainer, plan, samples, noisy, any(m.needs_gradients for m in methods))
            given = replace(sources, batch=noisy, gradients=gradients)
            _add_layer_maps(sums, layer_methods, captures, given, layouts, layer_cams)
            _add_pixel_maps(sums, input_methods, captures, given, layouts)
            copies.advance(1)
    smoothed = [_smoothed_layer(found, p, sums, count, settings.smooth) for p, found in enumerate(layer_cams)]
    made = {m.name: sums.made(("input", m.name), count, settings.smooth) for m in input_methods}
    figures = {name: value for name, value in pixels.figures.items() if name not in made}  # they were of the image's map
    return smoothed, replace(pixels, maps={**pixels.maps, **made}, figures=figures)


def _noisy_pass(explainer, plan, samples, noisy, backward: bool):
    """One noisy copy of the batch through the model, recorded at the run's layers: the
    captures, and per CAM key each capture's gradient of the key's score (``None`` without ``backward``)."""
    import torch

    from hookviz.explaining.recording import Recording

    module, task, options = explainer.model.module, explainer.task, explainer.target
    rows = torch.arange(len(noisy))
    with torch.set_grad_enabled(backward), Recording(module, explainer.layers) as recording:
        output = samples.forward(rows, noisy)
        if not backward:
            return recording.captures, None
        keys = [key for key, _ in plan.cams]
        gradients = {}
        for n, key in enumerate(keys):
            score = task.scorer(plan, key, options)(output, rows).sum()
            pairs = recording.gradients(score, inputs=False, retain_graph=n < len(keys) - 1)
            gradients[key] = [grad_output for _, grad_output in pairs]
        return recording.captures, gradients


def _add_layer_maps(sums: _Sums, methods, captures, sources, layouts, layer_cams) -> None:
    """Each smoothed layer method's maps of this copy, for the keys it mapped of the image."""
    from hookviz.explaining.cams import method_map

    for position, (capture, found) in enumerate(zip(captures, layer_cams)):
        layout = layouts[position]["output"]
        for method in methods:
            for key in found.maps.get(method.name, {}):
                sums.add((position, method.name, key), method_map(method, capture, sources, key, position, layout))


def _add_pixel_maps(sums: _Sums, methods, captures, sources, layouts) -> None:
    """Each smoothed input method's maps of this copy."""
    from hookviz.explaining.cams import pixel_maps

    found = pixel_maps(methods, captures, [layout["output"] for layout in layouts], sources)
    for name, maps in found.maps.items():
        sums.add(("input", name), maps)


def _smoothed_layer(found, position: int, sums: _Sums, count: int, kind: str):
    """One layer's ``LayerMaps`` with each smoothed method's maps replaced."""
    maps = dict(found.maps)
    for name, by_key in found.maps.items():
        if (position, name, next(iter(by_key), None)) in sums.total:
            maps[name] = {key: sums.made((position, name, key), count, kind) for key in by_key}
    return replace(found, maps=maps)
