"""Each channel's contribution to a class's score: what a channel *did* for a prediction, not
only how strongly it fired.

Two ways (``RELEVANCE_RULES``):

- ``gradient-x-activation``: the layer's output ``A`` times the score's gradient there,
  ``A * dy/dA``, summed over positions. For a layer followed only by global average pooling
  and a linear head, this is exactly the channel's term of the logit
  (``w_c * mean(A_c)``).
- ``lrp``: layer-wise relevance propagation through zennit's composite (as ``--cam lrp``
  builds it: ``hookviz.methods.lrp``), started at the class's score: the relevance reaching
  the layer's output, summed over positions. This is Concept Relevance Propagation's
  reference-sampling target, zennit-crp's "RelMax" (``ChannelConcept.reference_sampling``
  with ``max_target="sum"``, unnormalised), and the position of a channel's most relevant
  unit is CRP's receptive-field neuron.

A channel that fires often but never matters and one that matters rarely tell different
stories: the atlas ranks each channel's examples both ways (``relevance_top``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hookviz.errors import UsageError, arg
from hookviz.options.pictures import RELEVANCE_RULES

__all__ = ["RELEVANCE_RULES", "ChannelRelevance", "channel_relevance", "predicted_or_named", "lrp_objective"]


@dataclass(frozen=True)
class ChannelRelevance:
    """Each channel's contribution to each image's class score.

    Attributes:
        contributions: (N, C): the channel's relevance summed over its positions.
        peaks: (N, C): the flat index, in the layer's grid, of the channel's most relevant unit.
        scores: (N,): the class's score each image's pass started from (its logit).
        classes: (N,): the class explained for each image.
        grid: the layer's grid, (H, W) (or (T, H, W)).
        maps: (N, C, *grid): the relevance maps, when kept.
        outputs: (N, C, *grid): the layer's output (the channels' activations), when the maps are kept.
    """

    contributions: np.ndarray
    peaks: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    grid: tuple[int, ...]
    maps: np.ndarray | None = None
    outputs: np.ndarray | None = None

    def __repr__(self) -> str:
        n, c = self.contributions.shape
        return f"ChannelRelevance({n} images x {c} channels, grid {self.grid})"


def predicted_or_named(logits, asked: str | int, categories: Sequence[str] = ()) -> list[int]:
    """The class to explain for each row of ``logits``: its top class for ``predicted``, else the
    class ``asked`` names (a category's name or an index).

    Raises:
        UsageError: a name the categories lack, or an index out of range.
    """
    count = int(logits.shape[-1])
    if asked == "predicted":
        return [int(i) for i in logits.argmax(dim=-1).tolist()]
    if isinstance(asked, str) and asked in categories:
        return [list(categories).index(asked)] * len(logits)
    try:
        index = int(asked)
    except (TypeError, ValueError):
        raise UsageError(
            f"{arg('relevance', asked)}: the model has no such class; give predicted, a class name or an index"
        ) from None
    if not 0 <= index < count:
        raise UsageError(f"{arg('relevance', asked)}: the model has {count} classes; give an index from 0 to {count - 1}")
    return [index] * len(logits)


def channel_relevance(
    model,
    layer: str,
    inputs,
    classes: str | int | Sequence[int] = "predicted",
    *,
    rule: str = "gradient-x-activation",
    categories: Sequence[str] = (),
    keep_maps: bool = False,
    lrp=None,
) -> ChannelRelevance:
    """Each channel's contribution to the class score of each image of ``inputs``.

    Args:
        model: a classifier (``torch.nn.Module``) whose output is (N, classes) logits; it is
            left as it was (mode, parameter flags).
        layer: the layer's path (``layer3.-1``); its output must be channels-first, (N, C, ...).
        inputs: (N, C, H, W) preprocessed images.
        classes: ``predicted``, a class (name or index) for every image, or one index per image.
        rule: one of ``RELEVANCE_RULES``.
        lrp: the ``LrpSettings`` of ``rule='lrp'`` (zennit's composite); default ``epsilon-plus-flat``.

    Returns:
        A ``ChannelRelevance``.

    Raises:
        UsageError: an unknown rule, a class the model lacks, a layer whose output is no map,
            or a model zennit's rules do not cover (``lrp``).
    """
    if rule not in RELEVANCE_RULES:
        raise UsageError(f"{arg('relevance_rule', rule)}: choose {' or '.join(RELEVANCE_RULES)}")
    from hookviz.modelstate import evaluation, frozen_parameters

    if rule == "lrp":
        from hookviz.methods.lrp import LrpSettings, check_lrp, composite_context

        check_lrp(model)
        within = composite_context(lrp or LrpSettings())
    else:
        within = None
    with evaluation(model), frozen_parameters(model):
        return _relevance(model, layer, inputs, classes, rule, categories, keep_maps, within)


def _relevance(model, layer, inputs, classes, rule, categories, keep_maps, within) -> ChannelRelevance:
    import contextlib

    import torch

    from hookviz.explaining.recording import record

    context = within(model) if within is not None else contextlib.nullcontext()
    with torch.enable_grad(), context, record(model, [layer]) as recording:
        logits = model(inputs.detach())
        chosen = classes if not isinstance(classes, (str, int)) else predicted_or_named(logits, classes, categories)
        picked = torch.as_tensor(list(chosen), dtype=torch.long, device=logits.device)
        scores = logits.gather(1, picked[:, None])[:, 0]
        capture = recording.captures[-1]
        (_, grad), *_ = recording.gradients(scores.sum() if within is None else lrp_objective(logits, picked), inputs=False)
    output: Any = capture.output
    if output is None or output.dim() < 3:
        raise UsageError(
            f"{arg('layers', layer)}: its output is no map of channels (shape {tuple(output.shape) if output is not None else None})"
        )
    if grad is None:
        grad = torch.zeros_like(output)
    maps = (output * grad if within is None else grad).detach().double()
    flat = maps.flatten(2)
    return ChannelRelevance(
        contributions=flat.sum(-1).cpu().numpy(),
        peaks=flat.argmax(-1).cpu().numpy(),
        scores=scores.detach().double().cpu().numpy(),
        classes=picked.cpu().numpy(),
        grid=tuple(int(s) for s in output.shape[2:]),
        maps=maps.cpu().numpy() if keep_maps else None,
        outputs=output.detach().double().cpu().numpy() if keep_maps else None,
    )


def lrp_objective(logits, picked):
    """The objective whose gradient seeds LRP with the class's score (zennit-crp's initial
    relevance: the logit at the class, zero elsewhere): ``sum(logits * mask)`` where the mask
    holds the detached logit, so d/d(logits) is that relevance."""
    mask = logits.detach().new_zeros(logits.shape)
    rows = range(len(picked))
    mask[list(rows), picked.tolist()] = logits.detach()[list(rows), picked.tolist()]
    return (logits * mask).sum()
