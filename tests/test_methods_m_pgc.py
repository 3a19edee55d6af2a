"""pytorch-grad-cam 1.5.7's further layer methods, each against its own class on the same model
and batch: Grad-CAM element-wise, Eigen-Grad-CAM, KPCA-CAM, FEM, Random-CAM and ShapleyCAM
(whose Hessian-vector products the pass makes on request, ``MethodContext.hessian_vector``).

Raw maps are compared where pytorch-grad-cam's ``get_cam_image`` can be read (max relative
difference < 1e-3); the maps of a principal component up to the sign its SVD or eigensolver
leaves free. Where pytorch-grad-cam is wrong, the test shows it (docs/methods.md says so).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import hookviz

from .cli_helpers import hookviz_run
from .conftest import SAMPLES
from .test_method_references import POSITIVE, correlation, ours, relative


@pytest.fixture(scope="module")
def resnet18():
    import torchvision

    torch.manual_seed(0)  # the weights of tests/test_method_references.py
    return torchvision.models.resnet18(weights=None).eval()


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(1)
    return torch.randn(2, 3, 112, 112)


def reference(model, batch, layer: str, reference: str, target: int, **kwargs):
    """pytorch-grad-cam's raw map (``get_cam_image``, before its ReLU, resizing and scaling), and
    the activations and gradients it was made of, as numpy."""
    import pytorch_grad_cam
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    seen = []
    with getattr(pytorch_grad_cam, reference)(model=model, target_layers=[model.get_submodule(layer)], **kwargs) as cam:
        original = cam.get_cam_image

        def spy(input_tensor, target_layer, targets, activations, grads, eigen_smooth=False):
            seen.append((original(input_tensor, target_layer, targets, activations, grads, eigen_smooth), activations, grads))
            return seen[-1][0]

        cam.get_cam_image = spy
        cam(input_tensor=batch, targets=[ClassifierOutputTarget(target)] * len(batch))
    raw, activations, grads = seen[0]
    as_numpy = [x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x for x in (activations, grads)]
    return np.asarray(raw), *as_numpy


def test_gradcam_elementwise_equals_pytorch_grad_cams(resnet18, batch):
    mine = ours(resnet18, batch, "layer3", "gradcam-elementwise", POSITIVE)
    raw, activations, grads = reference(resnet18, batch, "layer3", "GradCAMElementWise", POSITIVE)
    theirs = np.maximum(raw, 0)
    assert mine.shape == theirs.shape == (2, 7, 7) and theirs.max() > 0
    assert relative(mine, theirs) < 1e-3
    hires = np.maximum((grads * activations).sum(1), 0)  # the ReLU inside the sum makes it another map than HiResCAM's
    assert relative(mine, hires) > 0.05


def _signed_like_hookviz(projections: np.ndarray, matrices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``projections`` (N, *spatial) signed to agree with the mean over channels of ``matrices``
    (N, C, *spatial), as hookviz signs a principal component; and each one's agreement before."""
    agreement = np.array([correlation(p, m.mean(0)) for p, m in zip(projections, matrices)])
    return np.where(agreement.reshape(-1, *[1] * (projections.ndim - 1)) < 0, -projections, projections), agreement


@pytest.mark.parametrize("layer", ["layer4", "layer2"])
def test_eigengradcam_equals_pytorch_grad_cams_up_to_the_sign_it_leaves_to_the_svd(resnet18, batch, layer):
    mine = ours(resnet18, batch, layer, "eigengradcam", POSITIVE)
    raw, activations, grads = reference(resnet18, batch, layer, "EigenGradCAM", POSITIVE)
    expected, _ = _signed_like_hookviz(raw, grads * activations)
    assert np.abs(raw).max() > 0 and mine.max() > 0
    assert relative(mine, np.maximum(expected, 0)) < 1e-3
    # the same sign for the same matrix negated: the sign follows the evidence, not the solver
    from hookviz.methods.eigencam import signed_projection

    product = torch.from_numpy(grads * activations)
    np.testing.assert_allclose(signed_projection(-product).numpy(), -signed_projection(product).numpy(), rtol=1e-5, atol=1e-7)


def test_pytorch_grad_cams_eigengradcam_keeps_the_half_the_svd_returns_even_against_the_evidence(resnet18, batch):
    """pytorch-grad-cam's sign is the SVD's: at layer2 both photos' maps correlate negatively
    with the products they decompose (-0.74, -0.58), so its ReLU keeps where the evidence is
    against the class; hookviz's map is the other half."""
    raw, activations, grads = reference(resnet18, batch, "layer2", "EigenGradCAM", POSITIVE)
    _, agreement = _signed_like_hookviz(raw, grads * activations)
    assert (agreement < -0.3).all()


def test_pytorch_grad_cams_kpca_cam_maps_where_the_layer_is_least_active(resnet18, batch):
    """scikit-learn signs the eigenvector so that its largest entry is positive: on these
    photos at layer4 pytorch-grad-cam's map then correlates at -0.86 and -0.90 with the mean
    activation, and its ReLU keeps the least active half; hookviz's map agrees with it."""
    raw, activations, _ = reference(resnet18, batch, "layer4", "KPCA_CAM", POSITIVE)
    _, agreement = _signed_like_hookviz(raw, activations)
    assert (agreement < -0.5).all()
    mine = ours(resnet18, batch, "layer4", "kpca-cam", POSITIVE)
    assert all(correlation(hookviz_map, a.mean(0)) > 0.3 for hookviz_map, a in zip(mine, activations))


KPCA_CASES = [
    ("layer4", {}, {}),  # the default: sigmoid, gamma 1/channels
    ("layer3", {"kpca_kernel": "rbf", "kpca_gamma": 0.01}, {"kernel": "rbf", "gamma": 0.01}),
    ("layer3", {"kpca_kernel": "poly"}, {"kernel": "poly"}),
    ("layer3", {"kpca_kernel": "cosine"}, {"kernel": "cosine"}),
]


@pytest.mark.parametrize("layer, settings, theirs", KPCA_CASES)
def test_kpca_cam_equals_pytorch_grad_cams_up_to_the_sign(resnet18, batch, layer, settings, theirs):
    from hookviz import Explainer, LayerOptions, TargetOptions
    from hookviz.methods.kpca_cam import KPCAOptions

    mine = _ours_with(resnet18, batch, layer, "kpca-cam", TargetOptions, Explainer, LayerOptions, KPCAOptions(**settings))
    raw, activations, _ = reference(resnet18, batch, layer, "KPCA_CAM", POSITIVE, **theirs)
    expected, _ = _signed_like_hookviz(raw, activations)
    assert mine.max() > 0
    assert relative(mine, np.maximum(expected, 0)) < 1e-3


def _ours_with(model, batch, layer, method, TargetOptions, Explainer, LayerOptions, *groups):
    """hookviz's raw maps with the method's option groups set (``TargetOptions.settings``)."""
    from PIL import Image

    from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
    from hookviz.models.loading import LoadedModel

    side = batch.shape[-1]
    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((side, side, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("resnet18", model, "seeded", None, Preprocessing())
    target = TargetOptions(target=str(POSITIVE), cam=method, settings=groups)
    explainer = Explainer.create(loaded, layers=LayerOptions((layer,)), target=target)
    return np.stack([result.layers[0].cam for result in explainer.explain_batch(images)])


@pytest.mark.slow
def test_kpca_cam_equals_pytorch_grad_cams_above_200_positions_where_it_moves_numpys_random_state(resnet18, batch):
    """Above 200 positions scikit-learn solves with ARPACK from a start drawn from numpy's
    global random state: the same component, but the caller's random state moves."""
    mine = ours(resnet18, batch[:1], "layer1", "kpca-cam", POSITIVE)
    state = np.random.get_state()[1].copy()
    raw, activations, _ = reference(resnet18, batch[:1], "layer1", "KPCA_CAM", POSITIVE)
    assert not np.array_equal(np.random.get_state()[1], state)
    assert raw.shape == (1, 28, 28)
    expected, _ = _signed_like_hookviz(raw, activations)
    assert relative(mine, np.maximum(expected, 0)) < 1e-3


@pytest.mark.parametrize("k", [2.0, 1.0])
def test_fem_equals_pytorch_grad_cams(resnet18, batch, k):
    from hookviz import Explainer, LayerOptions, TargetOptions
    from hookviz.methods.fem import FEMOptions

    mine = _ours_with(resnet18, batch, "layer3", "fem", TargetOptions, Explainer, LayerOptions, FEMOptions(fem_k=k))
    raw, _, _ = reference(resnet18, batch, "layer3", "FEM", POSITIVE, k=k)
    theirs = np.maximum(raw, 0)
    assert theirs.max() > 0
    assert relative(mine, theirs) < 1e-3


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_random_cam_is_pytorch_grad_cams_formula_seeded_apart_from_the_global_random_state(resnet18, batch, monkeypatch):
    from hookviz import Explainer, LayerOptions, TargetOptions
    from hookviz.methods.random_cam import RandomCAMOptions, random_weights

    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    first = _ours_with(resnet18, batch, "layer3", "random-cam", TargetOptions, Explainer, LayerOptions, RandomCAMOptions(7))
    again = _ours_with(resnet18, batch, "layer3", "random-cam", TargetOptions, Explainer, LayerOptions, RandomCAMOptions(7))
    other = _ours_with(resnet18, batch, "layer3", "random-cam", TargetOptions, Explainer, LayerOptions, RandomCAMOptions(8))
    assert torch.equal(torch.get_rng_state(), torch_state) and np.array_equal(np.random.get_state()[1], numpy_state)
    np.testing.assert_array_equal(first, again)
    assert first.max() > 0 and correlation(first, other) < 0.9
    # pytorch-grad-cam's map with its uniform draws replaced by seed 7's weights is hookviz's
    weights = random_weights(7, 256).numpy()

    def drawn(low, high, size):
        assert (low, high) == (-1, 1) and size == (2, 256)
        return np.tile(weights, (2, 1))

    monkeypatch.setattr(np.random, "uniform", drawn)
    raw, _, _ = reference(resnet18, batch, "layer3", "RandomCAM", POSITIVE)
    assert relative(first, np.maximum(raw, 0)) < 1e-3


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_pytorch_grad_cams_random_cam_moves_numpys_global_random_state(resnet18, batch):
    state = np.random.get_state()[1].copy()
    first, _, _ = reference(resnet18, batch, "layer3", "RandomCAM", POSITIVE)
    second, _, _ = reference(resnet18, batch, "layer3", "RandomCAM", POSITIVE)
    assert not np.array_equal(np.random.get_state()[1], state) and not np.allclose(first, second)


class SmoothNet(nn.Module):
    """Convolutions with SiLU after the recorded layer, so the score's Hessian there is not zero."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.SiLU()
        )
        self.head = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, classes, 1))

    def forward(self, x):
        return self.head(self.features(x)).mean(dim=(2, 3))


def test_shapley_cam_equals_pytorch_grad_cams_where_the_hessian_counts():
    torch.manual_seed(3)
    model, batch = SmoothNet().eval(), torch.randn(2, 3, 16, 16)
    target = int(model(batch).mean(0).argmax())
    mine = ours(model, batch, "features", "shapley-cam", target)
    raw, _, _ = reference(model, batch, "features", "ShapleyCAM", target)
    theirs = np.maximum(raw, 0)
    gradcam = ours(model, batch, "features", "gradcam", target)
    assert theirs.max() > 0 and relative(gradcam, theirs) > 0.01  # the second-order term changes the map
    assert relative(mine, theirs) < 1e-3


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_shapley_cam_is_gradcam_in_a_network_piecewise_linear_after_the_layer(resnet18, batch):
    mine = ours(resnet18, batch, "layer3", "shapley-cam", POSITIVE)
    raw, _, _ = reference(resnet18, batch, "layer3", "ShapleyCAM", POSITIVE)
    gradcam = ours(resnet18, batch, "layer3", "gradcam", POSITIVE)
    assert gradcam.max() > 0
    assert relative(mine, gradcam) < 1e-5 and relative(mine, np.maximum(raw, 0)) < 1e-3


def test_hessian_vector_is_the_hessian_of_each_images_score_times_the_vector(registries_restored):
    """``ctx.hessian_vector`` against torch's own ``hvp`` of the model after the layer."""
    from hookviz.methods import register_method

    given = []

    @register_method("spy-hessian", needs_hessian=True)
    def spy(ctx):
        vectors = torch.randn(ctx.activations.shape, generator=torch.Generator().manual_seed(0))
        given.append((ctx.activations, vectors, *ctx.hessian_vector(vectors), ctx.gradients))
        return ctx.activations.sum(1).clamp(min=0)

    torch.manual_seed(4)
    model, batch = SmoothNet().eval(), torch.randn(2, 3, 16, 16)
    ours(model, batch, "features", "spy-hessian", 1)
    ((activations, vectors, own_gradients, products, gradients),) = given
    torch.testing.assert_close(own_gradients, gradients, rtol=1e-4, atol=1e-7)  # a classifier's score: one in both
    for n in range(2):
        tail = lambda a: model.head(a[None]).mean(dim=(2, 3))[0, 1]  # noqa: E731
        _, expected = torch.autograd.functional.hvp(tail, activations[n], vectors[n])
        assert expected.abs().max() > 0
        torch.testing.assert_close(products[n], expected, rtol=1e-4, atol=1e-6)
    assert all(p.requires_grad for p in model.parameters()) and gradients is not None  # the caller's flags put back


class SmoothSegmenter(nn.Module):
    """torchvision's segmentation interface at a toy's size, with SiLU after the recorded layer."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU())
        self.classifier = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 3, 1))

    def forward(self, x):
        return {"out": self.classifier(self.features(x))}


class _Out(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def test_shapley_cam_of_a_segmentation_equals_pytorch_grad_cams():
    from pytorch_grad_cam import ShapleyCAM
    from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget

    torch.manual_seed(5)
    model, x = SmoothSegmenter().eval(), torch.randn(3, 24, 24)
    result = hookviz.explain(model, x, layers=["features"], cam="shapley-cam")
    assert result.task == "segment"
    mask = (result.prediction.mask == result.target.index).astype(np.float32)
    assert 0 < mask.mean() < 1
    raw = []
    with ShapleyCAM(model=_Out(model), target_layers=[model.features]) as cam:
        original = cam.get_cam_image
        cam.get_cam_image = lambda *args, **kwargs: raw.append(original(*args, **kwargs)) or raw[-1]
        cam(input_tensor=x[None], targets=[SemanticSegmentationTarget(result.target.index, mask)])
    theirs = np.maximum(raw[0][0], 0)
    assert theirs.max() > 0
    # hookviz's score is the mean logit over the class's pixels, pytorch-grad-cam's target their sum
    assert relative(result.layers[0].cam * mask.sum(), theirs) < 1e-3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--cam", "kpca-cam", "--kpca-kernel", "laplace"], "--kpca-kernel"),
        (["--cam", "fem", "--fem-k", "-1"], "--fem-k"),
        (["--cam", "gradcam", "--random-cam-seed", "3"], "--random-cam-seed"),
    ],
)
def test_bad_settings_of_these_methods_are_refused_in_one_line(tmp_path, args, message):
    result = hookviz_run(SAMPLES / "cat.png", *args, out=tmp_path / "out")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


class _SiLUGradient(torch.autograd.Function):
    """SiLU's backward as a function whose own backward raises, as torchvision's roi_align's does."""

    @staticmethod
    def forward(ctx, grad, x):
        sigmoid = torch.sigmoid(x)
        return grad * sigmoid * (1 + x * (1 - sigmoid))

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("double backwards on silu not supported")


class _OnceSiLU(torch.autograd.Function):
    """SiLU whose backward cannot be differentiated again."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.silu(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _SiLUGradient.apply(grad, x)


class _OnceDifferentiable(nn.Module):
    def forward(self, x):
        return _OnceSiLU.apply(x)


def test_hessian_vector_falls_back_to_a_central_difference_where_an_op_has_no_double_backward(registries_restored):
    """A detector's roi_align has no double backward: the product is then the central difference
    of two gradients, close to the exact one of the same network with torch's own SiLU."""
    from hookviz.methods import register_method

    given = []

    @register_method("spy-hessian-once", needs_hessian=True)
    def spy(ctx):
        given.append(ctx.hessian_vector(ctx.activations)[1])
        return ctx.activations.sum(1).clamp(min=0)

    torch.manual_seed(4)
    model, batch = SmoothNet().eval(), torch.randn(2, 3, 16, 16)
    ours(model, batch, "features", "spy-hessian-once", 1)
    model.head[1] = _OnceDifferentiable()
    ours(model, batch, "features", "spy-hessian-once", 1)
    exact, difference = given
    assert exact.abs().max() > 0
    assert relative(difference.numpy(), exact.numpy()) < 1e-3


def test_kpca_cams_lanczos_above_400_positions_finds_eighs_top_eigenpair():
    from hookviz.methods.kpca_cam import kernel_matrix, top_eigenpair

    rows = torch.randn(1, 600, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    kernel = kernel_matrix(rows - rows.mean(1, keepdim=True), "sigmoid", 1 / 6)[0]
    kernel = kernel - kernel.mean(0, keepdim=True) - kernel.mean(1, keepdim=True) + kernel.mean()
    values, vectors = torch.linalg.eigh(kernel)
    value, vector = top_eigenpair(kernel)
    assert abs(float(value - values[-1])) <= 1e-9 * float(values[-1])
    assert abs(float(vector @ vectors[:, -1])) > 1 - 1e-9
