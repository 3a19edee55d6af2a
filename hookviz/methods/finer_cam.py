"""Finer-CAM ("Spotting the Difference Reveals Finer Details for Visual Explanation",
arXiv 2501.11309): Grad-CAM of a contrast score, the target's logit set against the classes
whose logits are nearest it, so the map shows what tells the target from its look-alikes:

    S = sum_k p_k (y_t - alpha y_k) / sum_k p_k;   weights_c = mean over positions of dS/dA_c;
    map = ReLU(sum_c weights_c A_c)

over the ``--finer-classes`` classes k whose logits y_k are nearest y_t (the target left out),
p_k their softmax probabilities, the gradient flowing through them too: pytorch-grad-cam's
``FinerCAM`` with its ``FinerWeightedTarget`` (alpha 1, 3 classes: its defaults, and hookviz's).
``--finer-weighting mean`` gives torch-cam's ``FinerCAM`` objective instead, y_t - alpha mean_k y_k
(torch-cam's ``gamma`` is alpha; its default is 0.6, give ``--finer-alpha 0.6`` for its map).
The task says what the contrast score is (``Task.contrast``, ``hookviz.tasks.base.Contrast``), and
the pass back-propagates it through its own graph (``ctx.contrast_gradient``), one more backward
pass; a task without comparison classes (an embedding, a detector) is refused before any image.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.time_weights import weighted
from hookviz.options.declared import check_values, option
from hookviz.tasks.base import CONTRAST_WEIGHTINGS, Contrast

__all__ = ["FinerOptions", "finer_cam"]


@dataclass(frozen=True)
class FinerOptions:
    """Finer-CAM's settings (``--finer-classes``, ``--finer-alpha``, ``--finer-weighting``;
    ``finer_classes=``, ``finer_alpha=``, ``finer_weighting=``), pytorch-grad-cam's defaults."""

    finer_classes: int = option(
        3, help="Finer-CAM: how many of the classes nearest the target (by logit) it is set against.", low=1, high=1000
    )
    finer_alpha: float = option(1.0, help="Finer-CAM: how strongly the nearest classes' scores are taken off.", low=0.0)
    finer_weighting: str = option(
        "softmax",
        help="Finer-CAM: weight the nearest classes by their softmax probability (softmax, pytorch-grad-cam's) or "
        "equally (mean, torch-cam's).",
        choices=CONTRAST_WEIGHTINGS,
    )

    def __post_init__(self):
        check_values(self)


@register_method("finer-cam", needs_gradients=False, needs_contrast=True, options=FinerOptions)
def finer_cam(ctx: MethodContext):
    """Finer-CAM: Grad-CAM of the target's logit set against the classes nearest it."""
    settings = ctx.settings or FinerOptions()
    assert ctx.contrast_gradient is not None  # needs_contrast: the pass gives it
    grads = ctx.contrast_gradient(Contrast(settings.finer_classes, settings.finer_alpha, settings.finer_weighting))
    if grads is None:
        raise UsageError(
            f"{arg('cam', 'finer-cam')} without comparison classes: the model has a single class, so there is "
            "nothing to set its target against; choose another method"
        )
    return weighted(grads.flatten(2).mean(-1), ctx.activations)
