"""What the relevance-propagation methods (``lrp``, ``attnlrp``) share: their extras, the
check of a model's layers against the rules they have, and conservation.

Layer-wise relevance propagation hands the target's score back through the model, layer by
layer, so that (ideally) each layer's relevance sums to it: conservation. A map's
conservation is reported as three figures in its report (``pixel_maps.<method>.figures``):
``relevance``, the input relevance's sum; ``score``, the target's score the backward pass
started from (a classifier's logit); ``conservation``, their ratio (1 where every rule
conserves; biases, epsilon and the first layer's rule take a share, see docs/methods.md).
"""

from __future__ import annotations

import importlib
import math

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MapFigures

__all__ = ["require", "figures", "uncovered", "with_figures", "conservation_note", "CONSERVED"]

#: A map whose relevance sums to more than this many times its score gets a note, as does one
#: whose sum has the other sign: rules only lose relevance (to biases, epsilon, the first layer;
#: 0.8 to 1 kept on plain CNNs and ViTs, docs/methods.md), so more is made where none applies.
CONSERVED = 1.5


def require(package: str, method: str, extra: str):
    """The module ``package``, imported; UsageError naming ``method`` and the extra to install when it is missing."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise UsageError(
            f"{arg('cam', method)} needs the {extra} extra ({exc.name or package} is not installed): "
            f"pip install 'hookviz[{extra}]'"
        ) from None


def uncovered(model, covered) -> tuple[str, str] | None:
    """The first module of ``model`` that ``covered(module)`` refuses, among those without
    children and the ``nn.MultiheadAttention`` ones (whose projections are children, but
    whose attention is its own), as (its name, its type's name); ``None``: all are covered."""
    import torch

    for name, module in model.named_modules():
        leaf = next(module.children(), None) is None or isinstance(module, torch.nn.MultiheadAttention)
        if leaf and not covered(module):
            return name or "(the model itself)", type(module).__name__
    return None


def figures(relevance, scores) -> tuple[dict[str, float], ...]:
    """Per image: its input relevance's sum, the score its backward pass started from, and their ratio (NaN for a score of 0)."""
    sums = relevance.flatten(1).double().sum(dim=1).tolist()
    found = []
    for total, score in zip(sums, scores.double().tolist()):
        ratio = total / score if score != 0 else math.nan
        found.append({"relevance": float(total), "score": float(score), "conservation": float(ratio)})
    return tuple(found)


def with_figures(relevance, scores) -> MapFigures:
    """The maps ``relevance`` (N, C, H, W) with each image's conservation figures."""
    return MapFigures(relevance, figures(relevance, scores))


def conservation_note(found: dict) -> str | None:
    """What a reader of a map whose ``figures`` (``figures()``'s) hold more relevance than the
    score (over ``CONSERVED`` times it), or relevance of the other sign, must know; else ``None``."""
    ratio = found.get("conservation")
    if ratio is None or not math.isfinite(ratio) or 0 <= ratio <= CONSERVED:
        return None
    how = f"{ratio:.3g} times" if ratio > 0 else "of the other sign than"
    return (
        f"its relevance sums to {found['relevance']:.4g}, {how} the score it started from ({found['score']:.4g}): "
        "rules that do not conserve it are at work (a residual sum outside torchvision's ResNet blocks, a BatchNorm "
        "that cannot merge into the convolution before it); the map still ranks the pixels, but its values are no "
        "shares of the score"
    )
