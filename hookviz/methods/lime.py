"""LIME over superpixels (Ribeiro et al. 2016), as captum's ``Lime`` with its defaults: a weighted
Lasso (scikit-learn's, alpha 0.01) fitted to the target's score on perturbed photos, each
superpixel kept or replaced by the baseline with probability 1/2, each sample weighted by an
exponential kernel of its cosine distance to the photo:

    w = exp(-(1 - cos(photo, perturbed))^2 / 2)
    map[c, y, x] = the Lasso's coefficient of superpixel k(y, x)

``--superpixel-samples`` perturbed photos (25, captum's default) each cost a pass through
``ctx.score``; the draws come from a ``torch.Generator`` seeded by ``--superpixel-seed`` for each
photo, in the order captum's ``default_perturb_func`` draws them from torch's global generator
(one ``torch.bernoulli`` of K halves per sample), so captum under the same seed draws the same.
scikit-image (SLIC) and scikit-learn (the Lasso) come with the ``superpixels`` extra.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.superpixels import SuperpixelOptions, surrogate

__all__ = ["lime", "draw_halves", "cosine_kernel"]

#: The Lasso's alpha in captum's ``Lime`` default (``SkLearnLasso(alpha=0.01)``).
ALPHA = 0.01


def draw_halves(generator, features: int, samples: int):
    """(samples, features) 0/1 rows, each superpixel kept with probability 1/2, drawn one row at a time as captum does."""
    import torch

    halves = torch.ones(1, features) * 0.5
    return torch.cat([torch.bernoulli(halves, generator=generator).long() for _ in range(samples)])


def cosine_kernel(image, rows, kept):
    """captum's default similarity (``get_exp_kernel_similarity_function("cosine", 1.0)``):
    exp(-d^2 / 2), d = 1 - the cosine similarity of the photo and each perturbed one, flattened."""
    import torch

    flat = image.flatten().float()[None]
    cosine = torch.nn.functional.cosine_similarity(flat, rows.flatten(1).float(), dim=1, eps=1e-8)
    return torch.exp(-((1 - cosine.double()) ** 2) / 2)


@register_method(
    "lime",
    needs_gradients=False,
    needs_rescoring=True,
    needs_input=True,
    resolution="input",
    options=SuperpixelOptions,
)
def lime(ctx: MethodContext):
    """LIME: a weighted Lasso's coefficients of superpixels kept or switched off at random."""
    return surrogate(ctx, "lime", draw_halves, cosine_kernel, lambda linear: linear.Lasso(alpha=ALPHA))
