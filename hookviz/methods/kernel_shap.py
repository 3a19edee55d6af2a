"""Kernel SHAP over superpixels (Lundberg and Lee 2017), as captum's ``KernelShap``: a weighted
least-squares fit (scikit-learn's ``LinearRegression``) of the target's score on perturbed photos,
drawn so that the Shapley kernel is their sampling distribution rather than their weight:

    the first sample keeps every superpixel, the second none (each weighted 10^6, standing for
    the infinite weight that pins the fit to both ends); each later one keeps k of the K
    superpixels, k drawn with p(k) proportional to (K - 1) / (k (K - k)), which k uniformly
    (the k largest of K normal draws), weighted 1
    map[c, y, x] = the fit's coefficient of superpixel k(y, x)

``--superpixel-samples`` perturbed photos (25, captum's default) each cost a pass through
``ctx.score``; the draws come from a ``torch.Generator`` seeded by ``--superpixel-seed`` for each
photo, in captum's order (``torch.multinomial`` as ``Categorical.sample`` calls it, then
``torch.randn``), so captum under the same seed draws the same. scikit-image (SLIC) and
scikit-learn come with the ``superpixels`` extra.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.superpixels import SuperpixelOptions, surrogate

__all__ = ["kernel_shap", "draw_shapley", "INFINITE_WEIGHT"]

#: The weight of the all-kept and none-kept samples (captum's ``KernelShap.inf_weight``).
INFINITE_WEIGHT = 1000000.0


def draw_shapley(generator, features: int, samples: int):
    """(samples, features) 0/1 rows as captum's ``kernel_shap_perturb_generator`` draws them."""
    import torch

    counts = torch.arange(features, dtype=torch.float)
    probs = torch.tensor(features - 1) / (counts * (features - counts))
    probs[0] = 0.0
    probs = (probs / probs.sum(-1, keepdim=True))[None]  # as Categorical normalises them
    rows = [torch.ones(1, features, dtype=torch.long), torch.zeros(1, features, dtype=torch.long)]
    while len(rows) < samples:
        chosen = int(torch.multinomial(probs, 1, True, generator=generator))
        values = torch.randn(1, features, generator=generator)
        threshold = torch.kthvalue(values, features - chosen).values.item()
        rows.append((values > threshold).long())
    return torch.cat(rows[:samples])


def shapley_weights(image, rows, kept):
    """captum's ``kernel_shap_similarity_kernel``: 10^6 for a sample that keeps every superpixel or none, else 1."""
    import torch

    count = kept.sum(dim=1)
    ends = (count == 0) | (count == kept.shape[1])
    return torch.where(ends, torch.tensor(INFINITE_WEIGHT), torch.tensor(1.0))


@register_method(
    "kernel-shap",
    needs_gradients=False,
    needs_rescoring=True,
    needs_input=True,
    resolution="input",
    options=SuperpixelOptions,
)
def kernel_shap(ctx: MethodContext):
    """Kernel SHAP: a least-squares fit of superpixels kept as the Shapley kernel draws them."""
    return surrogate(ctx, "kernel-shap", draw_shapley, shapley_weights, lambda linear: linear.LinearRegression())
