"""DeepLIFT SHAP (Lundberg and Lee 2017), as captum's ``DeepLiftShap``: DeepLIFT's map
(``hookviz.methods.deeplift``, its rescale rule) against each of a set of baselines drawn
for the image, averaged:

    map = mean_k (x - b_k) * dS/dx |_{rescaled against b_k}

The baselines (``--dls-baselines`` of them, ``--dls-source``): ``noise``, Gaussian noise of the
image's own per-channel mean and standard deviation (its colours, none of its shapes);
``shuffle``, the image's positions in a random order (its exact colours, none of its shapes);
or ``zero``, ``blur``, ``mean``, ``--ig-baseline``'s baselines (each the same: the map is then
DeepLIFT's). The draws come from a ``torch.Generator`` seeded by ``--dls-seed`` for each image,
so an image's map does not depend on the batch it came in, and the caller's random state is
never touched. Cost: two forward and backward passes of ``--dls-baselines`` rows per image.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.deeplift import deeplift_maps
from hookviz.methods.integrated_gradients import IG_BASELINES, baseline
from hookviz.options.declared import check_values, option

__all__ = ["BASELINE_SOURCES", "MAX_BASELINES", "DeepLiftShapOptions", "deeplift_shap", "draw_baselines", "generator"]

#: Where a distribution of baselines comes from: the image's colours as noise, its positions
#: shuffled, or ``--ig-baseline``'s baselines.
BASELINE_SOURCES = ("noise", "shuffle", *IG_BASELINES)
#: At most this many baselines per image (each a row of two passes).
MAX_BASELINES = 256


@dataclass(frozen=True)
class DeepLiftShapOptions:
    """DeepLIFT SHAP's settings (``--dls-baselines``, ``--dls-source``, ``--dls-seed``).

    Attributes:
        dls_baselines: how many baselines are drawn for each image.
        dls_source: what they are drawn from (``BASELINE_SOURCES``; see the module's docstring).
        dls_seed: the seed of the draws (each image's own generator).
    """

    dls_baselines: int = option(
        4, help=f"DeepLIFT SHAP: baselines drawn per image (1 to {MAX_BASELINES}).", low=1, high=MAX_BASELINES
    )
    dls_source: str = option(
        "noise",
        help="DeepLIFT SHAP: baselines of noise (the image's channel means and deviations), shuffle (its positions "
        "shuffled), or zero, blur or mean (--ig-baseline's).",
        choices=BASELINE_SOURCES,
    )
    dls_seed: int = option(0, help="DeepLIFT SHAP: the seed of the baselines' draws.", low=0, high=2**63 - 1)

    def __post_init__(self):
        check_values(self)


def generator(seed: int):
    """A CPU ``torch.Generator`` seeded by ``seed`` (the draws are made on the CPU, so a GPU run draws the same)."""
    import torch

    return torch.Generator().manual_seed(seed)


def draw_baselines(image, source: str, count: int, draws):
    """``count`` baselines of ``image`` (1, C, *spatial), (count, C, *spatial), drawn from
    ``source`` (``BASELINE_SOURCES``) with the generator ``draws``, on the image's device."""
    import torch

    if source not in BASELINE_SOURCES:
        raise UsageError(f"{arg('source', source)}: choose {', '.join(BASELINE_SOURCES)}")
    if source in IG_BASELINES:
        return baseline(image, source).expand(count, *image.shape[1:]).clone()
    values = image.detach().float().cpu()
    spatial = tuple(range(2, values.dim()))
    if source == "noise":
        mean, std = values.mean(dim=spatial, keepdim=True), values.std(dim=spatial, keepdim=True)
        noise = torch.randn((count, *values.shape[1:]), generator=draws)
        return (mean + std * noise).to(image.device, image.dtype)
    flat = values.flatten(2)
    orders = [torch.randperm(flat.shape[-1], generator=draws) for _ in range(count)]
    shuffled = torch.cat([flat[..., order] for order in orders])
    return shuffled.reshape(count, *values.shape[1:]).to(image.device, image.dtype)


@register_method(
    "deeplift-shap",
    needs_gradients=False,
    needs_input=True,
    needs_input_gradients=True,
    resolution="input",
    options=DeepLiftShapOptions,
)
def deeplift_shap(ctx: MethodContext):
    """DeepLIFT SHAP: DeepLIFT's map averaged over baselines drawn for each image (seeded)."""
    import torch

    assert ctx.inputs is not None and ctx.input_gradient is not None  # the pass gives what the method declares
    settings = ctx.settings if isinstance(ctx.settings, DeepLiftShapOptions) else DeepLiftShapOptions()
    maps = []
    for n in range(len(ctx.inputs)):
        image = ctx.inputs[n : n + 1]
        baselines = draw_baselines(image, settings.dls_source, settings.dls_baselines, generator(settings.dls_seed))
        repeated = image.expand_as(baselines).clone()
        maps.append(deeplift_maps(ctx.input_gradient, repeated, baselines, n).mean(dim=0))
    return torch.stack(maps)
