"""What the superpixel methods share (``feature-ablation``, ``lime``, ``kernel-shap``): their one
option group, each photo's superpixels, and the target's score on the photo with some of its
superpixels replaced by a baseline.

The three methods declare one group, ``SuperpixelOptions``: ``hookviz.options.declared`` keys a
group by its type, so the group is one set of flags (``--superpixels``, ``--superpixel-compactness``,
``--superpixel-baseline``, ``--superpixel-samples``, ``--superpixel-seed``) that any of the three
takes, and the methods read the run's values as ``ctx.settings``. Feature ablation draws nothing,
so it ignores the two sampling settings (their help says so).

Superpixels are scikit-image's SLIC (``skimage.segmentation.slic``) of the model's input, each photo
scaled to 0..1 as a whole (SLIC takes an RGB photo's colours in Lab), numbered 0..K-1; the
``superpixels`` extra installs scikit-image. A superpixel switched off is replaced by the
baseline (``--superpixel-baseline``: ``--ig-baseline``'s zero, blur or mean,
``hookviz.methods.integrated_gradients.baseline``) in every channel, as captum's
``feature_mask`` of shape (1, 1, H, W) does.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.errors import ImageError, UsageError, arg
from hookviz.methods.base import RESCORING_BATCH, MethodContext
from hookviz.methods.integrated_gradients import IG_BASELINES, baseline
from hookviz.methods.relevance import require
from hookviz.options.declared import check_values, option
from hookviz.workload import work

__all__ = [
    "MAX_SAMPLES",
    "MAX_SUPERPIXELS",
    "SuperpixelOptions",
    "broadcast",
    "perturbed_scores",
    "photos",
    "segments",
    "surrogate",
]

#: At most this many superpixels (``--superpixels``): feature ablation makes a pass for each.
MAX_SUPERPIXELS = 4096
#: At most this many perturbed inputs per photo (``--superpixel-samples``).
MAX_SAMPLES = 100_000
#: The methods that share the group, as ``--cam`` names them.
OWNERS = "feature-ablation, lime, kernel-shap"


@dataclass(frozen=True)
class SuperpixelOptions:
    """The superpixel methods' settings (``--superpixels``, ``--superpixel-compactness``,
    ``--superpixel-baseline``, ``--superpixel-samples``, ``--superpixel-seed``).

    Attributes:
        superpixels: about how many SLIC superpixels a photo is cut into (SLIC's ``n_segments``).
        superpixel_compactness: SLIC's ``compactness``: higher, squarer superpixels; lower, closer to colour edges.
        superpixel_baseline: what a superpixel switched off becomes: ``zero``, ``blur`` or ``mean``,
            as ``--ig-baseline``'s.
        superpixel_samples: lime's and kernel-shap's perturbed inputs per photo (captum's ``n_samples``).
        superpixel_seed: seeds lime's and kernel-shap's draws, each photo's from the seed afresh.
    """

    superpixels: int = option(
        16,
        help=f"{OWNERS}: about how many SLIC superpixels a photo is cut into (2 to {MAX_SUPERPIXELS}).",
        low=2,
        high=MAX_SUPERPIXELS,
    )
    superpixel_compactness: float = option(
        10.0, help=f"{OWNERS}: SLIC's compactness (higher: squarer superpixels; 0.01 to 1000).", low=0.01, high=1000.0
    )
    superpixel_baseline: str = option(
        "zero",
        help=f"{OWNERS}: a superpixel switched off becomes zero (as captum's), blur (the input blurred) or mean (its mean colour).",
        choices=IG_BASELINES,
    )
    superpixel_samples: int = option(
        25,
        help=f"lime, kernel-shap: perturbed inputs per photo, each a pass (captum's n_samples; 2 to {MAX_SAMPLES}).",
        low=2,
        high=MAX_SAMPLES,
    )
    superpixel_seed: int = option(0, help="lime, kernel-shap: the seed of the perturbations drawn.", low=0, high=2**63 - 1)

    def __post_init__(self):
        check_values(self)


def photos(ctx: MethodContext, method: str):
    """``ctx.inputs`` and the run's ``SuperpixelOptions``; UsageError in one line for an input
    that is not a batch of photos (N, C, H, W): a signal's or a clip's has no SLIC superpixels."""
    inputs = ctx.inputs
    assert inputs is not None and ctx.score is not None  # needs_input, needs_rescoring: the pass gives them
    if inputs.dim() != 4:
        what = {3: "a 1-D signal", 5: "a clip"}.get(inputs.dim(), f"{inputs.dim() - 2}-D")
        raise UsageError(
            f"{arg('cam', method)}: the input is {what}, and superpixels (SLIC) cut only photos (C, H, W); choose another method"
        )
    settings = ctx.settings if isinstance(ctx.settings, SuperpixelOptions) else SuperpixelOptions()
    return inputs, settings


def segments(image, settings: SuperpixelOptions, method: str, remedy: str | None = None):
    """One photo's (1, C, H, W) superpixels: an (H, W) long tensor of labels 0..K-1 (K >= 2), on
    the photo's device. ImageError in one line when SLIC cannot cut it into two or more: that
    photo fails, and a run goes on with the others. ``remedy``: what to do, said by a caller that
    takes none of ``SuperpixelOptions``' flags (a vision-language model's run); the photo then
    fails alone when it has fewer pixels than the superpixels asked for too."""
    import numpy as np
    import torch

    segmentation = require("skimage.segmentation", method, "superpixels")
    height, width = image.shape[-2:]
    if remedy is not None and settings.superpixels > height * width:
        raise ImageError(
            f"{arg('cam', method)}: this {height}x{width} input has fewer pixels than the {settings.superpixels} "
            f"superpixels it is cut into; {remedy}"
        )
    if settings.superpixels > height * width:
        raise UsageError(
            f"{arg('superpixels', settings.superpixels)}: the input has only {height}x{width} pixels; "
            f"ask for at most {height * width} superpixels, or give a larger input"
        )
    photo = image[0].detach().float().cpu()
    low, high = photo.min(), photo.max()
    scaled = ((photo - low) / (high - low).clamp(min=1e-12)).permute(1, 2, 0).double().numpy()
    labels = segmentation.slic(
        scaled,
        n_segments=settings.superpixels,
        compactness=settings.superpixel_compactness,
        start_label=0,
        channel_axis=-1,
        convert2lab=scaled.shape[-1] == 3,
    )
    _, numbered = np.unique(labels, return_inverse=True)  # 0..K-1 with no gap
    numbered = numbered.reshape(labels.shape)
    if int(numbered.max()) < 1:  # this photo's fault, not the run's: it fails alone (issue 37)
        raise ImageError(
            f"{arg('cam', method)}: SLIC finds only one superpixel in this {height}x{width} input, so there is nothing to "
            "compare; "
            + (
                remedy
                or f"give a higher {arg('superpixel_compactness')} (squarer superpixels: 100 cuts even noise), "
                f"more {arg('superpixels')} or a larger input"
            )
        )
    return torch.as_tensor(numbered, dtype=torch.long, device=image.device)


def perturbed_scores(ctx: MethodContext, index: int, image, background, labels, kept, measure=None):
    """The target's score on photo ``index`` (``image``, (1, C, H, W)) with the superpixels
    ``kept[s]`` (a (S, K) tensor of 0/1) kept and the others replaced by ``background`` (its
    baseline, the image's shape): (S,) float32, in passes of ``RESCORING_BATCH`` rows at most
    (``ctx.score`` takes them within the memory budget). Each row is made as captum's
    ``default_from_interp_rep_transform`` makes it: ``mask * image + (~mask) * background``.
    With ``measure(rows, chunk) -> (s,)`` (a chunk's perturbed inputs and its rows of ``kept``),
    also what it says of each: ``(scores, measures)``."""
    import torch

    assert ctx.score is not None
    scores, measures = [], []
    for start in range(0, len(kept), RESCORING_BATCH):
        mask = kept[start : start + RESCORING_BATCH].to(labels.device)[:, labels].bool()[:, None]  # (s, 1, H, W)
        rows = mask.to(image.dtype) * image + (~mask).to(image.dtype) * background
        scores.append(ctx.score(rows, torch.full((len(rows),), index, dtype=torch.long)).float().cpu())
        if measure is not None:
            measures.append(measure(rows, kept[start : start + RESCORING_BATCH]).float().cpu())
    if measure is None:
        return torch.cat(scores)
    return torch.cat(scores), torch.cat(measures)


def surrogate(ctx: MethodContext, method: str, draw, weigh, regression):
    """Lime's and kernel-shap's maps: per photo, ``draw(generator, K, S)`` gives S rows of 0/1 over
    its K superpixels (S: ``--superpixel-samples``; the generator seeded afresh from
    ``--superpixel-seed`` for each photo, so a map does not depend on the batch it came in);
    the target is scored on each perturbed input; ``weigh(image, rows, kept)`` weighs each
    sample (``rows``: a chunk's perturbed inputs, ``kept``: its 0/1 rows); and
    ``regression(sklearn.linear_model)``, fitted to (rows, scores, weights) in float32 as
    captum's ``sklearn_train_linear_model`` fits it, gives each superpixel its coefficient."""
    import torch

    inputs, settings = photos(ctx, method)
    linear = require("sklearn.linear_model", method, "superpixels")
    cut = [segments(inputs[n : n + 1], settings, method) for n in range(len(inputs))]
    samples, maps = settings.superpixel_samples, []
    with work(method, len(inputs) * samples, "perturbed passes", len(inputs), fed=True):
        for n, labels in enumerate(cut):
            image = inputs[n : n + 1]
            generator = torch.Generator().manual_seed(settings.superpixel_seed)
            kept = draw(generator, int(labels.max()) + 1, samples)
            measure = lambda rows, chunk, image=image: weigh(image, rows, chunk)  # noqa: E731
            scores, weights = perturbed_scores(ctx, n, image, background(image, settings), labels, kept, measure)
            fitted = regression(linear).fit(kept.float().numpy(), scores.numpy(), sample_weight=weights.numpy())
            maps.append(broadcast(torch.as_tensor(fitted.coef_, dtype=torch.float32).flatten(), labels, inputs.shape[1]))
    return torch.stack(maps)


def broadcast(values, labels, channels: int):
    """Each superpixel's value (a (K,) tensor) at each of its pixels, in every channel: (C, H, W) float32."""
    return values.float().to(labels.device)[labels][None].expand(channels, *labels.shape).clone()


def background(image, settings: SuperpixelOptions):
    """What a switched-off superpixel of ``image`` (1, C, H, W) becomes (``--superpixel-baseline``)."""
    return baseline(image, settings.superpixel_baseline)
