"""Each method of ``hookviz.methods`` against an independent implementation, on one
random-weight resnet18 and one seeded 112-pixel batch: pytorch-grad-cam's and captum's.

Where a peer normalises or resizes its map, the maps correlate at 0.999 or more; where its
raw map can be read (pytorch-grad-cam's ``get_cam_image``), the raw maps differ by less than
1e-3 of their largest value. Where a peer is wrong, the test shows it (docs/methods.md says so).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torch import nn

from hookviz import Explainer, LayerOptions, TargetOptions
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.models.loading import LoadedModel

SIDE = 112
POSITIVE = 8  # a class whose logit is above zero in both photos under these weights
MIXED = 126  # a class whose logit is above zero in one photo and below in the other


@pytest.fixture(scope="module")
def resnet18():
    torch.manual_seed(0)  # fixed weights: the same for hookviz and the references
    return torchvision.models.resnet18(weights=None).eval()


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(1)
    return torch.randn(2, 3, SIDE, SIDE)


def ours(model, batch, layer: str, method: str, target: int) -> np.ndarray:
    """hookviz's raw maps of ``batch``, one per photo."""
    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("resnet18", model, "seeded", None, Preprocessing())
    explainer = Explainer.create(loaded, layers=LayerOptions((layer,)), target=TargetOptions(target=str(target), cam=method))
    return np.stack([result.layers[0].cam for result in explainer.explain_batch(images)])


def pytorch_grad_cam(model, batch, layer: str, reference: str, target: int) -> tuple[np.ndarray, np.ndarray]:
    """pytorch-grad-cam's public result (min-max scaled, resized to the input) and its raw
    map (``get_cam_image``, before the ReLU that its ``compute_cam_per_layer`` applies)."""
    import pytorch_grad_cam
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    raw = []
    with getattr(pytorch_grad_cam, reference)(model=model, target_layers=[model.get_submodule(layer)]) as cam:
        original = cam.get_cam_image
        cam.get_cam_image = lambda *args, **kwargs: raw.append(original(*args, **kwargs)) or raw[-1]
        scaled = cam(input_tensor=batch, targets=[ClassifierOutputTarget(target)] * len(batch))
    return scaled, raw[0]


def relative(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def scaled_like_pytorch_grad_cam(maps: np.ndarray) -> np.ndarray:
    """pytorch-grad-cam's post-processing: min-max per image, then resized to the input."""
    from pytorch_grad_cam.utils.image import scale_cam_image

    return scale_cam_image(maps, (SIDE, SIDE))


def test_the_chosen_classes_have_the_logits_the_tests_need(resnet18, batch):
    with torch.no_grad():
        logits = resnet18(batch)
    assert (logits[:, POSITIVE] > 0.5).all()
    assert logits[0, MIXED] * logits[1, MIXED] < 0


@pytest.mark.parametrize("method, reference", [("xgradcam", "XGradCAM"), ("hirescam", "HiResCAM")])
def test_gradient_methods_equal_pytorch_grad_cam(resnet18, batch, method, reference):
    mine = ours(resnet18, batch, "layer4", method, POSITIVE)
    scaled, raw = pytorch_grad_cam(resnet18, batch, "layer4", reference, POSITIVE)
    theirs = np.maximum(raw, 0)
    assert mine.shape == theirs.shape == (2, 4, 4) and theirs.max() > 0
    assert relative(mine, theirs) < 1e-3
    for hookviz_map, public in zip(scaled_like_pytorch_grad_cam(mine), scaled):
        assert correlation(hookviz_map, public) >= 0.999


def _mean_agreement(model, batch, layer: str) -> np.ndarray:
    """Per photo, the correlation of pytorch-grad-cam's signed projection with the layer's mean activation."""
    from pytorch_grad_cam.utils.svd_on_activations import get_2d_projection

    seen = []
    handle = model.get_submodule(layer).register_forward_hook(
        lambda _m, _i, output: seen.append(output.clone())
    )  # an in-place add follows
    try:
        with torch.no_grad():
            model(batch)
    finally:
        handle.remove()
    activations = seen[0].numpy()
    projections = get_2d_projection(activations)
    return projections, np.array([correlation(p, a.mean(0)) for p, a in zip(projections, activations)])


@pytest.mark.parametrize("layer", ["layer4", "layer1.0"])
def test_eigencam_equals_pytorch_grad_cams_up_to_the_sign_it_leaves_to_the_svd(resnet18, batch, layer):
    mine = ours(resnet18, batch, layer, "eigencam", POSITIVE)
    projections, agreement = _mean_agreement(resnet18, batch, layer)
    for hookviz_map, projection, agrees in zip(mine, projections, agreement):
        # hookviz's sign is the one under which the map agrees with the mean activation
        expected = np.maximum(projection if agrees > 0 else -projection, 0)
        assert relative(hookviz_map, expected) < 1e-3
    if layer == "layer1.0":
        # pytorch-grad-cam keeps the SVD's sign: for two noise photos alike, one map is where
        # the layer is most active and the other where it is least (LAPACK's choice here).
        assert agreement.min() < -0.9 and agreement.max() > 0.9
    classes = ours(resnet18, batch, layer, "eigencam", MIXED)
    np.testing.assert_array_equal(classes, mine)  # no target: the same map for every class


@pytest.mark.slow
def test_scorecam_equals_pytorch_grad_cams_but_for_its_upsampling(resnet18, batch, monkeypatch):
    import torch.nn.functional as F

    from hookviz.methods import scorecam

    scaled, raw = pytorch_grad_cam(resnet18, batch, "layer1", "ScoreCAM", POSITIVE)
    theirs = np.maximum(raw, 0)
    mine = ours(resnet18, batch, "layer1", "scorecam", POSITIVE)
    # hookviz upsamples each mask as the paper's code and torch-cam do (bilinear, corners not
    # aligned); pytorch-grad-cam aligns the corners (UpsamplingBilinear2d): the maps correlate
    for hookviz_map, public in zip(scaled_like_pytorch_grad_cam(mine), scaled):
        assert correlation(hookviz_map, public) >= 0.999
    # ... and with its upsampling, they are equal
    monkeypatch.setattr(
        scorecam, "upsampled", lambda maps, size: F.interpolate(maps, size=tuple(size), mode="bilinear", align_corners=True)
    )
    aligned = ours(resnet18, batch, "layer1", "scorecam", POSITIVE)
    assert relative(aligned, theirs) < 1e-3


class Negated(nn.Module):
    """The model's logits times -1, sharing its modules."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return -self.model(x)


@pytest.mark.slow
def test_ablationcam_equals_pytorch_grad_cams_where_the_score_is_positive(resnet18, batch):
    scaled, raw = pytorch_grad_cam(resnet18, batch, "layer1", "AblationCAM", MIXED)
    theirs = np.maximum(raw, 0)
    mine = ours(resnet18, batch, "layer1", "ablationcam", MIXED)
    with torch.no_grad():
        positive = int(resnet18(batch)[:, MIXED].argmax())
    negative = 1 - positive
    assert relative(mine[positive], theirs[positive]) < 1e-3
    assert correlation(scaled_like_pytorch_grad_cam(mine)[positive], scaled[positive]) >= 0.999
    # Where the logit is below zero, pytorch-grad-cam divides by it (the paper's (S - S_c) / S)
    # and every weight flips: its map is hookviz's map of the negated logit, what lowers the score.
    assert correlation(mine[negative], theirs[negative]) < 0.5
    lowering = ours(Negated(resnet18).eval(), batch, "model.layer1", "ablationcam", MIXED)
    assert relative(lowering[negative], theirs[negative]) < 1e-3


# ----------------------------------------------------------------------------- maps at the input's resolution


def pixel_maps(model, batch, layer: str, method: str, target: int, **options) -> np.ndarray:
    """hookviz's raw (C, H, W) maps of ``batch`` by an input-resolution method, one per photo."""
    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("resnet18", model, "seeded", None, Preprocessing())
    target_options = TargetOptions(target=str(target), cam=method, **options)
    results = Explainer.create(loaded, layers=LayerOptions((layer,)), target=target_options).explain_batch(images)
    return np.stack([result.pixel_maps[method].map for result in results])


def _relus(model: nn.Module) -> list[tuple[str, nn.Module, bool]]:
    return [(name, module, module.inplace) for name, module in model.named_modules() if isinstance(module, nn.ReLU)]


def test_guided_backprop_equals_pytorch_grad_cams_and_leaves_the_model_as_it_was(resnet18, batch):
    import copy

    from pytorch_grad_cam import GuidedBackpropReLUModel

    before = _relus(resnet18)
    mine = pixel_maps(resnet18, batch, "layer4", "guided-backprop", POSITIVE)
    assert _relus(resnet18) == before and all(not m._forward_hooks for _, m, _ in before)
    theirs_model = copy.deepcopy(resnet18)
    theirs = np.stack(
        [GuidedBackpropReLUModel(theirs_model, device="cpu")(photo[None], POSITIVE).transpose(2, 0, 1) for photo in batch]
    )
    assert mine.shape == theirs.shape == (2, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3
    # pytorch-grad-cam swaps the model's ReLUs for its own and back: what comes back is one
    # new ReLU shared by every place, no longer in place
    after = _relus(theirs_model)
    assert len({id(module) for _, module, _ in after}) == 1 and not any(inplace for _, _, inplace in after)
    assert all(inplace for _, _, inplace in before)


def test_guided_gradcam_equals_captums_with_the_same_upsampling(resnet18, batch):
    from captum.attr import GuidedGradCam

    mine = pixel_maps(resnet18, batch, "layer4", "guided-gradcam", POSITIVE)
    theirs = GuidedGradCam(resnet18, resnet18.layer4).attribute(batch, target=POSITIVE, interpolate_mode="bilinear")
    theirs = theirs.detach().numpy()
    assert mine.shape == theirs.shape == (2, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3


@pytest.mark.slow
def test_integrated_gradients_equal_captums_with_its_gauss_legendre_rule(resnet18, batch):
    """hookviz's passes give a model with BatchNorm2d its input channels-last (10% faster:
    ``input_format.channels_last_gradients``). Captum given the same input, channels-last, sums
    as hookviz does; given it as it came, its float32 sums round otherwise (2.2e-3 of the
    largest away here), where both are 1.2e-2 from the float64 integral: hookviz's map is as
    near it as captum's."""
    import copy

    from captum.attr import IntegratedGradients

    mine = pixel_maps(resnet18, batch, "layer4", "integrated-gradients", POSITIVE)  # 32 steps, a zero baseline

    def captum(model, x):
        attributed = IntegratedGradients(model).attribute(
            x, target=POSITIVE, n_steps=32, method="gausslegendre", internal_batch_size=32
        )
        return attributed.detach().double().numpy()

    theirs = captum(resnet18, batch.contiguous(memory_format=torch.channels_last))
    assert mine.shape == theirs.shape == (2, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3
    as_it_came, exact = captum(resnet18, batch), captum(copy.deepcopy(resnet18).double(), batch.double())
    assert relative(mine, exact) < 1.5 * relative(as_it_came, exact)
