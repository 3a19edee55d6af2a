"""Eigen-CAM (Muhammad and Yeasin 2020): the first principal component of the layer's
activations, with no gradient and no target, so it is the same map for every class.

    X = the activations as (positions, channels), each channel's mean over positions removed
    map = ReLU(X v_1), v_1 the first right singular vector of X

A singular vector's sign is arbitrary (``v`` and ``-v`` are both one), and the ReLU keeps
one half of the projection, so the sign decides the map. hookviz takes the sign under which
the projection correlates positively with the mean activation over channels: the map then
lies where the layer is most active. pytorch-grad-cam's EigenCAM keeps whichever sign the
SVD returns, so its map may be the other half.
"""

from __future__ import annotations

from hookviz.methods.base import MethodContext, register_method

__all__ = ["eigencam"]


@register_method("eigencam", needs_gradients=False, class_specific=False)
def eigencam(ctx: MethodContext):
    """Eigen-CAM: the first principal component of the activations, signed to agree with their mean."""
    import torch

    activations = ctx.activations
    count, spatial = activations.shape[0], activations.shape[2:]
    positions = torch.nan_to_num(activations.flatten(2).transpose(1, 2).double())  # (N, P, C)
    centred = positions - positions.mean(dim=1, keepdim=True)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    projection = (centred @ vh[:, 0, :, None])[..., 0]  # (N, P)
    mean = positions.mean(dim=2)
    agreement = (projection * (mean - mean.mean(dim=1, keepdim=True))).sum(dim=1)
    sign = torch.where(agreement < 0, -1.0, 1.0).to(projection.dtype)
    return (projection * sign[:, None]).reshape(count, *spatial).clamp(min=0).to(activations.dtype)
