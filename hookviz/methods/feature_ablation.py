"""Feature ablation over superpixels (captum's ``FeatureAblation`` with a ``feature_mask``): each
superpixel's attribution is the target's score on the photo less its score with that superpixel
replaced by the baseline, at each of the superpixel's pixels in every channel:

    map[c, y, x] = S(photo) - S(photo with superpixel k(y, x) switched off)

One pass for the photo and one per superpixel (``--superpixels``, about 16 by default), through
``ctx.score`` (the task's score: a class logit, a segmentation class's mean logit, a box's score).
Superpixels, baselines and the shared options: ``hookviz.methods.superpixels``.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.superpixels import SuperpixelOptions, background, broadcast, perturbed_scores, photos, segments
from hookviz.workload import work

__all__ = ["feature_ablation"]


@register_method(
    "feature-ablation",
    needs_gradients=False,
    needs_rescoring=True,
    needs_input=True,
    resolution="input",
    options=SuperpixelOptions,
)
def feature_ablation(ctx: MethodContext):
    """Feature ablation: each superpixel's score drop when it alone is replaced by the baseline."""
    import torch

    inputs, settings = photos(ctx, "feature-ablation")
    assert ctx.score is not None
    cut = [segments(inputs[n : n + 1], settings, "feature-ablation") for n in range(len(inputs))]
    counts = [int(labels.max()) + 1 for labels in cut]
    maps = []
    with work("feature-ablation", len(inputs) + sum(counts), "ablated passes", len(inputs), fed=True):
        original = ctx.score(inputs).float().cpu()
        for n, labels in enumerate(cut):
            image = inputs[n : n + 1]
            kept = 1 - torch.eye(counts[n], dtype=torch.long)  # row k: every superpixel but k
            ablated = perturbed_scores(ctx, n, image, background(image, settings), labels, kept)
            maps.append(broadcast(original[n] - ablated, labels, inputs.shape[1]))
    return torch.stack(maps)
