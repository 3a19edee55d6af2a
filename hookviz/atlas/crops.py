"""The crops: each top example's input region that its peak unit sees, and the channel's map
over it. A second, short pass re-reads only the samples that are someone's top example (at
most channels x K of them, whatever the dataset) and cuts them, batch by batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hookviz.atlas.fields import ReceptiveField
from hookviz.atlas.plan import AtlasPlan
from hookviz.atlas.request import RELEVANCE
from hookviz.atlas.state import AtlasState
from hookviz.errors import ImageError

__all__ = ["Example", "cut_examples", "frame_pixels"]


@dataclass(frozen=True)
class Example:
    """One of a channel's top examples, cut: ``position`` in the layer's grid, ``box`` ``[x0, y0,
    x1, y1]`` in input pixels (``frame``: the clip's frame it is cut from), ``pixels`` the crop
    (h, w, 3) uint8, ``heat`` the channel's map (its relevance map, for an example ranked by
    relevance) upsampled over the crop, ``cells`` the map's own
    values over the grid cells whose centres fall in the box, ``cell`` the peak cell's own
    footprint ``[x0, y0, x1, y1]`` in the crop's pixels."""

    position: tuple[int, ...]
    box: tuple[int, int, int, int]
    frame: int | None
    pixels: np.ndarray = field(repr=False)
    heat: np.ndarray = field(repr=False)
    cells: np.ndarray = field(repr=False)
    cell: tuple[int, int, int, int] = (0, 0, 0, 0)
    #: The map's value at the peak unit.
    peak_value: float = 0.0


def _wanted(state: AtlasState) -> dict[int, list[tuple[str, str, int, int, int]]]:
    """Per sample id, the slots it fills: (layer, ranking, channel, rank, peak)."""
    wanted: dict[int, list] = {}
    for layer in state.layers.values():
        for ranking, top in layer.tops.items():
            for channel in range(layer.channels):
                for rank, (sample, _score, peak) in enumerate(top.ranked(channel)):
                    wanted.setdefault(sample, []).append((layer.name, ranking, channel, rank, peak))
    return wanted


def cut_examples(plan: AtlasPlan, state: AtlasState, fields: dict[str, ReceptiveField], take) -> None:
    """Cut every top example of ``state``; ``take(layer, ranking, channel, rank, example)`` gets each.
    An example ranked by relevance (``--relevance``) carries the channel's relevance map, what it
    is ranked by; the others its activation."""
    from hookviz.atlas.collect import _chunks

    wanted = _wanted(state)
    ids = sorted(wanted)
    loader = plan.loader(ids, 2 * plan.request.batch_size)
    try:
        for chunk in _chunks(zip(ids, loader), plan.request.batch_size):
            samples = [sample for _, (_path, sample) in chunk]
            for sample in samples:
                if isinstance(sample, ImageError):  # it was read in the first pass: it changed since
                    raise sample
            relevant = any(slot[1] == RELEVANCE for sample_id, _item in chunk for slot in wanted[sample_id])
            maps = _chunk_maps(plan, samples, relevant)
            for row, (sample_id, _item) in enumerate(chunk):
                for layer, ranking, channel, rank, peak in wanted[sample_id]:
                    plane = maps[(layer, ranking if ranking == RELEVANCE else "")][row, channel]
                    take(layer, ranking, channel, rank, _cut(plane.float().cpu(), peak, samples[row], fields[layer], plan))
    finally:
        loader.stop()


def _chunk_maps(plan: AtlasPlan, samples, relevant: bool) -> dict:
    """``(layer, "")``: each layer's maps over ``samples``; with ``relevant``, ``(layer, RELEVANCE)``:
    its relevance maps for the class asked, as the collection's pass computed them (``hookviz.atlas.relevance``)."""
    import contextlib

    import torch

    from hookviz.atlas.collect import layer_maps
    from hookviz.atlas.relevance import gradient_relevance, lrp_relevance
    from hookviz.explaining.recording import record
    from hookviz.modelstate import frozen_parameters

    gradient = relevant and plan.gradient
    frozen = frozen_parameters(plan.model.module) if gradient else contextlib.nullcontext()
    with torch.set_grad_enabled(gradient), frozen, record(plan.model.module, list(plan.specs)) as recording:
        output = plan.forward(samples)
        found = {(name, ""): maps.detach() for name, maps in layer_maps(recording)}
        relevance = gradient_relevance(plan, output, recording) if gradient else {}
    if relevant and not plan.gradient:
        relevance = lrp_relevance(plan, samples)
    found.update({(name, RELEVANCE): maps.detach() for name, maps in relevance.items()})
    return found


def _cut(channel_map, peak: int, sample, field_: ReceptiveField, plan: AtlasPlan) -> Example:
    import torch

    grid = tuple(channel_map.shape)
    size = tuple(sample.tensor.shape[1:])
    position = tuple(int(i) for i in np.unravel_index(peak, grid))
    spans = field_.span(position, grid, size)
    frame = None
    if len(grid) == 3:  # a clip: the frame at the middle of what the unit sees in time
        frame = (spans[0][0] + spans[0][1] - 1) // 2
        plane = channel_map[position[0]]
    else:
        plane = channel_map
    (y0, y1), (x0, x1) = spans[-2], spans[-1]
    image = frame_pixels(sample, frame, plan.model.preprocessing)
    heat = torch.nn.functional.interpolate(plane[None, None], size=size[-2:], mode="bilinear", align_corners=False)[0, 0]
    rows = _cells(y0, y1, size[-2], grid[-2])
    columns = _cells(x0, x1, size[-1], grid[-1])
    return Example(
        position=position,
        box=(x0, y0, x1, y1),
        frame=frame,
        pixels=image[y0:y1, x0:x1],
        heat=heat[y0:y1, x0:x1].numpy(),
        cells=plane[rows, columns].numpy().astype(np.float32),
        cell=_footprint(position[-2:], grid[-2:], size[-2:], (x0, y0)),
        peak_value=float(channel_map[position]),
    )


def _footprint(position, grid, size, origin) -> tuple[int, int, int, int]:
    """The input pixels of grid cell ``position``, relative to the crop's ``origin``."""
    (row, column), (rows, columns), (height, width) = position, grid, size
    y0, y1 = int(row * height / rows), int(np.ceil((row + 1) * height / rows))
    x0, x1 = int(column * width / columns), int(np.ceil((column + 1) * width / columns))
    return x0 - origin[0], y0 - origin[1], x1 - origin[0], y1 - origin[1]


def _cells(start: int, stop: int, side: int, cells: int) -> slice:
    """The grid cells whose centres lie in input span ``[start, stop)`` (at least one)."""
    stride = side / cells
    first = int(np.clip(np.ceil(start / stride - 0.5), 0, cells - 1))
    last = int(np.clip(np.ceil(stop / stride - 0.5), first + 1, cells))
    return slice(first, last)


def frame_pixels(sample, frame: int | None, preprocessing) -> np.ndarray:
    """The sample's input as (H, W, 3) uint8 pixels (a clip's ``frame``): what a crop is cut from."""
    tensor = sample.tensor
    if frame is None and sample.shown is not None and sample.shown.shape[:2] == tuple(tensor.shape[-2:]):
        return sample.shown
    pixels = tensor[:, frame] if frame is not None else tensor
    channels = pixels.shape[0]
    mean = np.asarray(preprocessing.mean[:channels], dtype=np.float32)[:, None, None]
    std = np.asarray(preprocessing.std[:channels], dtype=np.float32)[:, None, None]
    values = np.clip(np.nan_to_num(pixels.float().numpy() * std + mean), 0, 1)
    image = (values * 255).round().astype(np.uint8).transpose(1, 2, 0)
    return np.repeat(image, 3, axis=2) if channels == 1 else np.ascontiguousarray(image[..., :3])
