"""Maps of each answer token over the photo from gradients: the Grad-CAM family at a layer of the
vision tower or the projector, and integrated gradients on the pixel values.

One teacher-forced forward pass (``scoring.token_scores``) gives every answer token's score;
each target (a token, or a word's tokens summed) then costs one backward pass through the
graph that pass kept. A layer's output, tokens by channels, is laid on the family's grid
(the vision tower's patches, a class token first dropped; the projector's image tokens), and
the registered layer methods (``hookviz.methods``) weigh it as they weigh any CNN's map."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hookviz.errors import UnknownLayerError, UsageError, arg
from hookviz.methods.base import MethodContext, get_method
from hookviz.methods.integrated_gradients import DEFAULT_STEPS, gauss_legendre
from hookviz.vlm.scoring import token_scores

__all__ = ["LAYER_KINDS", "as_grid", "check_layer_method", "integrated_gradients", "layer_maps", "recorded"]

#: Where a layer may be: the vision tower's or the projector's modules (their names' first parts).
LAYER_KINDS = ("vision", "projector")


@contextlib.contextmanager
def recorded(module: torch.nn.Module) -> Iterator[list]:
    """While open, each output of ``module`` is appended to the list it yields (a tuple's first tensor)."""
    outputs: list = []

    def hook(_module, _inputs, output):
        outputs.append(output[0] if isinstance(output, (tuple, list)) else output)

    handle = module.register_forward_hook(hook)
    try:
        yield outputs
    finally:
        handle.remove()


def as_grid(output: torch.Tensor, grids: list[tuple[int, int]], layer: str, orders=()) -> torch.Tensor:
    """A layer's output (1, n, C) or (n, C) as (1, C, rows, cols) on the first of ``grids`` it fills
    (a class token before the grid dropped). ``orders[i]``, where given, picks grid i's tokens
    row by row from a layer whose tokens run otherwise (a family's ``vision_order``: Qwen2-VL's
    merge blocks, Idefics3's tiles, their global tile left out).

    Raises:
        UnknownLayerError: its tokens fill none of the grids.
    """
    tokens = output.reshape(-1, output.shape[-1])
    for (rows, cols), order in zip(grids, [*orders, *[None] * len(grids)]):
        if order is not None and order.numel() == rows * cols and tokens.shape[0] > int(order.max()):
            return tokens[order.to(tokens.device)].reshape(1, rows, cols, -1).permute(0, 3, 1, 2)
        if tokens.shape[0] in (rows * cols, rows * cols + 1):
            kept = tokens[tokens.shape[0] - rows * cols :]
            return kept.reshape(1, rows, cols, -1).permute(0, 3, 1, 2)
    shown = ", ".join(f"{r}x{c}" for r, c in grids)
    raise UnknownLayerError(
        f"{arg('layers', layer)}: its {tokens.shape[0]} tokens fill no grid of the photo ({shown}); "
        "choose a layer of the vision tower or the projector"
    )


def check_layer_method(name: str) -> None:
    """Refuse a method a token's map cannot be made by at a layer (one that reruns or perturbs the model)."""
    method = get_method(name)
    extras: tuple[str, ...] = ("needs_rescoring", "needs_input", "needs_input_gradients", "needs_attention")
    extras += ("needs_hessian", "needs_contrast", "needs_layer_gradients")
    if method.resolution != "layer" or any(getattr(method, extra) for extra in extras):
        raise UsageError(
            f"{arg('cam', name)}: a vision-language model's tokens are explained by gradcam, gradcam++, layercam, "
            "hirescam, xgradcam and the other layer methods of gradients, integrated-gradients, rollout or chefer"
        )


def layer_maps(model, conversation, targets, module_name: str, grids, methods, objective: str = "logit", orders=()):
    """``{method: (K, rows, cols)}``: each method's map of each of the K ``targets`` at the module
    ``module_name``, from one forward pass and K backward passes; and the scores (T,)."""
    module = model.get_submodule(module_name)
    with recorded(module) as outputs:
        scores = token_scores(model, conversation, objective=objective)[0]
    if not outputs:
        raise UnknownLayerError(f"{arg('layers', module_name)}: the forward pass never ran it; choose another layer")
    raw = outputs[-1]
    activations = as_grid(raw, grids, module_name, orders).detach().float()
    found: dict[str, list[torch.Tensor]] = {name: [] for name in methods}
    for target in targets:
        (gradient,) = torch.autograd.grad(scores[list(target.tokens)].sum(), raw, retain_graph=True, allow_unused=True)
        gradient = torch.zeros_like(raw) if gradient is None else gradient
        context = MethodContext(
            activations, as_grid(gradient, grids, module_name, orders).float(), module, module_name, model=model
        )
        for name in methods:
            method = get_method(name)
            settings = method.options() if method.options is not None else None
            made = method.compute(_with(context, settings))
            found[name].append(made.reshape(activations.shape[-2:]).float())
    return {name: torch.stack(maps) for name, maps in found.items()}, scores.detach()


def _with(context: MethodContext, settings) -> MethodContext:
    from dataclasses import replace

    return replace(context, settings=settings)


def integrated_gradients(model, conversation, targets, steps: int = DEFAULT_STEPS, objective: str = "logit") -> torch.Tensor:
    """(K, *pixel values' shape): integrated gradients of each target on the pixel values, from
    zeros (captum's default baseline and Gauss-Legendre rule): one forward pass of the ``steps``
    points of the path, one after the other along the first axis (as captum and
    ``scoring.token_scores`` batch them: a photo, Idefics3's tiles or Qwen2-VL's patches per
    point), and one backward pass per target."""
    pixels = conversation.inputs["pixel_values"]
    nodes, weights = gauss_legendre(steps)
    alphas = torch.tensor(nodes, dtype=pixels.dtype).view(-1, *([1] * pixels.dim()))
    # the baseline is zero: b + a (x - b) = a x
    path = (alphas * pixels[None]).reshape(-1, *pixels.shape[1:]).detach().requires_grad_(True)
    scores = token_scores(model, conversation, path, objective=objective)  # (steps, T)
    rule = torch.tensor(weights, dtype=torch.float32).view(-1, *([1] * pixels.dim()))
    maps = []
    for target in targets:
        (gradient,) = torch.autograd.grad(scores[:, list(target.tokens)].sum(), path, retain_graph=True)
        maps.append(pixels.float() * (gradient.float().reshape(steps, *pixels.shape) * rule).sum(0))
    return torch.stack(maps).detach()
