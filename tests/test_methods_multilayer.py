"""CAM and FullGrad, the methods that read more of the model than one layer, against their
references on the random-weight resnet18 and seeded batch of ``test_method_references``:
torch-cam's ``CAM`` (the classifier's weights) and pytorch-grad-cam's ``FullGrad`` (every
bias's gradient). Each refusal is one line through the CLI.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

import hookviz

from .cli_helpers import hookviz_run
from .conftest import tiny_net
from .test_method_references import POSITIVE, SIDE, batch, correlation, ours, pixel_maps, relative, resnet18  # noqa: F401

# ----------------------------------------------------------------------------- CAM


def test_cam_equals_torch_cams_and_gradcam_times_the_positions(resnet18, batch):  # noqa: F811
    from torchcam.methods import CAM

    mine = ours(resnet18, batch, "layer4", "cam", POSITIVE)
    with CAM(resnet18, "layer4", "fc", input_shape=(3, SIDE, SIDE)) as extractor:
        with torch.no_grad():
            resnet18(batch)
        theirs = extractor(POSITIVE, normalized=False)[0].numpy()
    assert mine.shape == theirs.shape == (2, 4, 4) and theirs.max() > 0
    assert relative(mine, theirs) < 1e-3
    # the fc row is Grad-CAM's weight times the 16 positions: the maps differ by that factor only
    gradcam = ours(resnet18, batch, "layer4", "gradcam", POSITIVE)
    assert relative(gradcam * 16, mine) < 1e-5


def test_cam_reads_each_images_own_class_row(resnet18, batch):  # noqa: F811
    """With the top class as target, each photo's map is from its own class's row of fc."""
    from torchcam.methods import CAM

    images = [b for b in batch]
    explained = [hookviz.explain(resnet18, image, layers=["layer4"], cam="cam") for image in images]
    with CAM(resnet18, "layer4", "fc", input_shape=(3, SIDE, SIDE)) as extractor:
        with torch.no_grad():
            top = resnet18(batch).argmax(1).tolist()
        theirs = extractor(top, normalized=False)[0].numpy()
    for result, expected in zip(explained, theirs):
        assert relative(result.layers[0].cam, expected) < 1e-3


def test_cam_of_a_model_without_a_linear_classifier_is_refused_in_one_line(photo, tmp_path):
    out = tmp_path / "out"
    model = "tests.test_conformance:tiny_segmenter"
    result = hookviz_run(photo, "--resize", "32", "--crop", "32", "--cam", "cam", "-q", model=model, out=out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: --cam cam: TinySegmenter has no nn.Linear classifier, so CAM has no class weights to read; "
        "choose gradcam (which equals CAM where the head is a global pool then a linear layer)"
    )
    assert not (out / "photo").exists()


def test_cam_at_a_layer_the_classifier_does_not_pool_says_why_and_maps_the_layer_it_pools():
    """features.3 reaches the pool through two ReLUs; act:1 (the second call of act) is what it pools."""
    result = hookviz.explain(tiny_net(), torch.rand(3, 32, 32), layers=["features.3", "act:1"], cam="gradcam,cam")
    early, pooled = result.layers
    assert early.cams["gradcam"] is not None and "cam" not in early.cams
    assert early.cam_notes["cam"] == (
        "no CAM: cam='cam': the target's score is not one linear layer (of 6 inputs) applied to the global average pool "
        "of features.3, so CAM is not defined here; choose gradcam (which equals CAM where it is) or the last feature "
        "map before the global pool"
    )
    assert pooled.cams["cam"].shape == (16, 16)
    assert relative(pooled.cams["gradcam"] * 256, pooled.cams["cam"]) < 1e-5


class _MLPHead(nn.Module):
    """A pool then two linear layers: the gradient is even over positions, but no fc row."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.hidden = nn.Linear(4, 8)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(torch.tanh(self.hidden(self.pool(self.conv(x)).flatten(1))))


def test_cam_has_no_map_where_the_pool_is_followed_by_more_than_one_linear_layer():
    result = hookviz.explain(_MLPHead().eval(), torch.rand(3, 16, 16), layers=["conv"], cam="cam")
    assert result.layers[0].cam is None
    assert result.layers[0].cam_note.startswith("no CAM: cam='cam': the target's score is not one linear layer (of 4 inputs)")


# ----------------------------------------------------------------------------- FullGrad


@pytest.mark.slow
def test_fullgrad_equals_pytorch_grad_cams(resnet18, batch):  # noqa: F811
    from pytorch_grad_cam import FullGrad
    from pytorch_grad_cam.utils.image import scale_cam_image
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    mine = pixel_maps(resnet18, batch, "layer4", "fullgrad", POSITIVE)
    assert mine.shape == (2, 3, SIDE, SIDE)
    np.testing.assert_allclose(mine[:, 0], mine[:, 2])  # each channel holds a third of the map
    summed = mine.sum(axis=1)
    theirs = FullGrad(resnet18, [])(input_tensor=batch, targets=[ClassifierOutputTarget(POSITIVE)] * 2)
    assert theirs.shape == summed.shape and theirs.max() > 0
    # pytorch-grad-cam scales its sum to 0..1 per image: so scaled, ours equals it
    assert relative(scale_cam_image(summed), theirs) < 1e-3
    assert all(correlation(hookviz_map, public) >= 0.999 for hookviz_map, public in zip(summed, theirs))


class _BiasFree(nn.Module):
    """Convolutions without bias and no batch norm: nothing for FullGrad's bias terms."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def bias_free_net() -> nn.Module:
    """Factory used as ``--model tests.test_methods_multilayer:bias_free_net``."""
    return _BiasFree().eval()


def test_fullgrad_of_a_model_without_biases_is_refused_in_one_line_where_pytorch_grad_cam_is_silent(photo, tmp_path):
    from pytorch_grad_cam import FullGrad
    from pytorch_grad_cam.utils.image import scale_cam_image
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    out = tmp_path / "out"
    result = hookviz_run(
        photo,
        "--resize",
        "32",
        "--crop",
        "32",
        "--cam",
        "fullgrad",
        "-q",
        model="tests.test_methods_multilayer:bias_free_net",
        out=out,
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: --cam fullgrad: _BiasFree has no nn.Conv2d or nn.BatchNorm2d with a bias, so FullGrad would be "
        "its input-gradient term alone; choose integrated-gradients or guided-backprop"
    )
    assert not (out / "photo").exists()
    # pytorch-grad-cam makes a map all the same: |input gradient x input| alone, scaled
    model, x = bias_free_net(), torch.rand(1, 3, 16, 16, requires_grad=True)
    theirs = FullGrad(model, [])(input_tensor=x.detach(), targets=[ClassifierOutputTarget(1)])
    model(x)[0, 1].backward()
    term = (x.grad * x).abs().detach().numpy()
    term = sum(scale_cam_image(channel[None])[0] for channel in term[0])
    assert relative(scale_cam_image(term[None]), theirs) < 1e-3


def test_fullgrad_leaves_no_hook_and_explains_a_segmenter():
    torch.manual_seed(0)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3).eval()
    before = {name: (dict(m._forward_hooks), dict(m._backward_hooks)) for name, m in model.named_modules()}
    result = hookviz.explain(model, torch.rand(3, 48, 48), layers=["backbone.16"], cam="fullgrad")
    found = result.pixel_maps["fullgrad"]
    assert found.map is not None and found.map.shape == (3, 48, 48) and np.isfinite(found.map).all() and found.map.max() > 0
    assert {name: (dict(m._forward_hooks), dict(m._backward_hooks)) for name, m in model.named_modules()} == before


# ----------------------------------------------------------------------------- RefineCAM


def _refine(model, photos, layers) -> np.ndarray:
    """hookviz's refine-cam of ``batch`` over ``layers``, summed over the input's channels."""
    from PIL import Image

    from hookviz import Explainer, LayerOptions, TargetOptions
    from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
    from hookviz.models.loading import LoadedModel

    images = [
        PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in photos
    ]
    loaded = LoadedModel("resnet18", model, "seeded", None, Preprocessing())
    target = TargetOptions(target=str(POSITIVE), cam="refine-cam")
    explainer = Explainer.create(loaded, layers=LayerOptions(tuple(layers)), target=target)
    return np.stack([result.pixel_maps["refine-cam"].map for result in explainer.explain_batch(images)]).sum(axis=1)


LAYERS = ["layer2", "layer3", "layer4"]


@pytest.mark.slow
def test_refine_cam_equals_pytorch_grad_cams(resnet18, batch):  # noqa: F811
    from pytorch_grad_cam import RefineCAM
    from pytorch_grad_cam.utils.image import scale_cam_image
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    mine = _refine(resnet18, batch, LAYERS)
    theirs = RefineCAM(resnet18, [resnet18.get_submodule(name) for name in LAYERS])(batch, [ClassifierOutputTarget(POSITIVE)] * 2)
    assert mine.shape == theirs.shape == (2, SIDE, SIDE) and theirs.max() > 0
    assert relative(scale_cam_image(mine), theirs) < 1e-3
    assert all(correlation(hookviz_map, public) >= 0.999 for hookviz_map, public in zip(mine, theirs))


@pytest.mark.slow
def test_refine_cam_differs_from_torch_cams_whose_gradcam_plus_plus_never_divides_its_alphas(resnet18, batch):  # noqa: F811
    import torch.nn.functional as F
    from torchcam.methods import GradCAMpp, RefineCAM

    mine = _refine(resnet18, batch, LAYERS)
    with RefineCAM(resnet18, LAYERS, input_shape=(3, SIDE, SIDE)) as extractor:
        theirs = extractor(POSITIVE, resnet18(batch))[0].detach()
    assert theirs.shape == (2, 14, 14)  # the largest layer's map, not the input's
    resized = F.interpolate(theirs[:, None], size=(SIDE, SIDE), mode="bilinear")[:, 0].numpy()
    assert all(correlation(hookviz_map, public) < 0.999 for hookviz_map, public in zip(mine, resized))
    # its base: alpha[idx][mask].div_(...) divides a copy, so the weights are sum(g^2 ReLU(g))
    seen = {}

    def record(_module, _args, output):
        seen["a"] = output
        output.register_hook(lambda grad: seen.update(g=grad))

    handle = resnet18.layer4.register_forward_hook(record)
    try:
        resnet18(batch)[:, POSITIVE].sum().backward()
    finally:
        handle.remove()
        resnet18.zero_grad(set_to_none=True)
    a, g = seen["a"].detach(), seen["g"]
    undivided = torch.relu(((g.pow(2) * torch.relu(g)).sum((2, 3))[..., None, None] * a).sum(1))
    with GradCAMpp(resnet18, "layer4", input_shape=(3, SIDE, SIDE)) as extractor:
        base = extractor(POSITIVE, resnet18(batch), normalized=False)[0].detach()
    assert relative(base.numpy(), undivided.numpy()) < 1e-3
    paper = ours(resnet18, batch, "layer4", "gradcam++", POSITIVE)
    assert relative(paper / paper.max(), (base / base.max()).numpy()) > 1e-2


def test_refine_cam_of_one_layer_is_its_gradcam_plus_plus_scaled_at_the_input(resnet18, batch):  # noqa: F811
    from pytorch_grad_cam.utils.image import scale_cam_image

    mine = _refine(resnet18, batch, ["layer4"])
    base = ours(resnet18, batch, "layer4", "gradcam++", POSITIVE)
    resized = scale_cam_image(scale_cam_image(base), (SIDE, SIDE))  # scaled, then resized: no longer 0..1
    assert relative(scale_cam_image(mine), scale_cam_image(resized)) < 1e-3
