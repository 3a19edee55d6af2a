"""Gradient SHAP (Lundberg and Lee 2017), as captum's ``GradientShap``: expected gradients
over random points between the input (with Gaussian noise) and baselines drawn for it:

    map = mean_s (x + e_s - b_s) * dS/dx |_{c_s (x + e_s) + (1 - c_s) b_s}

with ``--gs-samples`` samples (captum's ``n_samples``, 5), noise ``e_s`` of standard deviation
``--gs-stdevs`` in the model's input space (captum's ``stdevs``, 0), each sample's baseline
``b_s`` chosen at random among ``--gs-baselines`` baselines drawn as DeepLIFT SHAP draws them
(``--gs-source``: noise, shuffle, zero, blur, mean; ``hookviz.methods.deeplift_shap``), and
``c_s`` uniform on [0, 1). Every draw comes from a ``torch.Generator`` seeded by ``--gs-seed``
for each image, never the caller's random state (captum draws from numpy's and torch's global
streams). Cost: one forward and backward pass of ``--gs-samples`` rows per image.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.deeplift_shap import BASELINE_SOURCES, MAX_BASELINES, draw_baselines, generator
from hookviz.options.declared import check_values, option

__all__ = ["GradientShapOptions", "MAX_SAMPLES", "gradient_shap", "draws"]

#: At most this many samples per image (``--gs-samples``), each a row of a forward and backward pass.
MAX_SAMPLES = 1024


@dataclass(frozen=True)
class GradientShapOptions:
    """Gradient SHAP's settings (``--gs-samples``, ``--gs-stdevs``, ``--gs-baselines``, ``--gs-source``, ``--gs-seed``).

    Attributes:
        gs_samples: random points per image (captum's ``n_samples``, 5).
        gs_stdevs: the standard deviation of the noise added to the input (captum's ``stdevs``, 0).
        gs_baselines: how many baselines are drawn for each image, which the samples choose among.
        gs_source: what they are drawn from (as DeepLIFT SHAP's ``--dls-source``).
        gs_seed: the seed of every draw (each image's own generator).
    """

    gs_samples: int = option(
        5, help=f"Gradient SHAP: random points per image (captum's n_samples; 1 to {MAX_SAMPLES}).", low=1, high=MAX_SAMPLES
    )
    gs_stdevs: float = option(
        0.0, help="Gradient SHAP: standard deviation of the noise added to the input (captum's stdevs).", low=0.0, high=1e6
    )
    gs_baselines: int = option(
        8,
        help=f"Gradient SHAP: baselines drawn per image, chosen among at random (1 to {MAX_BASELINES}).",
        low=1,
        high=MAX_BASELINES,
    )
    gs_source: str = option(
        "noise",
        help="Gradient SHAP: baselines of noise (the image's channel means and deviations), shuffle (its positions "
        "shuffled), or zero, blur or mean (--ig-baseline's).",
        choices=BASELINE_SOURCES,
    )
    gs_seed: int = option(0, help="Gradient SHAP: the seed of its draws.", low=0, high=2**63 - 1)

    def __post_init__(self):
        check_values(self)


def draws(image, settings: GradientShapOptions):
    """One image's draws (1, C, *spatial), in this order from one generator seeded by
    ``gs_seed``: the baselines (``gs_baselines``, C, *spatial), each sample's baseline index
    (``gs_samples``,), its point's coefficient (``gs_samples``,) and its noise
    (``gs_samples``, C, *spatial), all on the image's device."""
    import torch

    draw = generator(settings.gs_seed)
    baselines = draw_baselines(image, settings.gs_source, settings.gs_baselines, draw)
    chosen = torch.randint(settings.gs_baselines, (settings.gs_samples,), generator=draw)
    coefficients = torch.rand(settings.gs_samples, generator=draw, dtype=torch.float64)
    noise = torch.randn((settings.gs_samples, *image.shape[1:]), generator=draw) * settings.gs_stdevs
    on = dict(device=image.device, dtype=image.dtype)
    return baselines, chosen.to(image.device), coefficients.to(**on), noise.to(**on)


@register_method(
    "gradient-shap",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    options=GradientShapOptions,
)
def gradient_shap(ctx: MethodContext):
    """Gradient SHAP: expected gradients between the noisy input and random baselines (seeded)."""
    import torch

    assert ctx.inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    settings = ctx.settings if isinstance(ctx.settings, GradientShapOptions) else GradientShapOptions()
    maps = []
    for n in range(len(ctx.inputs)):
        image = ctx.inputs[n : n + 1]
        baselines, chosen, coefficients, noise = draws(image, settings)
        noisy, starts = image + noise, baselines[chosen]
        along = (-1,) + (1,) * (image.dim() - 1)
        points = coefficients.reshape(along) * noisy + (1 - coefficients.reshape(along)) * starts
        grads = ctx.input_gradient(points, torch.full((settings.gs_samples,), n, dtype=torch.long))
        maps.append(((noisy - starts).float() * grads).mean(dim=0))
    return torch.stack(maps)
