"""ROAD (Rong et al. 2022, "A Consistent and Efficient Evaluation Strategy for Attribution
Methods"), as pytorch-grad-cam's ``ROADMostRelevantFirst``, ``ROADLeastRelevantFirst`` and
``ROADCombined`` compute it.

At each percentile ``p`` of the map (at the input's size; numpy's linear percentile):
*most relevant first* (MoRF) imputes the pixels whose value is at least the ``p``-th
percentile (the top ``100 - p`` %) and *least relevant first* (LeRF) the pixels at or below
the ``(100 - p)``-th (the bottom ``100 - p`` %, keeping the top ``p`` %). Imputation is
Rong et al.'s noisy linear imputation: each removed pixel becomes the weighted mean of its 8
neighbours (1/6 for the sides, 1/12 for the corners), one sparse linear system per channel
solved exactly (a clip's by conjugate gradients, to 1e-7 of its residual: its direct solve
grows far faster than its voxels), plus Gaussian noise of standard deviation ``noise`` (0.01). A signal's
samples (1-D) and a clip's voxels (3-D) are imputed alike from their 2 and 26 neighbours,
weighted as Rong et al.'s are: halved for each axis a neighbour is off along, then scaled to
sum to 1 (1/2 each in 1-D; 1/14, 1/28 and 1/56 for a voxel's faces, edges and corners).
Each point is
the change of the target's score, imputed minus original. A faithful map makes MoRF drop
fast (negative) and LeRF stay put; ``combined = (mean LeRF - mean MoRF) / 2`` is higher
for a better map.

The noise comes from a generator of its own, seeded with ``seed`` for each image and drawn
in pytorch-grad-cam's order (LeRF's percentiles, then MoRF's), so the numbers depend on
neither the batch nor the process's random state. The solve needs scipy.

Example::

    results = road(score, inputs, maps)   # one Road per image
    results[0].combined
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hookviz.trust.maps import Score, at_input_size, chunks

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["ROAD_PERCENTILES", "Road", "noisy_linear_imputation", "road"]

#: ``ROADCombined``'s percentiles.
ROAD_PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)

# Rong et al.'s weights of a pixel's 8 neighbours, (row offset, column offset): weight.
_PIXEL_NEIGHBOURS = (
    ((1, 1), 1 / 12),
    ((0, 1), 1 / 6),
    ((-1, 1), 1 / 12),
    ((1, -1), 1 / 12),
    ((0, -1), 1 / 6),
    ((-1, -1), 1 / 12),
    ((1, 0), 1 / 6),
    ((-1, 0), 1 / 6),
)


def _neighbours(rank: int) -> tuple:
    """Each neighbour's offset and weight in a map of ``rank`` spatial dimensions: Rong et
    al.'s in 2-D (in pytorch-grad-cam's order); in 1-D and 3-D, weights halved per axis the
    neighbour is off along, scaled to sum to 1 (as the 2-D weights are: 1/6 = 1/2 / 3, 1/12 = 1/4 / 3)."""
    import itertools

    if rank == 2:
        return _PIXEL_NEIGHBOURS
    offsets = [o for o in itertools.product((-1, 0, 1), repeat=rank) if any(o)]
    raw = [0.5 ** sum(map(abs, o)) for o in offsets]
    return tuple((o, w / sum(raw)) for o, w in zip(offsets, raw))


@dataclass(frozen=True)
class Road:
    """ROAD's curves for one image's map.

    Attributes:
        percentiles: the percentiles of the map the curves are measured at.
        score: the target's score on the original input.
        most_relevant_first: the score's change with the top ``100 - p`` % imputed, per percentile.
        least_relevant_first: the score's change with the bottom ``100 - p`` % imputed.
        forward_passes: model inputs scored for this image.
    """

    percentiles: tuple[int, ...]
    score: float
    most_relevant_first: tuple[float, ...]
    least_relevant_first: tuple[float, ...]
    forward_passes: int

    @property
    def most_relevant_first_mean(self) -> float:
        """``ROADMostRelevantFirstAverage``: lower is better."""
        return sum(self.most_relevant_first) / len(self.most_relevant_first)

    @property
    def least_relevant_first_mean(self) -> float:
        """``ROADLeastRelevantFirstAverage``: higher (closer to 0) is better."""
        return sum(self.least_relevant_first) / len(self.least_relevant_first)

    @property
    def combined(self) -> float:
        """``ROADCombined``: (LeRF mean - MoRF mean) / 2, higher is better."""
        return (self.least_relevant_first_mean - self.most_relevant_first_mean) / 2

    def to_json(self) -> dict:
        return {
            "combined": self.combined,
            "most_relevant_first_mean": self.most_relevant_first_mean,
            "least_relevant_first_mean": self.least_relevant_first_mean,
            "score": self.score,
            "percentiles": list(self.percentiles),
            "most_relevant_first": list(self.most_relevant_first),
            "least_relevant_first": list(self.least_relevant_first),
            "forward_passes": self.forward_passes,
        }


def road(
    score: Score,
    inputs: torch.Tensor,
    maps: torch.Tensor,
    *,
    percentiles: tuple[int, ...] = ROAD_PERCENTILES,
    noise: float = 0.01,
    seed: int = 0,
    batch_size: int = 64,
) -> tuple[Road, ...]:
    """ROAD's MoRF and LeRF curves of each image's map.

    Args:
        score: ``score(batch, images)``, the target's score of each row (a classifier's
            softmax probability, as pytorch-grad-cam's ``ClassifierOutputSoftmaxTarget``).
        inputs: the model's input batch (N, C, H, W); a signal's (N, C, L) or a clip's
            (N, C, T, H, W) alike.
        maps: one finite map per image (N, h, w), at any resolution (resized bilinearly;
            a signal's linearly, a clip's trilinearly).
        percentiles: where to measure (``ROADCombined``'s 10 to 90).
        noise: the imputation noise's standard deviation.
        seed: the noise generator's seed, the same for every image.
        batch_size: at most this many imputed inputs go to ``score`` at once.

    Returns:
        one ``Road`` per image, in order.
    """
    import torch

    maps = at_input_size(maps, tuple(inputs.shape[2:])).cpu()
    results = []
    for image in range(inputs.shape[0]):
        pixels = inputs[image].detach().cpu().float()
        generator = torch.Generator().manual_seed(seed)
        # pytorch-grad-cam's order of noise draws: ROADCombined runs LeRF before MoRF.
        lerf = [_imputed(pixels, 1 - maps[image], p, noise, generator) for p in percentiles]
        morf = [_imputed(pixels, maps[image], p, noise, generator) for p in percentiles]
        batch = torch.stack([pixels, *lerf, *morf]).to(device=inputs.device, dtype=inputs.dtype)
        scores = _scored(score, batch, image, batch_size)
        changes = [value - scores[0] for value in scores[1:]]
        results.append(Road(tuple(percentiles), scores[0], tuple(changes[len(lerf) :]), tuple(changes[: len(lerf)]), len(batch)))
    return tuple(results)


def _imputed(pixels: torch.Tensor, relevance: torch.Tensor, percentile: int, noise: float, generator) -> torch.Tensor:
    """``pixels`` with every pixel whose ``relevance`` reaches its ``percentile`` imputed."""
    import numpy as np

    threshold = np.percentile(relevance.numpy(), percentile)
    keep = relevance < threshold  # as pytorch-grad-cam compares: a float32 map against numpy's value
    return noisy_linear_imputation(pixels, keep, noise, generator)


def _scored(score: Score, batch: torch.Tensor, image: int, batch_size: int) -> list[float]:
    import torch

    values: list[float] = []
    with torch.inference_mode():
        for part in chunks(len(batch), batch_size):
            rows = torch.full((len(part),), image, dtype=torch.long, device=batch.device)
            values += score(batch[part.start : part.stop], rows).float().cpu().tolist()
    return values


def noisy_linear_imputation(pixels: torch.Tensor, keep: torch.Tensor, noise: float, generator) -> torch.Tensor:
    """Rong et al.'s noisy linear imputation of the pixels of ``pixels`` (C, *spatial) where
    ``keep`` (*spatial) is false: the exact solution of "each missing pixel is the weighted mean
    of its neighbours", plus ``noise`` times standard normal noise from ``generator``."""
    import numpy as np
    import torch

    flat = pixels.reshape(pixels.shape[0], -1)
    keep_flat = keep.reshape(-1).numpy()
    missing = np.flatnonzero(~keep_flat)
    if len(missing) == 0:
        return pixels.clone()
    if keep_flat.any():
        system, right = _linear_system(flat.numpy(), keep_flat, missing, tuple(keep.shape))
        solved = torch.tensor(_solved(system, right, keep.dim()), dtype=torch.float)
    else:  # a map tied at its percentile (a CAM half zeros) leaves nothing to impute from: every
        # constant solves the singular system, and 0 (the normalised data's mean) is the one taken
        solved = torch.zeros((len(missing), flat.shape[0]))
    jitter = torch.randn((solved.shape[1], solved.shape[0]), generator=generator)  # pytorch-grad-cam's draws, (C, n)
    result = flat.clone()
    result[:, torch.from_numpy(missing)] = solved.t() + noise * jitter
    return result.reshape_as(pixels)


def _solved(system, right: np.ndarray, rank: int) -> np.ndarray:
    """The missing pixels' values (n, C): the system solved exactly (scipy's ``spsolve``) for a
    photo's or a signal's, as pytorch-grad-cam solves it; for a clip's, by conjugate gradients
    (``CG_TOLERANCE``), since a direct solve of a 3-D grid fills in far beyond its size (16 x 112 x
    112 with 90 % missing: over 500 s, against about 1 s). The system is a graph Laplacian with
    the kept voxels as its boundary: symmetric and, negated, positive definite, where CG converges."""
    import numpy as np
    from scipy.sparse.linalg import spsolve  # type: ignore[import-untyped]

    if rank < 3:
        return np.asarray(spsolve(system, right)).reshape(len(right), -1)
    return _conjugate_gradients(system, right)


#: The relative residual at which a clip's imputation stops (``_conjugate_gradients``): within
#: 1e-5 of the exact solve on clips of unit-variance pixels (tests/test_ranks.py).
CG_TOLERANCE = 1e-7


def _conjugate_gradients(system, right: np.ndarray) -> np.ndarray:
    """``system`` solved for each column of ``right`` by Jacobi-preconditioned conjugate
    gradients; the exact solve where CG does not converge within its iterations (never seen)."""
    import numpy as np
    from scipy.sparse import diags  # type: ignore[import-untyped]
    from scipy.sparse.linalg import cg, spsolve  # type: ignore[import-untyped]

    positive = (-system).tocsr()
    jacobi = diags(1 / positive.diagonal())
    columns = []
    for column in (-right).T:
        solution, info = cg(positive, column, rtol=CG_TOLERANCE, atol=0.0, M=jacobi, maxiter=10 * positive.shape[0])
        if info != 0:
            solution = spsolve(system.tocsc(), -column)
        columns.append(np.asarray(solution))
    return np.stack(columns, axis=1)


def _linear_system(flat: np.ndarray, keep: np.ndarray, missing: np.ndarray, shape: tuple[int, ...]):
    """The sparse system (n, n) and right-hand sides (n, C) of the missing pixels, built at
    once (pytorch-grad-cam's ``setup_sparse_system``, without its ``lil_matrix`` loop), in a
    map of ``shape``'s one to three spatial dimensions."""
    import numpy as np
    from scipy.sparse import coo_matrix  # type: ignore[import-untyped]

    strides = np.array([int(np.prod(shape[axis + 1 :])) for axis in range(len(shape))])
    variable = np.zeros(len(keep), dtype=np.int64)
    variable[missing] = np.arange(len(missing))
    right = np.zeros((len(missing), flat.shape[0]))
    weights = np.ones(len(missing))
    rows, columns, entries = [], [], []
    where = np.stack(np.unravel_index(missing, shape))  # (rank, n): each missing pixel's coordinates
    for offset, weight in _neighbours(len(shape)):
        moved = where + np.array(offset)[:, None]
        inside = np.all((moved >= 0) & (moved < np.array(shape)[:, None]), axis=0)
        ids = np.flatnonzero(inside)
        neighbour = missing[ids] + int(np.dot(offset, strides))
        known = keep[neighbour]
        right[ids[known], :] -= weight * flat[:, neighbour[known]].T
        rows.append(ids[~known])
        columns.append(variable[neighbour[~known]])
        entries.append(np.full(int((~known).sum()), weight))
        weights[~inside] -= weight
    diagonal = np.arange(len(missing))
    rows, columns, entries = [*rows, diagonal], [*columns, diagonal], [*entries, -weights]
    size = len(missing)
    system = coo_matrix((np.concatenate(entries), (np.concatenate(rows), np.concatenate(columns))), shape=(size, size))
    return system.tocsc(), right
