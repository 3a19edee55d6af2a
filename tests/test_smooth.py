"""Smoothing (``--smooth``, ``hookviz.methods.smoothing``) against captum's ``NoiseTunnel``, and
``smoothgradcam++`` against torch-cam's ``SmoothGradCAMpp``, on one random-weight resnet18 and
one seeded 64-pixel photo.

The noise: hookviz draws each image's copies at once from a ``torch.Generator`` seeded
``--smooth-seed``; captum draws them with ``torch.normal`` from the global generator. Seeded
alike (``torch.manual_seed(seed)`` in a forked RNG), the two draw the same numbers for one
image (``test_hookviz_draws_what_captums_noise_tunnel_draws``), so the equality tests give
captum the same noise by seeding it, not by patching it. torch-cam draws from a
``torch.distributions.Normal`` of its own; its ``sample`` is patched to hand out hookviz's draws.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from hookviz import Explainer, LayerOptions, TargetOptions
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.methods.integrated_gradients import IGOptions
from hookviz.methods.smoothing import SmoothOptions, noise_draws
from hookviz.models.loading import LoadedModel
from tests.cli_helpers import hookviz_run

SIDE = 64
TARGET = 8
SEED = 5


@pytest.fixture(scope="module")
def resnet18():
    torch.manual_seed(0)  # fixed weights: the same for hookviz and the references
    return torchvision.models.resnet18(weights=None).eval()


@pytest.fixture(scope="module")
def image():
    torch.manual_seed(1)
    return torch.randn(1, 3, SIDE, SIDE)


def explained(model, batch, method: str, *settings, layer: str = "layer3"):
    """hookviz's explanations of ``batch`` (one per image) by ``method`` with ``settings``."""
    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("resnet18", model, "seeded", None, Preprocessing())
    target = TargetOptions(target=str(TARGET), cam=method, settings=settings)
    return Explainer.create(loaded, layers=LayerOptions((layer,)), target=target).explain_batch(images)


def layer_map(model, batch, method: str, *settings) -> np.ndarray:
    return np.stack([found.layers[0].cam for found in explained(model, batch, method, *settings)])


def pixel_map(model, batch, method: str, *settings) -> np.ndarray:
    return np.stack([found.pixel_maps[method].map for found in explained(model, batch, method, *settings)])


def relative(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def stdev(image, noise: float) -> float:
    return noise * float(image.max() - image.min())


@pytest.mark.slow  # measured over 1.4 s
def test_hookviz_draws_what_captums_noise_tunnel_draws(image):
    from captum.attr import NoiseTunnel

    settings = SmoothOptions(smooth="smoothgrad", smooth_samples=4, smooth_noise=0.2, smooth_seed=SEED)
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        theirs = NoiseTunnel._add_noise_to_input(image, stdev(image, 0.2), 4)
    assert torch.equal(image + noise_draws(image, settings), theirs)


@pytest.mark.slow  # measured 2.2 to 3.1 s each
@pytest.mark.parametrize("kind", ["smoothgrad", "smoothgrad-sq", "vargrad"])
def test_smoothed_integrated_gradients_equal_captums_noise_tunnel(resnet18, image, kind):
    from captum.attr import IntegratedGradients, NoiseTunnel

    smooth = SmoothOptions(smooth=kind, smooth_samples=3, smooth_noise=0.15, smooth_seed=SEED)
    mine = pixel_map(resnet18, image, "integrated-gradients", IGOptions(steps=4), smooth)
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        tunnel = NoiseTunnel(IntegratedGradients(resnet18))
        theirs = tunnel.attribute(
            image, nt_type=kind.replace("-", "_"), nt_samples=3, stdevs=stdev(image, 0.15), target=TARGET,
            n_steps=4, method="gausslegendre",
        )  # fmt: skip
    theirs = theirs.detach().numpy()
    plain = pixel_map(resnet18, image, "integrated-gradients", IGOptions(steps=4))
    assert mine.shape == theirs.shape == (1, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3
    assert relative(plain, theirs) > 1e-2  # the noise changed the map: the test can fail


@pytest.mark.parametrize("kind", ["smoothgrad", "vargrad"])
def test_smoothed_gradcam_equals_captums_noise_tunnel_of_layer_gradcam(resnet18, image, kind):
    from captum.attr import LayerGradCam, NoiseTunnel

    smooth = SmoothOptions(smooth=kind, smooth_samples=4, smooth_noise=0.2, smooth_seed=SEED)
    mine = layer_map(resnet18, image, "gradcam", smooth)
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        tunnel = NoiseTunnel(LayerGradCam(resnet18, resnet18.layer3))
        theirs = tunnel.attribute(
            image, nt_type=kind, nt_samples=4, stdevs=stdev(image, 0.2), target=TARGET, relu_attributions=True
        )
    theirs = theirs.detach().numpy()[:, 0]
    assert mine.shape == theirs.shape == (1, 4, 4) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3
    assert relative(layer_map(resnet18, image, "gradcam"), theirs) > 1e-2


@pytest.mark.slow  # measured over 1.4 s
def test_smoothing_wraps_every_gradient_method_and_leaves_the_others(resnet18, image):
    smooth = SmoothOptions(smooth="smoothgrad", smooth_samples=2, smooth_seed=SEED)
    methods = "gradcam++,eigencam,guided-backprop"
    plain, smoothed = explained(resnet18, image, methods)[0], explained(resnet18, image, methods, smooth)[0]
    layer, smoothed_layer = plain.layers[0], smoothed.layers[0]
    assert not np.allclose(layer.cams["gradcam++"], smoothed_layer.cams["gradcam++"])
    assert np.array_equal(layer.cams["eigencam"], smoothed_layer.cams["eigencam"])  # no gradient: not smoothed
    gbp, smoothed_gbp = plain.pixel_maps["guided-backprop"].map, smoothed.pixel_maps["guided-backprop"].map
    assert gbp.shape == smoothed_gbp.shape and relative(smoothed_gbp, gbp) > 1e-2
    assert smoothed.asked["settings"]["smooth"]["smooth"] == "smoothgrad"


def test_an_images_smoothed_map_does_not_depend_on_its_batch(resnet18, image):
    torch.manual_seed(2)
    other = torch.randn(1, 3, SIDE, SIDE) * 3
    smooth = SmoothOptions(smooth="smoothgrad-sq", smooth_samples=2, smooth_seed=SEED)
    alone = layer_map(resnet18, image, "gradcam", smooth)
    together = layer_map(resnet18, torch.cat([image, other]), "gradcam", smooth)
    assert relative(together[:1], alone) < 1e-5


def torch_cam(model, image, draws) -> np.ndarray:
    """torch-cam's raw Smooth Grad-CAM++ of layer3 (after its ReLU, not normalised), its noise ``draws``."""
    from torchcam.methods import SmoothGradCAMpp

    handed = iter(draws)
    with SmoothGradCAMpp(model, "layer3", num_samples=len(draws), input_shape=(3, SIDE, SIDE)) as extractor:
        extractor._distrib.sample = lambda size: next(handed).reshape(size)
        model(image)
        (found,) = extractor(class_idx=TARGET, normalized=False)
    return found.detach().numpy()


def ours_with(monkeypatch, model, image, draws) -> np.ndarray:
    import hookviz.methods.smoothgradcam_pp as method

    monkeypatch.setattr(method, "noise_draws", lambda image, settings: draws[:, None].expand(-1, *image.shape).squeeze(1))
    return layer_map(model, image, "smoothgradcam++", SmoothOptions(smooth_samples=len(draws)))


def test_smoothgradcam_pp_equals_torch_cams_when_its_last_copy_is_the_photo(resnet18, image, monkeypatch):
    settings = SmoothOptions(smooth_samples=4, smooth_noise=0.2, smooth_seed=SEED)
    draws = noise_draws(image, settings)
    draws[-1] = 0  # torch-cam's weights read its last copy's gradient and activations: here the image's own
    mine, theirs = ours_with(monkeypatch, resnet18, image, draws), torch_cam(resnet18, image, draws)
    assert mine.shape == theirs.shape == (1, 4, 4) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3


@pytest.mark.slow  # measured over 1.4 s
def test_torch_cams_smoothgradcam_pp_changes_with_the_order_of_the_same_draws(resnet18, image, monkeypatch):
    draws = noise_draws(image, SmoothOptions(smooth_samples=4, smooth_noise=0.2, smooth_seed=SEED))
    theirs, theirs_reversed = torch_cam(resnet18, image, draws), torch_cam(resnet18, image, draws.flip(0))
    assert relative(theirs_reversed, theirs) > 0.05  # the same draws, another map: its last copy's
    mine, mine_reversed = ours_with(monkeypatch, resnet18, image, draws), ours_with(monkeypatch, resnet18, image, draws.flip(0))
    assert relative(mine_reversed, mine) < 1e-5


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--cam", "eigencam,scorecam", "--smooth", "smoothgrad"), "eigencam, scorecam"),
        (("--cam", "smoothgradcam++", "--smooth", "vargrad"), "smoothgradcam++"),
        (("--cam", "gradcam", "--smooth", "smoothgrad", "--smooth-samples", "0"), "1 to 1000"),
        (("--cam", "gradcam", "--smooth", "smoothgrad", "--smooth-samples", "1000000"), "1 to 1000"),
        (("--cam", "gradcam", "--smooth", "smoothgrad", "--smooth-noise", "-0.1"), "from 0 to 1"),
        (("--cam", "gradcam", "--smooth", "smoothy"), "choose"),
    ],
)
def test_bad_smoothing_is_refused_in_one_line(tmp_path, cat, args, words):
    result = hookviz_run(cat, *args, "--resize", "32", "--crop", "32", "-q", layer="features.3", out=tmp_path / "out")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "smooth" in lines[0], result.output
    assert not (tmp_path / "out").exists()


class ToySegmenter(torch.nn.Module):
    """Per-pixel logits of 4 classes, at the input's size, as torchvision's segmenters return them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU())
        self.classifier = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        logits = self.classifier(self.body(x))
        return {"out": torch.nn.functional.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)}


def test_smoothing_explains_a_segmenter_by_its_class_score():
    """Each noisy copy is scored as the task scores the photo: the class's mean logit over the
    pixels the photo's own prediction gave it; smoothgrad of Grad-CAM by hand, and smoothgradcam++ runs."""
    from hookviz import explain

    model = ToySegmenter().eval()
    image = torch.randn(3, 64, 64, generator=torch.Generator().manual_seed(4))
    settings = SmoothOptions(smooth="smoothgrad", smooth_samples=3, smooth_noise=0.1, smooth_seed=SEED)
    asked = {"smooth": "smoothgrad", "smooth_samples": 3, "smooth_noise": 0.1, "smooth_seed": SEED}
    result = explain(model, image, layers=["body"], task="segment", cam="gradcam,smoothgradcam++", **asked)
    pixels = torch.from_numpy(result.prediction.mask == result.target.index)
    assert 0 < int(pixels.sum()) < pixels.numel()
    hand = []
    for draw in noise_draws(image[None], settings):
        activations = model.body((image + draw)[None]).detach().requires_grad_(True)
        logits = torch.nn.functional.interpolate(model.classifier(activations), size=(64, 64), mode="bilinear")
        (grads,) = torch.autograd.grad(logits[0, result.target.index][pixels].mean(), activations)
        hand.append((grads.mean((-2, -1), keepdim=True) * activations).sum(1).clamp(min=0).detach()[0])
    expected = torch.stack(hand).mean(0).numpy()
    layer = result.layers[0]
    assert layer.cams["gradcam"].shape == expected.shape == (32, 32) and expected.max() > 0
    assert relative(layer.cams["gradcam"], expected) < 1e-4
    assert layer.cams["smoothgradcam++"].shape == (32, 32) and layer.cams["smoothgradcam++"].max() > 0


def each_copy_by_hand(model, image, method: str, settings: SmoothOptions) -> tuple[np.ndarray, np.ndarray]:
    """The method's smoothgrad map of ``image``, and the mean of its plain maps of each noisy copy, each explained alone."""
    from hookviz.methods import get_method

    read = pixel_map if get_method(method).resolution == "input" else layer_map
    copies = [read(model, (image[0] + draw)[None], method) for draw in noise_draws(image, settings)]
    return read(model, image, method, settings), np.mean(copies, axis=0)


@pytest.mark.parametrize("method", ["layercam", "hirescam"])
def test_a_smoothed_map_is_the_mean_of_the_methods_maps_of_each_noisy_copy(resnet18, image, method):
    settings = SmoothOptions(smooth="smoothgrad", smooth_samples=2, smooth_noise=0.2, smooth_seed=SEED)
    smoothed, by_hand = each_copy_by_hand(resnet18, image, method, settings)
    assert smoothed.shape == by_hand.shape and np.abs(by_hand).max() > 0
    assert relative(smoothed, by_hand) < 1e-4


@pytest.mark.slow  # every registered gradient method (those other modules register too): about 1 s each
def test_every_smoothable_method_is_the_mean_of_its_maps_of_each_noisy_copy(resnet18, image):
    from hookviz.errors import UsageError
    from hookviz.methods import get_method, method_names
    from hookviz.methods.smoothing import smoothable

    settings = SmoothOptions(smooth="smoothgrad", smooth_samples=2, smooth_noise=0.2, smooth_seed=SEED)
    checked = []
    for name in method_names():
        if not smoothable(get_method(name)) or name in ("integrated-gradients",):  # its own test above
            continue
        read = pixel_map if get_method(name).resolution == "input" else layer_map
        try:
            if (
                read(resnet18, image, name).dtype == object
            ):  # None, no map of it here (cam: its layer's head is not pool-then-linear)
                continue
            smoothed, by_hand = each_copy_by_hand(resnet18, image, name, settings)
        except UsageError:  # a method this model cannot have (attnlrp: a vision transformer's)
            continue
        assert relative(smoothed, by_hand) < 1e-4, name
        checked.append(name)
    assert {"gradcam", "gradcam++", "guided-backprop", "guided-gradcam"} <= set(checked)
