"""hookviz.trust against its peers on the same maps: deletion and insertion against torch-cam's
DeletionInsertionMetric, ROAD against pytorch-grad-cam's, and the randomisation check's
promises (the caller's model and random state untouched, a model-blind map flagged)."""

from __future__ import annotations

import contextlib
from functools import partial

import numpy as np
import pytest
import torch
import torchvision

from hookviz.trust import (
    ROAD_PERCENTILES, cascading_randomisation, deletion_insertion, parametrised_modules, road, spearman,
)

from .conftest import hand_gradcam, tiny_net


class GivenMaps:
    """A torch-cam CAM extractor that returns the maps it was given, so that torch-cam's
    metric measures exactly the maps hookviz measures."""

    def __init__(self, model, maps):
        self.model, self.maps = model, maps

    def __call__(self, class_idx=None, scores=None, normalized=True, **kwargs):
        return [self.maps]

    def fuse_cams(self, cams):
        return cams[0]

    def _hooks_off(self):
        return contextlib.nullcontext()


def softmax_score(model, classes):
    """``score(batch, images)``: the softmax probability of each image's class."""
    def score(batch, images):
        return torch.softmax(model(batch), dim=1)[torch.arange(len(batch)), classes[images]]
    return score


def seeded(size: int, count: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    inputs = torch.randn(count, 3, size, size)
    maps = torch.rand(count, size // 16, size // 16)  # no ties, even once resized
    with torch.no_grad():
        classes = model(inputs).argmax(1)
    return model, inputs, maps, classes


def torchcam_areas(model, inputs, maps):
    from torchcam.metrics import DeletionInsertionMetric

    areas = []
    for i in range(len(inputs)):
        metric = DeletionInsertionMetric(GivenMaps(model, maps[i : i + 1]), partial(torch.softmax, dim=-1))
        metric.update(inputs[i : i + 1])
        summary = metric.summary()
        areas.append((summary["deletion_auc"], summary["insertion_auc"]))
    return np.array(areas)


def check_deletion_insertion(model, inputs, maps, classes):
    ours = deletion_insertion(softmax_score(model, classes), inputs, maps, batch_size=16)
    theirs = torchcam_areas(model, inputs, maps)
    np.testing.assert_allclose([(r.deletion_auc, r.insertion_auc) for r in ours], theirs, atol=1e-5)
    with torch.no_grad():
        probabilities = torch.softmax(model(inputs), 1)[torch.arange(len(inputs)), classes]
        blank = torch.softmax(model(torch.zeros_like(inputs)), 1)[torch.arange(len(inputs)), classes]
    for result, probability, nothing in zip(ours, probabilities, blank):
        assert len(result.fractions) == len(result.deletion) == len(result.insertion) == 21
        assert result.fractions[0] == 0 and result.fractions[-1] == 1
        assert result.deletion[0] == pytest.approx(float(probability), abs=1e-5) == result.insertion[-1]
        assert result.deletion[-1] == pytest.approx(float(nothing), abs=1e-5) == result.insertion[0]
        assert result.forward_passes == 40
    return ours


def test_deletion_insertion_equal_torchcam_on_a_small_net():
    model = tiny_net().eval()
    torch.manual_seed(3)
    inputs, maps = torch.randn(2, 3, 32, 32), torch.rand(2, 5, 5)
    with torch.no_grad():
        classes = model(inputs).argmax(1)
    check_deletion_insertion(model, inputs, maps, classes)


def test_deletion_insertion_equal_torchcam_where_maps_tie():
    """A CAM after its ReLU is flat where it is zero: both rank ties by position (stable sort)."""
    model = tiny_net().eval()
    torch.manual_seed(4)
    inputs = torch.randn(2, 3, 32, 32)
    maps = (torch.rand(2, 4, 4) - 0.6).clamp(min=0)
    with torch.no_grad():
        classes = model(inputs).argmax(1)
    check_deletion_insertion(model, inputs, maps, classes)


@pytest.mark.slow
def test_deletion_insertion_equal_torchcam_on_resnet18():
    check_deletion_insertion(*seeded(112))


def gradcam_road(model, inputs, maps, classes, percentiles, seed):
    from pytorch_grad_cam.metrics.road import ROADCombined
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    combined = []
    for i in range(len(inputs)):
        torch.manual_seed(seed)  # the noise of the imputation: hookviz seeds a generator of its own alike
        combined.append(ROADCombined(list(percentiles))(
            inputs[i : i + 1], maps[i : i + 1].numpy(), [ClassifierOutputSoftmaxTarget(int(classes[i]))], model))
    return np.concatenate(combined)


def test_road_combined_equals_pytorch_grad_cam(monkeypatch):
    """With loud noise (1 instead of 0.01), so that the noise's draws must agree too."""
    from pytorch_grad_cam.metrics.road import NoisyLinearImputer

    monkeypatch.setattr(NoisyLinearImputer.__init__, "__defaults__", (1.0, NoisyLinearImputer.__init__.__defaults__[1]))
    model = tiny_net().eval()
    torch.manual_seed(5)
    inputs, maps = torch.randn(2, 3, 24, 24), torch.rand(2, 24, 24)
    with torch.no_grad():
        classes = model(inputs).argmax(1)
    ours = road(softmax_score(model, classes), inputs, maps, seed=7, noise=1.0)
    np.testing.assert_allclose([r.combined for r in ours], gradcam_road(model, inputs, maps, classes, ROAD_PERCENTILES, 7),
                               atol=1e-5)
    assert all(r.forward_passes == 1 + 2 * len(ROAD_PERCENTILES) for r in ours)


@pytest.mark.parametrize("order", ["most", "least"])
def test_road_each_percentile_equals_pytorch_grad_cam(order):
    """Without noise, point by point: MoRF imputes the top of the map, LeRF the bottom."""
    from pytorch_grad_cam.metrics.road import ROADLeastRelevantFirst, ROADMostRelevantFirst
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    model = tiny_net().eval()
    torch.manual_seed(6)
    inputs, maps = torch.randn(1, 3, 24, 24), torch.rand(1, 6, 6)
    with torch.no_grad():
        classes = model(inputs).argmax(1)
    ours = road(softmax_score(model, classes), inputs, maps, percentiles=(20, 50, 80), noise=0.0)[0]
    at_size = torch.nn.functional.interpolate(maps[:, None], size=(24, 24), mode="bilinear")[:, 0].numpy()
    theirs = []
    for p in (20, 50, 80):
        metric = (ROADMostRelevantFirst if order == "most" else ROADLeastRelevantFirst)(p)
        metric.perturbation.imputer.noise = 0.0
        theirs.append(metric(inputs, at_size, [ClassifierOutputSoftmaxTarget(int(classes[0]))], model)[0])
    curve = ours.most_relevant_first if order == "most" else ours.least_relevant_first
    np.testing.assert_allclose(curve, theirs, atol=1e-5)


def test_road_leaves_the_global_random_state_alone():
    model = tiny_net().eval()
    inputs, maps = torch.randn(1, 3, 16, 16), torch.rand(1, 16, 16)
    before = torch.get_rng_state()
    first = road(softmax_score(model, torch.tensor([0])), inputs, maps, percentiles=(50,))
    assert torch.equal(before, torch.get_rng_state())
    assert first == road(softmax_score(model, torch.tensor([0])), inputs, maps, percentiles=(50,))


@pytest.mark.slow
def test_road_combined_equals_pytorch_grad_cam_on_resnet18():
    model, inputs, maps, classes = seeded(112)
    ours = road(softmax_score(model, classes), inputs, maps, seed=3)
    at_size = torch.nn.functional.interpolate(maps[:, None], size=(112, 112), mode="bilinear")[:, 0]
    np.testing.assert_allclose([r.combined for r in ours], gradcam_road(model, inputs, at_size, classes,
                                                                         ROAD_PERCENTILES, 3), atol=1e-5)


# --- the randomisation check --------------------------------------------------------------------

def tiny_gradcams(inputs, classes):
    return lambda model: torch.stack([
        torch.from_numpy(hand_gradcam(model, "features.3", image, int(c), False)) for image, c in zip(inputs, classes)
    ])


def test_randomisation_goes_from_the_output_down_on_a_copy():
    model = tiny_net().eval()
    torch.manual_seed(8)
    inputs, classes = torch.randn(2, 3, 32, 32), torch.tensor([1, 3])
    explain = tiny_gradcams(inputs, classes)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    random_state = torch.get_rng_state()
    results = cascading_randomisation(model, explain, explain(model))
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(random_state, torch.get_rng_state()) and not model.training
    assert [name for name, _ in parametrised_modules(model)] == ["features.0", "features.1", "features.3", "fc"]
    for result in results:
        assert result.layers == ("fc", "features.3", "features.1", "features.0")
        assert len(result.correlations) == 4 and result.maps.shape == (5, 16, 16)
        assert result.final < 0.5  # Grad-CAM of random weights is another map
        assert result.explains_model and result.verdict.startswith("passes")
    assert results == cascading_randomisation(model, explain, explain(model))  # its own seed: the same again


def test_randomisation_flags_a_map_that_ignores_the_model():
    """A map of the photo's own brightness (an edge detector would do) survives every layer."""
    model = tiny_net().eval()
    torch.manual_seed(9)
    inputs = torch.randn(2, 3, 32, 32)
    brightness = lambda _model: torch.nn.functional.avg_pool2d(inputs.mean(1, keepdim=True), 2)[:, 0]
    results = cascading_randomisation(model, brightness, brightness(model))
    for result in results:
        assert result.final == pytest.approx(1.0) and not result.explains_model
        assert result.verdict.startswith("fails") and "shows the input" in result.verdict
        assert result.to_json()["explains_model"] is False


def test_spearman_equals_scipy_with_ties():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, (8, 8)).astype(float), rng.random((8, 8))
    assert spearman(a, b) == pytest.approx(spearmanr(a.ravel(), b.ravel()).statistic)
    assert spearman(np.zeros((4, 4)), b[:4, :4]) is None
