"""CAM (Zhou et al. 2016, "Learning Deep Features for Discriminative Localization"): each
channel of the last feature map weighted by the classifier's weight for the target class,
where the model's head is a global average pool then one linear layer.

    map = ReLU(sum_c w[class, c] * A_c)    (w: that linear layer's weight)

as torch-cam's ``CAM`` computes it (its ``fc_layer``'s raw weights). Which linear layer and
which of its rows: the one whose row, spread evenly over the map's positions, is the
gradient of the target's score at this layer (d S / d A_c(x, y) = w[class, c] / positions,
exactly when S = w[class] . mean(A) + b). That both finds the class and proves the head is
a global average pool then that linear layer at this layer; a layer where it is not (an
earlier block, a head with another layer between, a detector's) gets no CAM, and its report
says why (``NoMap``), as for a layer the target does not reach. A model with no ``nn.Linear``
at all (a segmenter of convolutions) is refused in one line before any image. Where it is, Grad-CAM's weights are these divided by the number of positions, so
``gradcam`` makes the same map up to that factor and explains every other layer too.
"""

from __future__ import annotations

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MethodContext, NoMap, register_method

__all__ = ["cam", "classifier_rows"]

#: The gradient matches a row of the classifier when it differs from it, at every position, by
#: at most this much of the row's largest weight (float32 backward passes agree to ~1e-6).
_TOLERANCE = 1e-3


def _check(model) -> None:
    import torch

    if not any(isinstance(module, torch.nn.Linear) for module in model.modules()):
        raise UsageError(
            f"{arg('cam', 'cam')}: {type(model).__name__} has no nn.Linear classifier, so CAM has no class weights to read; "
            "choose gradcam (which equals CAM where the head is a global pool then a linear layer)"
        )


@register_method("cam", needs_gradients=True, check=_check)
def cam(ctx: MethodContext):
    """CAM: channels weighted by the classifier's weights of the target class (a global-pool-then-linear head)."""
    activations, grads = ctx.activations, ctx.gradients
    assert grads is not None  # needs_gradients: the pass gives them
    weights = classifier_rows(ctx)
    spread = weights.reshape(*weights.shape, *([1] * (activations.dim() - 2)))
    return (spread * activations).sum(dim=1).clamp(min=0)


def classifier_rows(ctx: MethodContext):
    """Per image, the row of the classifier's weight (N, C) that the target's gradient at the
    layer is, spread evenly over its positions (zeros for an image whose gradient is zero);
    raises NoMap where no linear layer's row is (the layer's report says why)."""
    import torch

    activations, grads = ctx.activations, ctx.gradients
    assert grads is not None
    channels, positions = activations.shape[1], activations[0, 0].numel()
    scaled = grads.flatten(2).double() * positions  # (N, C, P): w[class, c] at every position under a GAP-linear head
    linears = [m for m in (ctx.model.modules() if ctx.model is not None else ()) if isinstance(m, torch.nn.Linear)]
    rows = torch.zeros(activations.shape[:2], dtype=activations.dtype, device=activations.device)
    for n in range(len(activations)):
        if not bool(scaled[n].any()):
            continue  # nothing reaches this layer for this image: its map is zero, as Grad-CAM's
        found = _matching_row(scaled[n], [m for m in linears if m.in_features == channels])
        if found is None:
            raise NoMap(_refusal(ctx, channels))
        rows[n] = found.to(rows.dtype)
    return rows


def _matching_row(scaled, linears):
    """The row of one of ``linears`` that ``scaled`` (C, P) equals at every position, or ``None``."""
    for linear in linears:
        weight = linear.weight.detach().to(device=scaled.device, dtype=scaled.dtype)
        nearest = int((weight - scaled[:, 0]).abs().amax(dim=1).argmin())
        row = weight[nearest]
        if float((scaled - row[:, None]).abs().max()) <= _TOLERANCE * max(float(row.abs().max()), 1e-12):
            return row
    return None


def _refusal(ctx: MethodContext, channels: int) -> str:
    return (
        f"{arg('cam', 'cam')}: the target's score is not one linear layer (of {channels} inputs) applied to the global "
        f"average pool of {ctx.layer}, so CAM is not defined here; choose gradcam (which equals CAM where it is) or the "
        "last feature map before the global pool"
    )
