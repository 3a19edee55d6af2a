"""How a channel is scored for one sample, registered by name (``--rank max|mean``).

A ranking turns a batch of one layer's maps, ``(B, C, *grid)``, into a ``ChannelScores``: per
sample and channel the score that ranks the sample among the channel's top examples, and the
grid position the example is shown at (its crop). A new way to rank is one new entry, as the
channel's relevance for a class (``relevance``, ``--relevance``) is: ``@register_ranking`` on a
class with ``name``, ``words``, ``needs_gradient`` (its ``score`` reads the relevance maps of
``ScoreContext.relevance``) and ``score(maps, context)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hookviz.registry import Registry

__all__ = ["ChannelScores", "ScoreContext", "Ranking", "RANKINGS", "register_ranking", "peak_positions"]


@dataclass(frozen=True)
class ChannelScores:
    """Per sample (rows) and channel (columns): ``scores`` (float64) and ``peaks``, the flat
    index into the layer's grid of the position each example is shown at."""

    scores: np.ndarray = field(repr=False)
    peaks: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class ScoreContext:
    """What a ranking may read beside the maps: the model's ``output`` for the batch, the
    layer's name, each map's largest value and its flat position, ``(B, C)`` tensors the
    statistics computed already, and ``relevance``: the layer's relevance maps for the class
    asked, ``(B, C, *grid)`` (``hookviz.atlas.relevance``), when a ranking needs them."""

    output: Any = None
    layer: str = ""
    maxima: Any = None
    peaks: Any = None
    relevance: Any = None


class Ranking(Protocol):
    name: str
    words: str
    needs_gradient: bool

    def score(self, maps, context: ScoreContext) -> ChannelScores:
        """``maps``: one layer's output, ``(B, C, *grid)``."""


#: The ways to rank a channel's examples, by name.
RANKINGS: Registry[Ranking] = Registry("rank", "ranking")


def register_ranking(ranking_class):
    """Class decorator: adds an instance of ``ranking_class`` to ``RANKINGS`` under its ``name``.

    Raises:
        UsageError: another ranking has that name, or it could not be typed as one word.
    """
    RANKINGS.add(ranking_class.name, ranking_class())
    return ranking_class


def peak_positions(flat):
    """Per sample and channel, the flat grid index of the map's largest value (the first, on ties)."""
    return flat.argmax(dim=2)


@register_ranking
class _SpatialMax:
    """The map's largest value: where in the sample the channel fires most."""

    name, words, needs_gradient = "max", "the spatial maximum of the channel's map", False

    @staticmethod
    def score(maps, context: ScoreContext) -> ChannelScores:
        if context.maxima is not None:
            values, peaks = context.maxima, context.peaks
        else:
            values, peaks = maps.detach().flatten(2).float().max(dim=2)
        return ChannelScores(values.double().cpu().numpy(), peaks.cpu().numpy().astype(np.int64))


@register_ranking
class _SpatialMean:
    """The map's mean: how much of the sample makes the channel fire; shown at its peak."""

    name, words, needs_gradient = "mean", "the spatial mean of the channel's map", False

    @staticmethod
    def score(maps, context: ScoreContext) -> ChannelScores:
        flat = maps.detach().flatten(2).float()
        peaks = context.peaks if context.peaks is not None else peak_positions(flat)
        return ChannelScores(flat.mean(dim=2).double().cpu().numpy(), peaks.cpu().numpy().astype(np.int64))


@register_ranking
class _Relevance:
    """The channel's contribution to a class's score (``--relevance``): its relevance map summed
    over positions (zennit-crp's "RelMax", summed), shown at its most relevant unit."""

    name, words, needs_gradient = "relevance", "the channel's contribution to the class's score", True

    @staticmethod
    def score(maps, context: ScoreContext) -> ChannelScores:
        flat = context.relevance.detach().flatten(2).double()
        return ChannelScores(flat.sum(dim=2).cpu().numpy(), flat.argmax(dim=2).cpu().numpy().astype(np.int64))
