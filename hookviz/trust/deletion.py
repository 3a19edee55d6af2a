"""Deletion and insertion (Petsiuk et al. 2018, "RISE"), as torch-cam's
``DeletionInsertionMetric`` defines them.

The input's positions are ranked by the map at the input's size, highest first (a stable
sort, so tied positions keep their row-major order). Deletion replaces the ``k`` best-ranked
positions (all channels) by a baseline (zeros) and scores the result; insertion starts from
the baseline and puts the ``k`` best-ranked positions back. ``k`` runs over
``0, s, 2s, ..., P`` with ``s = ceil(P / steps)``; each curve's area is the trapezoid rule over
the fraction ``k / P``. A map that points at what the model uses makes deletion fall fast
(small area: better) and insertion rise fast (large area: better).

A probability that stays above ``SATURATED`` until every position is deleted (a softmax fed
huge logits) is saturated: its deletion curve carries no information about the map
(``DeletionInsertion.saturated``). Two areas within ``TIE`` of each other tie: the same
curves, up to float rounding; ``distinct_digits`` says how many decimals tell the others apart.

Example::

    results = deletion_insertion(score, inputs, maps)   # one DeletionInsertion per image
    results[0].deletion_auc, results[0].insertion_auc
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hookviz.trust.maps import Score, at_input_size, chunks

if TYPE_CHECKING:
    import torch

__all__ = ["SATURATED", "STEPS", "TIE", "DeletionInsertion", "deletion_insertion", "distinct_digits"]

#: torch-cam's default number of perturbation intervals.
STEPS = 20

#: A deletion curve at or above this until its last point (every position deleted) is saturated.
SATURATED = 0.999

#: Areas (or scores) closer than this tie.
TIE = 1e-6


@dataclass(frozen=True)
class DeletionInsertion:
    """The deletion and insertion curves of one image's map.

    Attributes:
        fractions: the fraction of positions deleted (inserted) at each point, 0 to 1.
        deletion: the target's score with the best-ranked ``fractions`` replaced by the baseline.
        insertion: the target's score with only the best-ranked ``fractions`` kept.
        deletion_auc: area under ``deletion`` (lower: the map finds what the score needs).
        insertion_auc: area under ``insertion`` (higher: the map finds what suffices).
        forward_passes: model inputs scored for this image.
    """

    fractions: tuple[float, ...]
    deletion: tuple[float, ...]
    insertion: tuple[float, ...]
    deletion_auc: float
    insertion_auc: float
    forward_passes: int

    @property
    def saturated(self) -> bool:
        """Whether the score stays at or above ``SATURATED`` until every position is deleted:
        the map's ranking moved nothing, so the deletion curve says nothing of it."""
        return min(self.deletion[:-1], default=self.deletion[0]) >= SATURATED

    def to_json(self) -> dict:
        return {
            "deletion_auc": self.deletion_auc,
            "insertion_auc": self.insertion_auc,
            "saturated": self.saturated,
            "fractions": list(self.fractions),
            "deletion": list(self.deletion),
            "insertion": list(self.insertion),
            "forward_passes": self.forward_passes,
        }


def perturbation_counts(positions: int, steps: int = STEPS) -> list[int]:
    """How many positions each point of the curves perturbs, as torch-cam counts them."""
    step = (positions + steps - 1) // steps
    return [*range(0, positions, step), positions]


def deletion_insertion(
    score: Score,
    inputs: torch.Tensor,
    maps: torch.Tensor,
    *,
    steps: int = STEPS,
    baseline: torch.Tensor | None = None,
    batch_size: int = 64,
) -> tuple[DeletionInsertion, ...]:
    """The deletion and insertion curves of each image's map.

    Args:
        score: ``score(batch, images)``, the target's score (a classifier's softmax
            probability, for torch-cam's numbers) of each row; see ``maps.Score``.
        inputs: the model's input batch (N, C, H, W); a signal's (N, C, L) or a clip's
            (N, C, T, H, W) alike.
        maps: one finite map per image (N, h, w), at any resolution (resized bilinearly;
            a signal's (N, l) linearly, a clip's (N, t, h, w) trilinearly).
        steps: the number of perturbation intervals (torch-cam's 20).
        baseline: what deleted positions become, broadcastable to ``inputs`` (zeros).
        batch_size: at most this many perturbed inputs go to ``score`` at once.

    Returns:
        one ``DeletionInsertion`` per image, in order.
    """
    import torch

    count, positions = inputs.shape[0], math.prod(inputs.shape[2:])
    ranks = _ranks(at_input_size(maps, tuple(inputs.shape[2:])).to(inputs.device))
    counts = perturbation_counts(positions, steps)
    fill = torch.zeros_like(inputs) if baseline is None else torch.broadcast_to(baseline.to(inputs), inputs.shape)
    # Each image needs its original, its baseline (deletion's last point is insertion's first)
    # and both curves' interior points: 2 * len(counts) - 2 inputs.
    jobs = [(image, 0, n) for image in range(count) for n in (0, positions)]
    jobs += [(image, kind, n) for image in range(count) for n in counts[1:-1] for kind in (0, 1)]
    values: dict[tuple[int, int, int], float] = {}
    with torch.inference_mode():
        for part in chunks(len(jobs), batch_size):
            chunk = [jobs[i] for i in part]
            images = torch.tensor([job[0] for job in chunk], device=inputs.device)
            removed = ranks[images] < torch.tensor([job[2] for job in chunk], device=inputs.device)[:, None]
            inserting = torch.tensor([job[1] == 1 for job in chunk], device=inputs.device)[:, None]
            original = torch.where(inserting, removed, ~removed)
            batch = torch.where(original[:, None], inputs.flatten(2)[images], fill.flatten(2)[images])
            scores = score(batch.reshape(len(chunk), *inputs.shape[1:]), images).float().cpu()
            values.update(zip(chunk, scores.tolist()))
    fractions = torch.tensor(counts, dtype=torch.float32) / positions
    return tuple(_curves(values, image, counts, fractions, len(jobs) // count) for image in range(count))


def _ranks(maps: torch.Tensor) -> torch.Tensor:
    """Each position's rank in its map, 0 for the highest; ties keep row-major order."""
    import torch

    order = torch.argsort(maps.flatten(1), dim=1, descending=True, stable=True)
    return torch.argsort(order, dim=1)


def _curves(values: dict, image: int, counts: list[int], fractions, passes: int) -> DeletionInsertion:
    import torch

    last = counts[-1]
    deletion = [values[(image, 0, n)] for n in counts]
    insertion = [values[(image, 0, last)], *[values[(image, 1, n)] for n in counts[1:-1]], values[(image, 0, 0)]]

    def area(curve):
        return float(torch.trapezoid(torch.tensor(curve, dtype=torch.float32), fractions))

    return DeletionInsertion(
        tuple(fractions.tolist()), tuple(deletion), tuple(insertion), area(deletion), area(insertion), passes
    )


def distinct_digits(values, least: int = 3, most: int = 7) -> int:
    """The fewest decimals, from ``least`` to ``most``, at which any two of ``values`` that do
    not tie (they differ by more than ``TIE``) print differently."""
    from itertools import combinations

    apart = [(a, b) for a, b in combinations(values, 2) if abs(a - b) > TIE]
    for digits in range(least, most):
        if all(f"{a:.{digits}f}" != f"{b:.{digits}f}" for a, b in apart):
            return digits
    return most
