"""The atlas's one pass over the dataset: forward passes in batches, each layer's maps reduced
at once to per-channel scores and sums (``LayerState``), nothing of a sample kept after its batch.

The state is saved every ``SAVE_EVERY`` seconds and at the end, atomically, with the count of
samples taken: a run killed between two saves resumes from the last (``--skip-existing``)
and takes the samples after it, none twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hookviz.atlas.plan import PREDICTED, TRUE, AtlasPlan
from hookviz.atlas.ranking import RANKINGS, ScoreContext
from hookviz.atlas.relevance import gradient_relevance, lrp_relevance
from hookviz.atlas.state import AtlasState, LayerState
from hookviz.errors import ImageError, UsageError, arg

__all__ = ["collect", "SAVE_EVERY", "layer_maps"]

#: Seconds between two saves of the state.
SAVE_EVERY = 5.0


def collect(plan: AtlasPlan, state: AtlasState, save: Callable[[AtlasState], None], on_batch=None) -> AtlasState:
    """Take the samples of ``plan.ids`` after the ``state.done`` first into ``state``; ``save``
    it now and then, and when done; ``on_batch(done, total)`` after each batch."""
    import contextlib

    import torch

    from hookviz.modelstate import frozen_parameters

    todo = plan.ids[state.done :]
    batch = plan.request.batch_size
    loader = plan.loader(todo, 2 * batch)
    saved = time.monotonic()
    frozen = frozen_parameters(plan.model.module) if plan.gradient else contextlib.nullcontext()
    try:
        with torch.set_grad_enabled(plan.gradient), frozen:
            for chunk in _chunks(zip(todo, loader), batch):
                _take(plan, state, chunk)
                state.done += len(chunk)
                if on_batch is not None:
                    on_batch(state.done, len(plan.ids))
                if time.monotonic() - saved > SAVE_EVERY:
                    save(state)
                    saved = time.monotonic()
    finally:
        loader.stop()
    state.finished = True
    save(state)
    return state


def _chunks(items, size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _take(plan: AtlasPlan, state: AtlasState, chunk: list) -> None:
    from hookviz.explaining.recording import record

    good = []
    for sample_id, (_path, sample) in chunk:
        if isinstance(sample, ImageError):
            state.failed.append((sample_id, str(sample)))
        else:
            good.append((sample_id, sample))
    if not good:
        return
    ids = np.array([sample_id for sample_id, _ in good], dtype=np.int64)
    with record(plan.model.module, list(plan.specs)) as recording:  # a batch's hooks: LRP's own pass runs after
        output = plan.forward([sample for _, sample in good])
        layers = layer_maps(recording)
        relevance = gradient_relevance(plan, output, recording) if plan.gradient else {}
    if plan.request.relevance is not None and not plan.gradient:
        relevance = lrp_relevance(plan, [sample for _, sample in good])
    if plan.classes == TRUE:
        classes = [plan.dataset.classes[i] for i in ids]
    elif plan.classes == PREDICTED:
        classes = plan.predicted(output)
    else:
        classes = [None] * len(good)
    for name, maps in layers:
        layer = state.layers.get(name)
        if layer is None:
            layer = state.layers[name] = LayerState.empty(
                name, maps.shape[1], tuple(maps.shape[2:]), plan.rankings, plan.request.top
            )
        flat = maps.detach().flatten(2).float()
        largest, peaks = flat.max(dim=2)
        layer.statistics.update(largest.double().cpu().numpy(), flat.mean(dim=2).double().cpu().numpy(), classes)
        context = ScoreContext(output=output, layer=name, maxima=largest, peaks=peaks, relevance=relevance.get(name))
        for ranking in plan.rankings:
            scores = RANKINGS.get(ranking).score(maps, context)
            layer.tops[ranking].update(scores.scores, ids, scores.peaks)


def layer_maps(recording) -> list[tuple[str, Any]]:
    """Each recorded layer's maps, ``(B, C, *grid)``, by its name.

    Raises:
        UsageError: a layer's output is not a map of channels over a grid.
    """
    found = []
    for capture in recording.captures:
        maps = capture.output
        if maps is None or maps.dim() not in (4, 5):
            shape = "nothing" if maps is None else tuple(maps.shape)
            raise UsageError(
                f"{arg('layers', capture.requested)}: {capture.name} gave {shape}, not maps of channels over a grid "
                "(batch, channels, height, width); choose a convolutional layer (hookviz layers lists them)"
            )
        found.append((capture.name, maps))
    return found
