"""Perturbation for a vision-language model's answer: occlusion and feature ablation over the
photo, with no gradient. A feature is a set of the photo's pixels (a superpixel, a window);
switching it off sets those pixels to a baseline colour, as captum's ``ImageMaskInput`` does,
and the processor then makes the model's input of the changed photo. Each answer token's
attribution to a feature is the drop in its score:

    drop[t, k] = S_t(photo) - S_t(photo with feature k switched off)

where S_t is token t's log-probability (or logit) given the prompt and the answer before it.
One teacher-forced forward pass per perturbed photo scores every answer token at once
(``scoring.token_scores``), and the photos go through the model in batches as large as the
memory budget allows (``hookviz.budget``, measured on the photo's own pass). captum's
``LLMAttribution(FeatureAblation(...))`` makes a pass per feature and per answer token (it
decodes the answer token by token); the drops are the same.

- ``feature_ablation``: features are a segment map (H, W) of ids, SLIC superpixels by default
  (``superpixels``), as ``ImageMaskInput(mask=...)`` takes; a pixel's map value is its segment's drop.
- ``occlusion``: features are square windows sliding over the photo (``windows``), overlapping,
  as ``ImageMaskInput(mask_list=...)`` takes; a pixel's map value is the mean drop of the
  windows covering it (captum's ``Occlusion``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hookviz.budget import measuring
from hookviz.errors import UsageError, arg
from hookviz.vlm.explain import MAP_MAKERS, TokenMaps
from hookviz.vlm.scoring import token_scores

__all__ = ["BASELINES", "Perturbation", "feature_ablation", "occlusion", "perturb", "seen_region", "superpixels", "windows"]

#: The colour a switched-off feature takes: captum's white, black, or the photo's mean colour.
BASELINES = ("white", "black", "mean")


@dataclass(frozen=True)
class Perturbation:
    """Each answer token's perturbation map.

    Attributes:
        scores: (T,) each answer token's score on the photo as it is.
        drops: (T, K) the drop of each token's score when feature k is switched off.
        maps: (T, H, W) the drops at the photo's pixels.
        features: (K, H, W) bool: the pixels of each feature.
    """

    scores: torch.Tensor
    drops: torch.Tensor
    maps: torch.Tensor
    features: torch.Tensor


def _fill(photo, baseline: str):
    import numpy as np

    pixels = np.array(photo.convert("RGB"))
    if baseline == "mean":
        return pixels, pixels.reshape(-1, 3).mean(0).round().astype(np.uint8)
    if baseline not in BASELINES:
        raise UsageError(f"{arg('baseline', baseline)}: choose {', '.join(BASELINES)}")
    return pixels, np.full(3, 255 if baseline == "white" else 0, dtype=np.uint8)


def _pixel_values(processor, pixels, fill, features: torch.Tensor) -> torch.Tensor:
    """The processor's pixel values of the photo with each of ``features`` (S, H, W) switched
    off in turn: S photos, batched as the model takes them (each photo's values one after the
    other along the first axis, as ``scoring.token_scores`` takes them, whether a row is a photo,
    a photo's tiles (Idefics3) or a patch (Qwen2-VL))."""
    from PIL import Image

    images = getattr(processor, "image_processor", processor)
    made = []
    for feature in features.cpu().numpy():
        changed = pixels.copy()
        changed[feature] = fill
        made.append(images(images=Image.fromarray(changed), return_tensors="pt")["pixel_values"])
    return torch.cat(made)


def perturb(model, processor, conversation, photo, features: torch.Tensor, baseline: str = "white", objective: str = "logprob"):
    """(scores (T,), drops (T, K)): each answer token's score on ``photo`` (a PIL image, the one
    ``conversation`` was made of) and its drop with each of ``features`` ((K, H, W) bool over the
    photo's pixels) switched off to ``baseline``. One pass for the photo, then one per feature,
    in batches within the memory budget.

    Raises:
        UsageError: features not of the photo's size, a baseline not in ``BASELINES``.
    """
    pixels, fill = _fill(photo, baseline)
    if features.dim() != 3 or tuple(features.shape[1:]) != pixels.shape[:2]:
        raise UsageError(
            f"the features are {tuple(features.shape)}; give (K, {pixels.shape[0]}, {pixels.shape[1]}), masks of the photo's size"
        )
    original = conversation.inputs["pixel_values"]
    with torch.inference_mode(), measuring(model, 1) as measure:
        scores = token_scores(model, conversation, objective=objective)[0]
    rows = measure.cost.rows(original.device, len(features), gradients=False)
    drops = []
    with torch.inference_mode():
        for start in range(0, len(features), rows):
            values = _pixel_values(processor, pixels, fill, features[start : start + rows]).to(original.device, original.dtype)
            drops.append(scores - token_scores(model, conversation, values, objective=objective))
    return scores.float().cpu(), torch.cat(drops).T.float().cpu()


def superpixels(photo, count: int = 16, compactness: float = 10.0) -> torch.Tensor:
    """SLIC superpixels of ``photo`` (a PIL image): an (H, W) long segment map of ids 0..K-1, as
    ``hookviz.methods.superpixels.segments`` cuts a model's input."""
    import numpy as np

    from hookviz.methods.superpixels import SuperpixelOptions, segments

    pixels = torch.as_tensor(np.array(photo.convert("RGB")), dtype=torch.float32).permute(2, 0, 1)[None] / 255
    settings = SuperpixelOptions(superpixels=count, superpixel_compactness=compactness)
    # a vision-language model's run takes no --superpixels or --superpixel-compactness: the photo fails, saying what it takes
    return segments(pixels, settings, "feature-ablation", remedy="give a larger photo, or another --cam")


def windows(size: tuple[int, int], window: int, stride: int) -> torch.Tensor:
    """(M, H, W) bool: the square windows of side ``window`` sliding by ``stride`` over a photo of
    ``size`` (H, W), as hookviz's occlusion places them (``hookviz.methods.occlusion.windows``)."""
    from hookviz.methods.occlusion import windows as boxes

    if stride > window:
        raise UsageError(f"{arg('occlusion_stride', stride)}: at most the window ({window}), or some pixels are never occluded")
    found = boxes(size, window, stride)
    masks = torch.zeros(len(found), *size, dtype=torch.bool)
    for mask, box in zip(masks, found):
        mask[box] = True
    return masks


def feature_ablation(
    model,
    processor,
    conversation,
    photo,
    segments: torch.Tensor | None = None,
    baseline: str = "white",
    objective: str = "logprob",
) -> Perturbation:
    """Feature ablation over ``segments`` (an (H, W) map of ids, SLIC superpixels by default):
    each segment's drop, at each of its pixels."""
    segments = superpixels(photo) if segments is None else segments
    ids, numbered = torch.unique(segments, return_inverse=True)
    features = numbered[None] == torch.arange(len(ids))[:, None, None]
    scores, drops = perturb(model, processor, conversation, photo, features, baseline, objective)
    return Perturbation(scores, drops, drops[:, numbered], features)


def occlusion(
    model, processor, conversation, photo, window: int = 16, stride: int = 8, baseline: str = "white", objective: str = "logprob"
) -> Perturbation:
    """Occlusion by windows of side ``window`` moving by ``stride``: at each pixel, the mean drop
    of the windows covering it."""
    features = windows((photo.height, photo.width), window, stride)
    scores, drops = perturb(model, processor, conversation, photo, features, baseline, objective)
    flat = features.flatten(1).float()
    maps = (drops @ flat) / flat.sum(0).clamp(min=1)
    return Perturbation(scores, drops, maps.reshape(len(drops), photo.height, photo.width), features)


def seen_region(processor, photo) -> tuple[slice, slice]:
    """The rows and columns of ``photo`` the model sees: the centre crop of a processor that
    scales the shorter side then crops (CLIP's, LLaVA's), else the whole photo (a processor
    that scales it whole: Qwen2-VL's, SigLIP's, Idefics3's)."""
    images = getattr(processor, "image_processor", processor)
    crop, size = getattr(images, "crop_size", None), getattr(images, "size", None)
    if not getattr(images, "do_center_crop", False) or not crop or not size or "shortest_edge" not in size:
        return slice(None), slice(None)
    scale = float(size["shortest_edge"]) / min(photo.height, photo.width)
    height, width = min(photo.height, round(crop["height"] / scale)), min(photo.width, round(crop["width"] / scale))
    top, left = (photo.height - height) // 2, (photo.width - width) // 2
    return slice(top, top + height), slice(left, left + width)


def _token_maps(making, method: str, found: Perturbation):
    """``found``'s maps of ``making``'s targets (a target's drops summed over its tokens), kept to
    the part of the photo the model sees (``seen_region``), as the pictures show it."""
    rows, cols = seen_region(making.processor, making.photo)
    maps = torch.stack([found.maps[list(target.tokens)].sum(0)[rows, cols] for target in making.targets])
    return TokenMaps(method, "photo", maps)


@MAP_MAKERS.register("occlusion")
def _occlusion(making):
    """Occlusion by windows of a quarter of the photo's shorter side moving by half a window,
    each switched off to white (captum's ``ImageMaskInput`` default)."""
    photo = making.photo
    window = max(1, min(photo.height, photo.width) // 4)
    talk, objective = making.conversation, making.request.objective
    found = occlusion(making.model, making.processor, talk, photo, window, max(1, window // 2), objective=objective)
    return _token_maps(making, "occlusion", found)


@MAP_MAKERS.register("feature-ablation")
def _feature_ablation(making):
    """Feature ablation over 16 SLIC superpixels, each switched off to white."""
    talk, objective = making.conversation, making.request.objective
    found = feature_ablation(making.model, making.processor, talk, making.photo, objective=objective)
    return _token_maps(making, "feature-ablation", found)
