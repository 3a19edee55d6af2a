"""The re-scoring methods SS-CAM, IS-CAM, RISE and occlusion against their references, on a
random-weight resnet18 and a seeded small batch: torch-cam's ``SSCAM`` and ``ISCAM``,
xaitk-saliency's ``RISEGrid`` and ``RISEStack``, captum's ``Occlusion``. Each map differs from
its reference's by less than 1e-3 of the largest value, with the same seed and masks where the
method samples. A random-weight segmenter gets the same comparisons through its own score
(each reference given a model whose one output is the segmentation task's score).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

import hookviz
from hookviz.methods.integrated_gradients import baseline

from .cli_helpers import hookviz_run
from .conftest import SAMPLES

SIDE = 32
TARGET = 8


@pytest.fixture(scope="module")
def resnet18():
    torch.manual_seed(0)  # fixed weights: the same for hookviz and the references
    return torchvision.models.resnet18(weights=None).eval()


@pytest.fixture(scope="module")
def photo():
    torch.manual_seed(1)
    return torch.randn(1, 3, SIDE, SIDE + 4)


def relative(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def layer_map(model, x, layer: str, cam: str, target=TARGET, **settings) -> np.ndarray:
    return hookviz.explain(model, x, layers=[layer], target=target, cam=cam, **settings).layers[0].cam


def pixel_map(model, x, layer: str, cam: str, target=TARGET, **settings) -> np.ndarray:
    return hookviz.explain(model, x, layers=[layer], target=target, cam=cam, **settings).pixel_maps[cam].map


class SeededNoise:
    """Stands in for torch-cam's ``SSCAM._distrib`` (a ``Normal(0, std)`` drawn from the global
    random state): ``sample((N, C, *spatial))`` draws one ``randn(spatial)`` per (image, channel),
    in that order, from a generator seeded as hookviz seeds its own (``--ss-seed``) — what hookviz
    draws for one image, sample after sample, channel after channel. So both see the same noise."""

    def __init__(self, seed: int, std: float):
        self.generator, self.std = torch.Generator().manual_seed(seed), std

    def sample(self, size):
        rows = [torch.randn(tuple(size[2:]), generator=self.generator) for _ in range(size[0] * size[1])]
        return self.std * torch.stack(rows).reshape(size)


def torchcam_map(extractor_type, model, x, layer: str, target: int = TARGET, noise=None, **kwargs) -> np.ndarray:
    with extractor_type(model, layer, input_shape=tuple(x.shape[1:]), **kwargs) as extractor:
        if noise is not None:
            extractor._distrib = noise
        with torch.no_grad():
            model(x)
        return extractor(class_idx=target, normalized=False)[0].numpy()


@pytest.mark.slow  # measured: 9-14 s of CPU
def test_ss_cam_equals_torchcams_sscam_with_the_same_noise_and_leaves_the_callers_random_state(resnet18, photo):
    from torchcam.methods import SSCAM

    state = torch.random.get_rng_state()
    mine = layer_map(resnet18, photo, "layer3", "ss-cam", ss_samples=3, ss_std=1.5, ss_seed=7)
    assert torch.equal(state, torch.random.get_rng_state())  # its noise came from a generator of its own
    theirs = torchcam_map(SSCAM, resnet18, photo, "layer3", noise=SeededNoise(7, 1.5), num_samples=3, std=1.5)
    assert mine.shape == theirs.shape[1:] and np.abs(theirs).max() > 0
    assert relative(mine, theirs[0]) < 1e-3
    other = layer_map(resnet18, photo, "layer3", "ss-cam", ss_samples=3, ss_std=1.5, ss_seed=8)
    assert relative(other, theirs[0]) > 1e-3  # the seed matters: the test would see other noise


@pytest.mark.slow  # measured: 9-14 s of CPU
def test_is_cam_equals_torchcams_iscam(resnet18, photo):
    from torchcam.methods import ISCAM

    mine = layer_map(resnet18, photo, "layer3", "is-cam", is_samples=4)
    theirs = torchcam_map(ISCAM, resnet18, photo, "layer3", num_samples=4)
    assert np.abs(theirs).max() > 0 and relative(mine, theirs[0]) < 1e-3


@pytest.fixture(scope="module")
def tiny():
    """conv (4 channels, stride 4) -> ReLU -> pool -> 3 logits; channel 1 is zero everywhere
    (no weight, a bias below zero before the ReLU): a constant map."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).eval()
    with torch.no_grad():
        model[0].weight[1] = 0
        model[0].bias[1] = -1.0
    return model


def test_is_cam_scores_a_constant_channel_once_and_still_equals_torchcam(tiny, photo):
    """hookviz scores the constant channel on the zeroed input once, torch-cam at every step;
    the maps are equal."""
    from torchcam.methods import ISCAM

    mine = layer_map(tiny, photo, "1", "is-cam", target=1, is_samples=3)
    theirs = torchcam_map(ISCAM, tiny, photo, "1", target=1, num_samples=3)
    assert relative(mine, theirs[0]) < 1e-3


def test_ss_cam_equals_torchcam_on_a_tiny_model_with_its_default_noise(tiny, photo):
    from torchcam.methods import SSCAM

    mine = layer_map(tiny, photo, "1", "ss-cam", target=1, ss_samples=4)
    theirs = torchcam_map(SSCAM, tiny, photo, "1", target=1, noise=SeededNoise(0, 2.0), num_samples=4)
    assert relative(mine, theirs[0]) < 1e-3


def test_occlusion_equals_captums_on_a_tiny_model_at_its_defaults(tiny, photo):
    from captum.attr import Occlusion

    mine = pixel_map(tiny, photo, "1", "occlusion", target=1)
    theirs = Occlusion(tiny).attribute(photo, sliding_window_shapes=(3, 16, 16), strides=(3, 8, 8), target=1)
    assert relative(mine, theirs[0].numpy()) < 1e-3


class Box:
    """xaitk's black box (``ClassifyImage``) around a model whose output row holds the scores:
    an H x W x C float image in, each class's score out."""

    def __new__(cls, model: nn.Module, labels: int):
        from smqtk_classifier.interfaces.classify_image import ClassifyImage

        class _Box(ClassifyImage):
            def get_labels(self):
                return list(range(labels))

            def classify_images(self, img_iter):
                for image in img_iter:
                    with torch.no_grad():
                        row = model(torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float())[0]
                    yield dict(enumerate(row.tolist()))

            def get_config(self):
                return {}

        return _Box()


@pytest.mark.slow  # measured: 1.5 s alone, most of it importing xaitk-saliency
def test_rise_masks_equal_xaitks_risegrid_with_the_same_seed():
    from xaitk_saliency.impls.perturb_image.rise import RISEGrid

    from hookviz.methods.rise import RISEOptions, mask_batches

    for side, (n, s, p1) in (((37, 42), (12, 5, 0.4)), ((32, 32), (6, 8, 0.5)), ((9, 30), (6, 3, 0.7))):
        settings = RISEOptions(rise_masks=n, rise_grid=s, rise_p1=p1, rise_seed=3)
        mine = torch.cat(list(mask_batches(side, settings, 7))).numpy()
        theirs = RISEGrid(n, s, p1, seed=3, threads=0).perturb(np.zeros((*side, 3), np.float32))
        assert mine.shape == theirs.shape and np.abs(mine - theirs).max() < 1e-6


@pytest.mark.slow  # measured: 9-14 s of CPU
def test_rise_equals_xaitks_risestack_and_leaves_the_callers_random_state(resnet18, photo):
    """xaitk scales its map to a largest magnitude of 1; hookviz's map, summed over the input's
    channels (as pixel_maps.png draws it), scaled alike, is equal."""
    from xaitk_saliency.impls.gen_image_classifier_blackbox_sal.rise import RISEStack

    states = torch.random.get_rng_state(), np.random.get_state()[1].copy()
    mine = pixel_map(resnet18, photo, "layer4", "rise", rise_masks=48, rise_grid=4, rise_p1=0.4, rise_seed=5)
    assert torch.equal(states[0], torch.random.get_rng_state()) and np.array_equal(states[1], np.random.get_state()[1])
    assert mine.shape == photo.shape[1:] and np.allclose(mine[0], mine[1])  # spread evenly over the channels
    summed = mine.sum(axis=0)
    theirs = RISEStack(48, 4, 0.4, seed=5, threads=0).generate(photo[0].permute(1, 2, 0).numpy(), Box(resnet18, 1000))[TARGET]
    assert relative(summed / np.abs(summed).max(), theirs) < 1e-3


@pytest.mark.slow  # measured: 2-3 s of CPU each
@pytest.mark.parametrize(("window", "stride", "which"), [(16, 8, "zero"), (10, 7, "blur"), (8, 8, "mean")])
def test_occlusion_equals_captums(resnet18, photo, window, stride, which):
    from captum.attr import Occlusion

    mine = pixel_map(
        resnet18, photo, "layer4", "occlusion", occlusion_window=window, occlusion_stride=stride, occlusion_baseline=which
    )
    theirs = Occlusion(resnet18).attribute(
        photo,
        sliding_window_shapes=(3, window, window),
        strides=(3, stride, stride),
        baselines=baseline(photo, which),
        target=TARGET,
    )
    assert np.abs(theirs.numpy()).max() > 0 and relative(mine, theirs[0].numpy()) < 1e-3


class SegmentScore(nn.Module):
    """A segmenter's score as hookviz's segmentation task defines it, as a one-column output:
    the mean logit of class ``index`` over the pixels the first pass predicted as it."""

    def __init__(self, model: nn.Module, x: torch.Tensor, index: int):
        super().__init__()
        self.model, self.index = model, index
        with torch.no_grad():
            self.register_buffer("where", (model(x)["out"].argmax(1) == index).float())

    def forward(self, x):
        logits = self.model(x)["out"][:, self.index]
        where = self.where if bool(self.where.any()) else torch.ones_like(self.where)
        return ((logits * where).flatten(1).sum(1) / where.sum())[:, None]


@pytest.fixture(scope="module")
def segmenter():
    torch.manual_seed(0)
    return torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None).eval()


@pytest.mark.slow
def test_every_method_maps_a_segmentation_as_its_reference_maps_the_tasks_score(segmenter, photo):
    from captum.attr import Occlusion
    from torchcam.methods import ISCAM, SSCAM
    from xaitk_saliency.impls.gen_image_classifier_blackbox_sal.rise import RISEStack

    x = photo[:, :, :, :SIDE]
    index = hookviz.explain(segmenter, x, layers=["backbone.2"], cam="gradcam").target.index
    scored = SegmentScore(segmenter, x, index).eval()
    mine = layer_map(segmenter, x, "backbone.2", "ss-cam", target=index, ss_samples=2, ss_seed=1)
    theirs = torchcam_map(SSCAM, scored, x, "model.backbone.2", target=0, noise=SeededNoise(1, 2.0), num_samples=2)
    assert relative(mine, theirs[0]) < 1e-3
    mine = layer_map(segmenter, x, "backbone.2", "is-cam", target=index, is_samples=2)
    theirs = torchcam_map(ISCAM, scored, x, "model.backbone.2", target=0, num_samples=2)
    assert relative(mine, theirs[0]) < 1e-3
    mine = pixel_map(segmenter, x, "backbone.2", "rise", target=index, rise_masks=24, rise_grid=4).sum(axis=0)
    theirs = RISEStack(24, 4, 0.5, seed=0, threads=0).generate(x[0].permute(1, 2, 0).numpy(), Box(scored, 1))[0]
    assert relative(mine / np.abs(mine).max(), theirs) < 1e-3
    mine = pixel_map(segmenter, x, "backbone.2", "occlusion", target=index)
    theirs = Occlusion(scored).attribute(x, sliding_window_shapes=(3, 16, 16), strides=(3, 8, 8), target=0)
    assert relative(mine, theirs[0].numpy()) < 1e-3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--occlusion-window", "64"], "--occlusion-window 64: the input is 32x32 pixels; give a window of at most 32"),
        (["--occlusion-window", "4", "--occlusion-stride", "5"], "--occlusion-stride 5: at most the window (4)"),
        (["--rise-p1", "0"], "--rise-p1 0"),
    ],
)
def test_bad_settings_are_refused_in_one_line(tmp_path, args, message):
    cam = "rise" if "--rise-p1" in args else "occlusion"
    result = hookviz_run(SAMPLES / "cat.png", "--resize", "32", "--cam", cam, *args, out=tmp_path / "out")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and message in lines[0], result.stderr
