"""A vision-language model's answer about a photo, explained token by token: the conversation
(``conversation``), the targets (``targets``), then each method's map of every target, at the
layers asked (Grad-CAM family), on the pixels (integrated gradients) or over the image tokens
(rollout, Chefer's relevancy)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hookviz.errors import UsageError, arg
from hookviz.methods.integrated_gradients import DEFAULT_STEPS, MAX_STEPS, IGOptions
from hookviz.registry import Registry, built_in
from hookviz.vlm import attention, cams
from hookviz.vlm.conversation import Conversation, answer_conversation, converse
from hookviz.vlm.families.base import family_of, part
from hookviz.vlm.scoring import OBJECTIVES, answer_logits, picked
from hookviz.vlm.targets import Target, choose_targets

__all__ = [
    "MAP_MAKERS",
    "Making",
    "TokenMaps",
    "VlmExplanation",
    "VlmRequest",
    "explain_photo",
    "laid_out",
    "resolve_layer",
    "steps_of",
]

#: The methods of a vision-language model that are no layer method of ``hookviz.methods``, by
#: ``--cam`` name: ``maker(making) -> TokenMaps`` (a ``Making``). Built-ins: integrated gradients,
#: rollout, Chefer's relevancy; a module named in ``modules`` (or a plug-in) adds its own with
#: ``MAP_MAKERS.register(name)`` (perturbation: occlusion, feature ablation).
MAP_MAKERS: Registry[Callable[..., Any]] = Registry(
    "cam", "vision-language method", modules=built_in("hookviz.vlm", "explain perturbation")
)


@dataclass(frozen=True)
class VlmRequest:
    """What to explain: the prompt, the answer (``None``: the model writes it, greedily, up to
    ``max_new_tokens``), the tokens (``tokens`` indices or ``words``), the methods, the layers
    (``vision``, ``projector`` or a module's name; none: the family's vision layer), the
    objective (``logit`` or ``logprob``) and integrated gradients' ``steps`` (``DEFAULT_STEPS``, as
    ``--steps``'s default)."""

    prompt: str
    answer: str | None = None
    max_new_tokens: int = 16
    tokens: str | None = None
    words: str | None = None
    methods: tuple[str, ...] = ("gradcam",)
    layers: tuple[str, ...] = ()
    objective: str = "logit"
    steps: int = DEFAULT_STEPS

    def __post_init__(self):
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 1 <= self.steps <= MAX_STEPS:
            raise UsageError(
                f"{arg('steps', self.steps)}: a vision-language model's integrated gradients take 1 to {MAX_STEPS} steps "
                f"({DEFAULT_STEPS} by default)"
            )
        if self.objective not in OBJECTIVES:
            raise UsageError(f"{arg('objective', self.objective)}: a vision-language model takes {' or '.join(OBJECTIVES)}")
        if not isinstance(self.max_new_tokens, int) or not 1 <= self.max_new_tokens <= 4096:
            raise UsageError(f"{arg('max_new_tokens', self.max_new_tokens)}: give 1 to 4096 tokens")
        if not str(self.prompt).strip():
            raise UsageError(f"{arg('prompts', self.prompt)}: give the question to ask about the photo")
        for name in self.methods:
            if name not in MAP_MAKERS.names():
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


def steps_of(settings) -> int:
    """Integrated gradients' steps among a run's method ``settings`` (``IGOptions``: ``--steps``,
    ``steps=``), or ``DEFAULT_STEPS``.

    Raises:
        UsageError: ``--steps auto``, which a vision-language model does not take.
    """
    steps = next((s.steps for s in settings if isinstance(s, IGOptions)), DEFAULT_STEPS)
    if not isinstance(steps, int):
        raise UsageError(
            f"{arg('steps', steps)}: a vision-language model's integrated gradients take a number of steps "
            f"({DEFAULT_STEPS} by default), not auto"
        )
    return steps


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


@dataclass(frozen=True)
class Making:
    """What a ``MAP_MAKERS`` method is given: the model, its processor and family, the photo (PIL),
    the conversation, the targets and the request."""

    model: Any
    processor: Any
    family: Any
    photo: Any
    conversation: Conversation
    targets: tuple[Target, ...]
    request: VlmRequest

    @property
    def image(self):
        """The photo's image tokens (``families.ImageTokens``)."""
        return self.family.image_tokens(self.model, self.conversation.inputs)[0]


def explain_photo(model, processor, photo, request: VlmRequest) -> VlmExplanation:
    """``request`` explained on ``photo`` (a PIL image) by ``model`` with its ``processor``."""
    family = family_of(model)
    if request.answer is not None:
        talk = answer_conversation(model, processor, photo, request.prompt, request.answer)
    else:
        talk = converse(model, processor, photo, request.prompt, request.max_new_tokens)
    tokenizer = getattr(processor, "tokenizer", processor)
    targets = choose_targets(talk, tokenizer, request.tokens, request.words)
    making = Making(model, processor, family, photo, talk, targets, request)
    maps, scores, logits = _maps(making)
    probabilities = picked(logits, talk, "logprob")[0].exp()
    seen = _seen(processor, family, model, talk)
    return VlmExplanation(talk, targets, probabilities, scores, request.objective, family.name, maps, seen)


def _maps(making: Making) -> tuple[tuple[TokenMaps, ...], torch.Tensor, torch.Tensor]:
    """The maps, every answer token's score, and the answer's logits (1, T, V): those of the first
    layer method's forward pass, or of one forward pass of their own (report.json's probabilities)."""
    model, family, talk, request = making.model, making.family, making.conversation, making.request
    makers = dict(MAP_MAKERS.items())
    made: list[TokenMaps] = []
    layered = [m for m in request.methods if m not in makers]
    grids = [family.vision_grid(model, talk.inputs), making.image.grid]
    # the tower's and the projector's tokens, where they run otherwise than row by row (Qwen2-VL, Idefics3)
    orders = [getattr(family, kind, None) for kind in ("vision_order", "projector_order")]
    orders = [order(model, talk.inputs) if order else None for order in orders]
    scores = logits = None
    for layer in (request.layers or ("vision",)) if layered else ():
        name = resolve_layer(model, family, layer)
        with cams.recorded(model) as answered:  # its logits give the probabilities too: no pass of their own
            by_method, scores = cams.layer_maps(model, talk, making.targets, name, grids, layered, request.objective, orders)
        logits = answered[-1].logits.detach().float() if logits is None else logits
        made += [TokenMaps(method, name, by_method[method]) for method in layered]
    made += [makers[method](making) for method in request.methods if method in makers]
    if logits is None:
        with torch.no_grad():
            logits = answer_logits(model, talk)
    if scores is None:
        scores = picked(logits, talk, request.objective)[0]
    order = {name: k for k, name in enumerate(request.methods)}
    return tuple(sorted(made, key=lambda m: order[m.method])), scores, logits


@MAP_MAKERS.register("integrated-gradients")
def _integrated_gradients(making: Making) -> TokenMaps:
    request = making.request
    talk = making.conversation
    pixels = cams.integrated_gradients(making.model, talk, making.targets, request.steps, request.objective)
    maps = torch.stack([laid_out(making.family, making.model, talk.inputs, values, summed=True) for values in pixels])
    return TokenMaps("integrated-gradients", "pixels", maps.sum(1))


@MAP_MAKERS.register("rollout")
def _rollout(making: Making) -> TokenMaps:
    return TokenMaps("rollout", "language", attention.rollout(making.model, making.conversation, making.targets, making.image))


@MAP_MAKERS.register("chefer")
def _chefer(making: Making) -> TokenMaps:
    maps = attention.chefer(making.model, making.conversation, making.targets, making.image, making.request.objective)
    return TokenMaps("chefer", "language", maps)


def laid_out(family, model, inputs, values: torch.Tensor, summed: bool = False) -> torch.Tensor:
    """(C, H, W): ``values`` (of the shape of ``inputs``' pixel values: the pixels, or with
    ``summed`` an attribution to them, a pixel's copies summed) as the photo, laid out by the
    family where its processor gives them otherwise than as one photo (Qwen2-VL's patches,
    Idefics3's tiles: ``photo_pixels``)."""
    layout = getattr(family, "photo_pixels", None)
    if layout is None:
        return values.reshape(-1, *values.shape[-3:])[0]
    return layout(model, {**inputs, "pixel_values": values}, summed)


def _seen(processor, family, model, talk: Conversation) -> np.ndarray:
    """The photo as the model saw it: the pixel values unnormalised, (H, W, 3) in [0, 1]."""
    images = part(processor, "image_processor") or processor
    pixels = laid_out(family, model, talk.inputs, talk.inputs["pixel_values"].float())
    mean = torch.tensor(getattr(images, "image_mean", None) or [0.0, 0.0, 0.0]).view(-1, 1, 1)
    std = torch.tensor(getattr(images, "image_std", None) or [1.0, 1.0, 1.0]).view(-1, 1, 1)
    if pixels.shape[0] != 3:
        return np.full((*pixels.shape[-2:], 3), 0.5, dtype=np.float32)
    return (pixels * std + mean).clamp(0, 1).permute(1, 2, 0).numpy()
