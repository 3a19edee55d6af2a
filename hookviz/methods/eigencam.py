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

__all__ = ["eigencam", "signed_projection", "agreeing_sign"]


@register_method("eigencam", needs_gradients=False, class_specific=False)
def eigencam(ctx: MethodContext):
    """Eigen-CAM: the first principal component of the activations, signed to agree with their mean."""
    return signed_projection(ctx.activations).clamp(min=0)


def signed_projection(maps):
    """The first principal component of ``maps`` (N, C, *spatial), per image, before the ReLU:
    the positions (rows) projected on the first right singular vector of the centred
    (positions, channels) matrix, signed by ``agreeing_sign``; (N, *spatial) in ``maps``' dtype."""
    import torch

    count, spatial = maps.shape[0], maps.shape[2:]
    positions = torch.nan_to_num(maps.flatten(2).transpose(1, 2).double())  # (N, P, C)
    centred = positions - positions.mean(dim=1, keepdim=True)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    projection = (centred @ vh[:, 0, :, None])[..., 0]  # (N, P)
    return (projection * agreeing_sign(projection, positions)[:, None]).reshape(count, *spatial).to(maps.dtype)


def agreeing_sign(projection, positions):
    """Per image, +1 or -1: the sign under which ``projection`` (N, P) correlates positively
    with the mean over channels of ``positions`` (N, P, C), the matrix it was made from."""
    import torch

    mean = positions.mean(dim=2)
    agreement = (projection * (mean - mean.mean(dim=1, keepdim=True))).sum(dim=1)
    return torch.where(agreement < 0, -1.0, 1.0).to(projection.dtype)
