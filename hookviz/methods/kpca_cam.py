"""KPCA-CAM (Karmani et al. 2024), as pytorch-grad-cam's ``KPCA_CAM`` computes it: Eigen-CAM
with kernel PCA in place of PCA, so the component may follow a non-linear structure of the
activations. No gradient, no target: the same map for every class.

    X = the activations as (positions, channels), each channel's mean over positions removed
    K = k(X, X), centred in feature space: K - 1K - K1 + 1K1 (1 = ones / positions)
    map = ReLU(sqrt(l_1) u_1), (l_1, u_1) K's largest eigenvalue and its unit eigenvector

The kernel ``k`` (``--kpca-kernel``) is scikit-learn ``KernelPCA``'s: ``sigmoid`` (the default,
``tanh(gamma <x, y> + coef0)``), ``rbf`` (``exp(-gamma |x - y|^2)``), ``poly`` (``(gamma <x, y> +
coef0)^degree``), ``cosine`` or ``linear`` (which is Eigen-CAM); ``--kpca-gamma`` 0 means
1/channels, as scikit-learn's ``gamma=None``; ``coef0`` 1 and ``degree`` 3 are its defaults, which
pytorch-grad-cam does not change. hookviz computes it with torch, no scikit-learn: ``eigh`` of
the (P, P) matrix up to 400 positions, Lanczos iterations from a seeded start above (``eigh``
of a 48x48 map's 2304x2304 matrix takes 14 s on one thread); scikit-learn switches to ARPACK,
started from numpy's global random state, above 200 positions.

An eigenvector's sign is arbitrary; scikit-learn makes its largest entry positive, which says
nothing about the map. As ``eigencam`` does, hookviz takes the sign under which the projection
correlates positively with the mean activation over channels. The sigmoid kernel is not
positive definite: where the largest eigenvalue is not positive the map is zero (scikit-learn
raises).
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.methods.base import MethodContext, register_method
from hookviz.methods.eigencam import agreeing_sign
from hookviz.options.declared import check_values, option

__all__ = ["kpca_cam", "KPCAOptions", "KPCA_KERNELS", "kernel_matrix", "top_eigenpair"]

#: The kernels of ``--kpca-kernel`` (scikit-learn ``KernelPCA``'s, less ``precomputed``).
KPCA_KERNELS = ("sigmoid", "rbf", "poly", "cosine", "linear")
_COEF0, _DEGREE = 1.0, 3  # scikit-learn's defaults, which pytorch-grad-cam keeps
#: Above this many positions the top eigenpair comes from Lanczos iterations, not a full eigh
#: (a 48x48 map: 14 s for eigh of 2304x2304 on one thread here, under 1 s for Lanczos).
_DENSE_UP_TO = 400
_KRYLOV = 32


@dataclass(frozen=True)
class KPCAOptions:
    """KPCA-CAM's settings (``--kpca-kernel``, ``--kpca-gamma``; ``kpca_kernel=``, ``kpca_gamma=``)."""

    kpca_kernel: str = option(
        "sigmoid",
        help="KPCA-CAM: the kernel of its kernel PCA (scikit-learn KernelPCA's: sigmoid, rbf, poly, cosine, linear).",
        choices=KPCA_KERNELS,
    )
    kpca_gamma: float = option(
        0.0,
        help="KPCA-CAM: the kernel's gamma (sigmoid, rbf, poly); 0 means 1/channels, as scikit-learn's default.",
        low=0.0,
        high=1e6,
    )

    def __post_init__(self):
        check_values(self)


@register_method("kpca-cam", needs_gradients=False, class_specific=False, options=KPCAOptions)
def kpca_cam(ctx: MethodContext):
    """KPCA-CAM: the first kernel principal component of the activations, signed to agree with their mean."""
    import torch

    settings = ctx.settings if ctx.settings is not None else KPCAOptions()
    activations = ctx.activations
    count, spatial = activations.shape[0], activations.shape[2:]
    positions = torch.nan_to_num(activations.flatten(2).transpose(1, 2).double())  # (N, P, C)
    centred = positions - positions.mean(dim=1, keepdim=True)
    kernel = kernel_matrix(centred, settings.kpca_kernel, settings.kpca_gamma or 1.0 / activations.shape[1])
    kernel = kernel - kernel.mean(dim=1, keepdim=True) - kernel.mean(dim=2, keepdim=True) + kernel.mean(dim=(1, 2), keepdim=True)
    pairs = [top_eigenpair(matrix) for matrix in kernel]
    projection = torch.stack([vector * value.clamp(min=0).sqrt() for value, vector in pairs])  # (N, P)
    signed = projection * agreeing_sign(projection, positions)[:, None]
    return signed.reshape(count, *spatial).clamp(min=0).to(activations.dtype)


def kernel_matrix(rows, kernel: str, gamma: float):
    """k(x_i, x_j) for every pair of ``rows`` (N, P, C): (N, P, P), as scikit-learn's pairwise kernels."""
    import torch

    if kernel == "rbf":
        return torch.exp(-gamma * torch.cdist(rows, rows).square())
    if kernel == "cosine":
        norms = rows.norm(dim=-1, keepdim=True)
        rows = rows / torch.where(norms == 0, 1.0, norms)
    inner = rows @ rows.transpose(1, 2)
    if kernel == "sigmoid":
        return torch.tanh(gamma * inner + _COEF0)
    if kernel == "poly":
        return (gamma * inner + _COEF0) ** _DEGREE
    return inner  # linear, cosine


def top_eigenpair(matrix):
    """The largest eigenvalue of the symmetric ``matrix`` (P, P) and its unit eigenvector: by
    ``eigh`` up to ``_DENSE_UP_TO`` rows, else by Lanczos with full reorthogonalisation from a
    seeded start (its own generator), restarted from its Ritz vector until the residual is
    below 1e-10 of the matrix's size."""
    import torch

    if len(matrix) <= _DENSE_UP_TO:
        values, vectors = torch.linalg.eigh(matrix)
        return values[-1], vectors[:, -1]
    scale = matrix.abs().sum(1).max().clamp(min=torch.finfo(matrix.dtype).tiny)
    start = torch.randn(len(matrix), generator=torch.Generator().manual_seed(0), dtype=matrix.dtype).to(matrix.device)
    for _ in range(20):
        basis = _krylov_basis(matrix, start, scale)
        values, vectors = torch.linalg.eigh(basis.T @ (matrix @ basis))
        value, vector = values[-1], basis @ vectors[:, -1]
        if (matrix @ vector - value * vector).norm() <= 1e-10 * scale:
            break
        start = vector
    return value, vector / vector.norm()


def _krylov_basis(matrix, start, scale):
    """An orthonormal basis of the Krylov space of ``matrix`` from ``start``, ``_KRYLOV`` columns at most."""
    import torch

    columns = [start / start.norm()]
    for _ in range(min(_KRYLOV, len(matrix)) - 1):
        basis = torch.stack(columns, 1)
        following = matrix @ columns[-1]
        for _ in range(2):  # twice: full reorthogonalisation
            following = following - basis @ (basis.T @ following)
        size = following.norm()
        if size <= 1e-12 * scale:  # the space is invariant: its Ritz pairs are exact
            break
        columns.append(following / size)
    return torch.stack(columns, 1)
