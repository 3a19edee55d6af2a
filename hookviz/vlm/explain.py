"""A vision-language model's answer about a photo, explained token by token: the conversation
(``conversation``), the targets (``targets``), then each method's map of every target, at the
layers asked (Grad-CAM family), on the pixels (integrated gradients) or over the image tokens
(rollout, Chefer's relevancy)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from hookviz.errors import UsageError, arg
from hookviz.vlm import attention, cams
from hookviz.vlm.conversation import Conversation, answer_conversation, converse
from hookviz.vlm.families.base import family_of, part
from hookviz.vlm.scoring import OBJECTIVES, token_scores
from hookviz.vlm.targets import Target, choose_targets

__all__ = ["TokenMaps", "VlmExplanation", "VlmRequest", "explain_photo", "resolve_layer"]

#: Methods of a vision-language model that are not layer methods of ``hookviz.methods``.
PIXEL_METHOD, TOKEN_METHODS = "integrated-gradients", ("rollout", "chefer")
#: Methods that perturb the photo (``hookviz.vlm.perturbation``): maps at the photo's own pixels.
PERTURBATION_METHODS = ("occlusion", "feature-ablation")


@dataclass(frozen=True)
class VlmRequest:
    """What to explain: the prompt, the answer (``None``: the model writes it, greedily, up to
    ``max_new_tokens``), the tokens (``tokens`` indices or ``words``), the methods, the layers
    (``vision``, ``projector`` or a module's name; none: the family's vision layer), the
    objective (``logit`` or ``logprob``) and integrated gradients' ``steps``."""

    prompt: str
    answer: str | None = None
    max_new_tokens: int = 16
    tokens: str | None = None
    words: str | None = None
    methods: tuple[str, ...] = ("gradcam",)
    layers: tuple[str, ...] = ()
    objective: str = "logit"
    steps: int = 16

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise UsageError(f"{arg('objective', self.objective)}: a vision-language model takes {' or '.join(OBJECTIVES)}")
        if not isinstance(self.max_new_tokens, int) or not 1 <= self.max_new_tokens <= 4096:
            raise UsageError(f"{arg('max_new_tokens', self.max_new_tokens)}: give 1 to 4096 tokens")
        if not str(self.prompt).strip():
            raise UsageError(f"{arg('prompts', self.prompt)}: give the question to ask about the photo")
        for name in self.methods:
            if name != PIXEL_METHOD and name not in TOKEN_METHODS + PERTURBATION_METHODS:
                cams.check_layer_method(name)


@dataclass(frozen=True)
class TokenMaps:
    """One method's maps of every target: (K, rows, cols) over the photo's grid (integrated
    gradients: (K, H, W), the channels summed) at ``layer`` (``pixels``, ``language``)."""

    method: str
    layer: str
    maps: torch.Tensor = field(repr=False)


@dataclass(frozen=True)
class VlmExplanation:
    """The conversation, its targets, every answer token's probability and score, and the maps."""

    conversation: Conversation
    targets: tuple[Target, ...]
    probabilities: torch.Tensor
    scores: torch.Tensor
    objective: str
    family: str
    maps: tuple[TokenMaps, ...]
    photo: np.ndarray = field(repr=False)  # (H, W, 3) in [0, 1]: the pixels as the model saw them


def resolve_layer(model, family, name: str) -> str:
    """``vision``, ``projector`` or a module's qualified name, as a module's name of the vision
    tower or the projector.

    Raises:
        UnknownLayerError: no such module, or one outside both.
    """
    from hookviz.errors import UnknownLayerError

    defaults = family.default_layers(model)
    chosen = defaults.get(name, name)
    modules = dict(model.named_modules())
    if chosen not in modules:
        raise UnknownLayerError(
            f"{arg('layers', name)}: the model has no such module; give vision, projector or a module of them "
            f"(the vision layer is {defaults['vision']})"
        )
    return chosen


def explain_photo(model, processor, photo, request: VlmRequest) -> VlmExplanation:
    """``request`` explained on ``photo`` (a PIL image) by ``model`` with its ``processor``."""
    family = family_of(model)
    if request.answer is not None:
        talk = answer_conversation(model, processor, photo, request.prompt, request.answer)
    else:
        talk = converse(model, processor, photo, request.prompt, request.max_new_tokens)
    tokenizer = getattr(processor, "tokenizer", processor)
    targets = choose_targets(talk, tokenizer, request.tokens, request.words)
    with torch.no_grad():
        probabilities = token_scores(model, talk, objective="logprob")[0].exp()
    maps, scores = _maps(model, family, talk, targets, request)
    order = {name: k for k, name in enumerate(request.methods)}
    maps = tuple(sorted(maps + _perturbed(model, processor, talk, photo, targets, request), key=lambda m: order[m.method]))
    return VlmExplanation(talk, targets, probabilities, scores, request.objective, family.name, maps, _seen(processor, talk))


def _maps(model, family, talk, targets, request) -> tuple[tuple[TokenMaps, ...], torch.Tensor]:
    made: list[TokenMaps] = []
    layered = [m for m in request.methods if m != PIXEL_METHOD and m not in TOKEN_METHODS + PERTURBATION_METHODS]
    grids = [family.vision_grid(model, talk.inputs), family.image_tokens(model, talk.inputs)[0].grid]
    # the tower's and the projector's tokens, where they run otherwise than row by row (Qwen2-VL, Idefics3)
    orders = [getattr(family, kind, None) for kind in ("vision_order", "projector_order")]
    orders = [order(model, talk.inputs) if order else None for order in orders]
    scores = None
    for layer in (request.layers or ("vision",)) if layered else ():
        name = resolve_layer(model, family, layer)
        by_method, scores = cams.layer_maps(model, talk, targets, name, grids, layered, request.objective, orders)
        made += [TokenMaps(method, name, by_method[method]) for method in layered]
    image = family.image_tokens(model, talk.inputs)[0]
    for method in request.methods:
        if method == PIXEL_METHOD:
            pixels = cams.integrated_gradients(model, talk, targets, request.steps, request.objective)
            made.append(TokenMaps(method, "pixels", pixels.sum(1)))
        elif method == "rollout":
            made.append(TokenMaps(method, "language", attention.rollout(model, talk, targets, image)))
        elif method == "chefer":
            made.append(TokenMaps(method, "language", attention.chefer(model, talk, targets, image, request.objective)))
    if scores is None:
        with torch.no_grad():
            scores = token_scores(model, talk, objective=request.objective)[0]
    order = {name: k for k, name in enumerate(request.methods)}
    return tuple(sorted(made, key=lambda m: order[m.method])), scores


def _perturbed(model, processor, talk, photo, targets, request) -> tuple[TokenMaps, ...]:
    """The perturbation methods' maps of every target ((K, H, W) at the photo's pixels, a
    target's drops summed over its tokens): occlusion by windows of a quarter of the photo's
    shorter side moving by half a window, feature ablation over 16 SLIC superpixels, each
    switched off to white (captum's ``ImageMaskInput`` default). The maps keep the part of the
    photo the model sees (``perturbation.seen_region``), as the pictures show it."""
    from hookviz.vlm import perturbation

    made = []
    for method in (m for m in request.methods if m in PERTURBATION_METHODS):
        if method == "occlusion":
            window = max(1, min(photo.height, photo.width) // 4)
            found = perturbation.occlusion(
                model, processor, talk, photo, window, max(1, window // 2), objective=request.objective
            )
        else:
            found = perturbation.feature_ablation(model, processor, talk, photo, objective=request.objective)
        rows, cols = perturbation.seen_region(processor, photo)
        maps = torch.stack([found.maps[list(target.tokens)].sum(0)[rows, cols] for target in targets])
        made.append(TokenMaps(method, "photo", maps))
    return tuple(made)


def _seen(processor, talk: Conversation) -> np.ndarray:
    """The photo as the model saw it: the pixel values unnormalised, (H, W, 3) in [0, 1]."""
    images = part(processor, "image_processor") or processor
    pixels = talk.inputs["pixel_values"].float()
    pixels = pixels.reshape(-1, *pixels.shape[-3:])[0]
    mean = torch.tensor(getattr(images, "image_mean", None) or [0.0, 0.0, 0.0]).view(-1, 1, 1)
    std = torch.tensor(getattr(images, "image_std", None) or [1.0, 1.0, 1.0]).view(-1, 1, 1)
    if pixels.shape[0] != 3:
        return np.full((*pixels.shape[-2:], 3), 0.5, dtype=np.float32)
    return (pixels * std + mean).clamp(0, 1).permute(1, 2, 0).numpy()
