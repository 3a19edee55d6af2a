"""CAMs against independent implementations: captum and pytorch-grad-cam."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision

from hookviz import Explainer, LayerOptions, TargetOptions, explain
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.models.loading import LoadedModel

from .conftest import assert_same_cam, hand_gradcam, tiny_convnext


@pytest.fixture(scope="module")
def resnet50():
    torch.manual_seed(0)  # fixed weights: the same for hookviz and the references
    return torchvision.models.resnet50(weights=None).eval()


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(1)
    return torch.randn(2, 3, 224, 224)


def _hookviz_cams(model, x, layer, method, target):
    from PIL import Image

    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((224, 224, 3), np.uint8)) for t in x]
    results = _explainer(model, layer, TargetOptions(target=str(target), cam=method)).explain_batch(images)
    return np.stack([r.layers[0].cam for r in results])


def _explainer(model, layer, target) -> Explainer:
    loaded = LoadedModel("resnet50", model, "seeded", None, Preprocessing())
    return Explainer.create(loaded, layers=LayerOptions((layer,)), target=target)


def _pgc_scaled(cam: np.ndarray) -> np.ndarray:
    """pytorch-grad-cam's post-processing: min-max per image, then bilinear resize to the input."""
    cam = cam - cam.min(axis=(1, 2), keepdims=True)
    cam = cam / (1e-7 + cam.max(axis=(1, 2), keepdims=True))
    return F.interpolate(torch.from_numpy(cam)[:, None].float(), size=(224, 224), mode="bilinear")[:, 0].numpy()


def test_gradcam_equals_captum_layergradcam(resnet50, batch):
    from captum.attr import LayerGradCam

    target = 500  # a class whose Grad-CAM is not all zero under these random weights
    ours = _hookviz_cams(resnet50, batch, "layer4", "gradcam", target)
    theirs = LayerGradCam(resnet50, resnet50.layer4).attribute(batch, target=target, relu_attributions=True)
    theirs = theirs[:, 0].detach().numpy()
    assert ours.shape == theirs.shape == (2, 7, 7)
    assert theirs.max() > 0
    relative = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert relative < 1e-3


@pytest.mark.parametrize(
    "method, reference",
    [("gradcam", "GradCAM"), ("gradcam++", "GradCAMPlusPlus"), ("layercam", "LayerCAM")],
)
def test_cams_correlate_with_pytorch_grad_cam(resnet50, batch, method, reference):
    import pytorch_grad_cam
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    target = 500  # a class whose Grad-CAM is not all zero under these random weights
    ours = _pgc_scaled(_hookviz_cams(resnet50, batch, "layer4", method, target))
    with getattr(pytorch_grad_cam, reference)(model=resnet50, target_layers=[resnet50.layer4]) as cam:
        theirs = cam(input_tensor=batch, targets=[ClassifierOutputTarget(target)] * len(batch))
    for mine, reference_map in zip(ours, theirs):
        correlation = np.corrcoef(mine.ravel(), reference_map.ravel())[0, 1]
        assert correlation >= 0.999, correlation


def test_cam_explains_the_logit_whatever_the_objective(resnet50, batch):
    logit = _hookviz_cams(resnet50, batch[:1], "layer4", "gradcam", 3)
    from PIL import Image

    image = PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), batch[0], np.zeros((224, 224, 3), np.uint8))
    ce = _explainer(resnet50, "layer4", TargetOptions(target="3", objective="ce")).explain_batch([image])[0]
    np.testing.assert_allclose(ce.layers[0].cam, logit[0], rtol=1e-5, atol=1e-7)
    # ...while grad_output follows the cross-entropy objective: d CE / d layer4, by plain hooks.
    store = {}
    handle = resnet50.layer4.register_forward_hook(lambda m, i, o: store.update(out=o))
    try:
        logits = resnet50(batch[:1])
    finally:
        handle.remove()
    (expected,) = torch.autograd.grad(F.cross_entropy(logits, torch.tensor([3])), store["out"])
    np.testing.assert_allclose(ce.layers[0].grad_output, expected.numpy(), rtol=1e-4, atol=1e-8)
    assert ce.objective == "ce" and np.abs(expected.numpy()).max() > 0


def test_vit_layer_gives_a_14x14_cam():
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(weights=None).eval()
    with torch.no_grad():
        model.heads.head.weight.normal_(0, 0.02)  # torchvision zero-inits the head: no gradient at all
    layers = ["encoder.layers.encoder_layer_11", "encoder.layers.encoder_layer_11.ln_1"]
    result = explain(model, torch.randn(3, 224, 224), layers=layers, target=5)
    last, ln_1 = result.layers
    assert last.output.shape == (1, 197, 768)
    assert last.cam.shape == ln_1.cam.shape == (14, 14)
    # The head reads the class token only, and after the last block no patch token
    # reaches it: that block's patch gradients, and so its CAM, are exactly zero.
    assert not last.grad_output[0, 1:].any() and not last.cam.any()
    assert "zero" in last.cam_note
    # One step earlier, attention carries the patches into the class token.
    assert np.isfinite(ln_1.cam).all() and ln_1.cam.max() > 0


def test_swin_channels_last_output_is_reshaped():
    torch.manual_seed(0)
    model = torchvision.models.swin_t(weights=None).eval()
    result = explain(model, torch.randn(3, 224, 224), layers=["features.7"], target=5)
    assert result.layers[0].output.shape == (1, 7, 7, 768)
    assert result.layers[0].cam.shape == (7, 7)


# ----------------------------------------------------------------------------- channels-last maps


@pytest.mark.parametrize(
    "layer, channels_last",
    [("block.2", True), ("block.4", True), ("stem", False), ("block.0", False)],
    ids=["layernorm", "gelu", "stem-conv", "depthwise-conv"],
)
def test_a_map_whose_height_equals_its_channels_is_read_in_the_order_its_ops_made(layer, channels_last):
    # Every map of this model is 1x8x8x8 at 32 pixels (1x8x8x16 after the first Linear):
    # the norm and MLP between the Permutes are channels-last, the convolutions channels-first.
    model = tiny_convnext().eval()
    image = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(1))
    result = explain(model, image, layers=[layer], target=2)
    (ours,) = result.layers
    assert (ours.layout.kind, ours.layout.basis) == ("nhwc" if channels_last else "nchw", "data flow")
    assert_same_cam(ours.cam, hand_gradcam(model, layer, image, 2, channels_last))


@pytest.mark.slow
def test_torchvision_convnext_at_384_pixels_is_read_channels_last():
    # features.1.0.block.2 (the first block's LayerNorm) puts out 1x96x96x96 at 384 pixels.
    torch.manual_seed(0)
    model = torchvision.models.convnext_tiny(weights=None).eval()
    image = torch.randn(3, 384, 384, generator=torch.Generator().manual_seed(1))
    result = explain(model, image, layers=["features.1.0.block.2"], target=3)
    assert result.layers[0].output.shape == (1, 96, 96, 96)
    assert result.layers[0].layout.kind == "nhwc"
    assert_same_cam(result.layers[0].cam, hand_gradcam(model, "features.1.0.block.2", image, 3, channels_last=True))


def test_a_map_that_reads_both_ways_is_not_guessed_and_the_callers_word_settles_it():
    model = tiny_convnext().eval()
    image = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(1))
    # mixer.out is tokens reshaped into a 1x8x8x8 map: no op and no declaration says its order.
    (unsaid,) = explain(model, image, layers=["mixer.out"], target=2).layers
    assert unsaid.cam is None and unsaid.layout.kind == "ambiguous" and unsaid.maps["output"] is None
    assert unsaid.cam_note == (
        "no CAM: output 1x8x8x8 fits channels first (8 channels of 8x8) and channels last (8 channels of 8x8) "
        "alike, and neither the model nor the ops that made it say which; pass layout='nhwc' or layout='nchw' to say it"
    )
    assert "mixer.out: input 1x8x8x8 and output 1x8x8x8 fit channels first and last alike" in unsaid.notes[0]
    (said,) = explain(model, image, layers=["mixer.out"], target=2, layout="nhwc").layers
    assert (said.layout.kind, said.layout.basis) == ("nhwc", "declared")
    assert_same_cam(said.cam, hand_gradcam(model, "mixer.out", image, 2, channels_last=True))


def test_gradcam_of_espresso_lies_on_the_cup(lite0, coffee):
    result = explain(lite0, coffee, target="espresso")
    assert result.target.name == "espresso" and result.target.probability > 0.9
    cam = result.layers[0].cam
    assert cam.shape == (7, 7)
    # In the 224x224 centre crop the cup (rim, coffee and body) spans x 30..200, y 0..180;
    # the saucer, spoon and table fill the rest.
    heat = F.interpolate(torch.from_numpy(cam)[None, None], size=(224, 224), mode="bilinear")[0, 0].numpy()
    cup = np.zeros_like(heat, dtype=bool)
    cup[0:180, 30:200] = True
    peak = np.unravel_index(heat.argmax(), heat.shape)
    assert cup[peak]
    assert heat[cup].sum() / heat.sum() > 0.75
    assert heat[cup].mean() > 2 * heat[~cup].mean()


def test_topk_cams_one_pass(lite0, cat):
    result = explain(lite0, cat, topk=3)
    layer = result.layers[0]
    assert [score.index for score, _ in layer.topk_cams] == [s.index for s in result.top5[:3]]
    np.testing.assert_allclose(layer.topk_cams[0][1], layer.cam, rtol=1e-5, atol=1e-6)
    assert not np.allclose(layer.topk_cams[0][1], layer.topk_cams[2][1])
