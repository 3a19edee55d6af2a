"""hookviz.trust against its peers on the same maps: deletion and insertion against torch-cam's
DeletionInsertionMetric, ROAD against pytorch-grad-cam's, and the randomisation check's
promises (the caller's model and random state untouched, a model-blind map flagged)."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from functools import partial

import numpy as np
import pytest
import torch
import torchvision

import hookviz
from hookviz.trust import (
    ROAD_PERCENTILES,
    cascading_randomisation,
    deletion_insertion,
    parametrised_modules,
    road,
    spearman,
)

from .cli_helpers import hookviz_run
from .conftest import SAMPLES, hand_gradcam, tiny_net
from .explorer_helpers import explorer_text


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
        combined.append(
            ROADCombined(list(percentiles))(
                inputs[i : i + 1], maps[i : i + 1].numpy(), [ClassifierOutputSoftmaxTarget(int(classes[i]))], model
            )
        )
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
    np.testing.assert_allclose(
        [r.combined for r in ours], gradcam_road(model, inputs, maps, classes, ROAD_PERCENTILES, 7), atol=1e-5
    )
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
    np.testing.assert_allclose(
        [r.combined for r in ours], gradcam_road(model, inputs, at_size, classes, ROAD_PERCENTILES, 3), atol=1e-5
    )


# --- the randomisation check --------------------------------------------------------------------


def tiny_gradcams(inputs, classes):
    return lambda model: torch.stack(
        [torch.from_numpy(hand_gradcam(model, "features.3", image, int(c), False)) for image, c in zip(inputs, classes)]
    )


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

    def brightness(_model):
        return torch.nn.functional.avg_pool2d(inputs.mean(1, keepdim=True), 2)[:, 0]

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


# --- through the command and the API --------------------------------------------------------------


def run_cli(tmp_path, *args, image=None):
    photo = image or SAMPLES / "cat.png"
    return hookviz_run(
        photo, "--resize", "32", "--crop", "32", "--workers", "1", *args, weights=None, layer="features.3", out=tmp_path / "out"
    )


def test_faithfulness_through_the_command_equals_torchcam_on_the_runs_own_map(tmp_path):
    """report.json's areas are torch-cam's on the photo and CAM the run saved; the picture,
    the gallery and run.json's ranking follow."""
    result = run_cli(tmp_path, "--faithfulness", "--save-tensors", "--pictures", "cam")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "cat"
    layer = json.loads((folder / "report.json").read_text())["layers"][0]
    measured = layer["trust"]["faithfulness"]
    tensors = np.load(folder / "tensors.npz")
    inputs, cam = torch.from_numpy(tensors["input"]), torch.from_numpy(tensors["features.3/cam"])[None]
    theirs = torchcam_areas(tiny_net().eval(), inputs, cam)[0]
    assert [measured["deletion_insertion"]["deletion_auc"], measured["deletion_insertion"]["insertion_auc"]] == pytest.approx(
        theirs, abs=1e-5
    )
    assert len(measured["deletion_insertion"]["deletion"]) == 21 and len(measured["road"]["most_relevant_first"]) == 9
    assert "probability" in measured["score"] and "sanity" not in layer["trust"]
    assert layer["pictures"]["faithfulness"] == "features.3.faithfulness.png" and layer["pictures"]["sanity"] is None
    assert (folder / "features.3.faithfulness.png").exists() and not (folder / "features.3.sanity.png").exists()
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    (entry,) = run["trust"]["maps"]
    assert entry["method"] == "gradcam" and entry["layer"] == "features.3" and entry["images"] == 1
    assert entry["deletion_auc"] == pytest.approx(theirs[0], abs=1e-5)
    assert run["trust"]["summary"][0].startswith("faithfulness: on this photo, gradcam at features.3 has")
    gallery = explorer_text(tmp_path / "out")
    assert "features.3.faithfulness.png" in gallery and "How far to trust the maps" in gallery


def test_the_faithfulness_figure_labels_its_curves_axes_and_areas():
    result = hookviz.explain(tiny_net(), torch.rand(3, 24, 24), layers=["features.3"], faithfulness=True)
    measured = result["features.3"].trust
    figure = result.figure("features.3", "faithfulness")
    curves, road = figure.axes
    legend = [text.get_text() for text in curves.get_legend().get_texts()]
    assert legend == [
        f"deletion, area {measured.deletion.deletion_auc:.3f} (lower: better)",
        f"insertion, area {measured.deletion.insertion_auc:.3f} (higher: better)",
    ]
    assert "fraction of pixels deleted" in curves.get_xlabel() and "probability" in curves.get_ylabel()
    assert [len(line.get_xdata()) for line in road.get_lines()[:2]] == [9, 9]
    assert f"combined {measured.road.combined:+.3f}" in road.get_title()


def test_sanity_through_the_command_says_so_in_words(tmp_path):
    result = run_cli(tmp_path, "--sanity", "--pictures", "cam")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "cat"
    layer = json.loads((folder / "report.json").read_text())["layers"][0]
    sanity = layer["trust"]["sanity"]
    assert sanity["layers"] == ["fc", "features.3", "features.1", "features.0"] and len(sanity["correlations"]) == 4
    assert sanity["threshold"] == 0.5 and sanity["verdict"].startswith("passes" if sanity["explains_model"] else "fails")
    assert (folder / "features.3.sanity.png").exists() and "faithfulness" not in layer["trust"]
    assert "randomisation check: gradcam at features.3: " in result.stderr


def test_sanity_leaves_the_callers_model_and_random_state_alone():
    model, photo = tiny_net().train(), torch.rand(3, 24, 24)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    random_state = torch.get_rng_state()
    result = hookviz.explain(model, photo, layers=["features.3"], sanity=True)
    assert result["features.3"].trust.sanity.layers[0] == "fc"
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert model.training and torch.equal(random_state, torch.get_rng_state())


def test_a_segmenter_gets_the_sanity_check_and_refuses_faithfulness():
    from hookviz.errors import UsageError

    from .test_segment import painted_net

    result = hookviz.explain(painted_net(), torch.rand(3, 20, 30), layers=["conv"], sanity=True)
    assert result.task == "segment" and result["conv"].trust.sanity.layers == ("conv",)
    with pytest.raises(UsageError, match="faithfulness follows the target class's probability .* a segmentation model's"):
        hookviz.explain(painted_net(), torch.rand(3, 20, 30), layers=["conv"], faithfulness=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--faithfulness", "--cam", "none"], "--faithfulness measures a CAM; choose a --cam method, not none"),
        (["--sanity", "--cam", "none"], "--sanity measures a CAM; choose a --cam method, not none"),
    ],
)
def test_trust_options_are_refused_in_one_line(tmp_path, args, message):
    result = run_cli(tmp_path, *args)
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize(
    "flag, words",
    [
        ("--faithfulness", "--faithfulness follows the target class's probability as pixels are deleted; a detection model's"),
        ("--sanity", "--sanity explains each image's target again on randomised copies of the model; a detection model's"),
    ],
)
def test_a_detector_refuses_the_trust_measures_in_one_line(tmp_path, flag, words):
    result = hookviz_run(SAMPLES / "cat.png", flag, model="fasterrcnn_mobilenet_v3_large_320_fpn", out=tmp_path / "out")
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0] and f"drop {flag}" in lines[0], result.stderr


def test_trust_options_check_their_values():
    from hookviz.errors import UsageError
    from hookviz.options import TrustOptions

    with pytest.raises(UsageError, match="faithfulness='yes': give True or False"):
        TrustOptions(faithfulness="yes")
    with pytest.raises(UsageError, match="seed=-1: a seed is a whole number"):
        TrustOptions(seed=-1)


def test_skip_existing_redoes_an_image_measured_otherwise(tmp_path):
    assert run_cli(tmp_path, "--pictures", "none").exit_code == 0
    result = run_cli(tmp_path, "--pictures", "none", "--faithfulness", "--skip-existing")
    assert result.exit_code == 0, result.output
    assert "trust" in json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["layers"][0]
    again = run_cli(tmp_path, "--pictures", "none", "--faithfulness", "--skip-existing")
    assert "skipped" in again.stderr


def test_run_json_ranks_the_runs_maps_by_how_fast_they_delete_the_class(tmp_path):
    result = hookviz_run(
        [SAMPLES / "cat.png", SAMPLES / "coffee.png"],
        "--resize",
        "32",
        "--crop",
        "32",
        "--pictures",
        "none",
        "--faithfulness",
        weights=None,
        layer=("features.0", "features.3"),
        out=tmp_path / "out",
    )
    assert result.exit_code == 0, result.output
    trust = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]
    maps = trust["maps"]
    assert sorted(entry["layer"] for entry in maps) == ["features.0", "features.3"]
    assert maps[0]["deletion_auc"] <= maps[1]["deletion_auc"] and all(entry["images"] == 2 for entry in maps)
    reports = [json.loads((tmp_path / "out" / name / "report.json").read_text()) for name in ("cat", "coffee")]
    for entry in maps:
        areas = [
            layer["trust"]["faithfulness"]["deletion_insertion"]["deletion_auc"]
            for report in reports for layer in report["layers"] if layer["name"] == entry["layer"]
        ]  # fmt: skip
        assert entry["deletion_auc"] == pytest.approx(sum(areas) / 2)
    best, runner_up = maps
    assert trust["summary"][0].startswith(
        f"faithfulness: on these 2 photos, gradcam at {best['layer']} deletes the class fastest "
        f"(mean deletion area {best['deletion_auc']:.3f}"
    )
    assert f"next gradcam at {runner_up['layer']}" in trust["summary"][0]


def test_each_method_of_a_run_is_measured_and_run_json_ranks_the_methods(tmp_path):
    """``--cam gradcam,layercam,eigencam --faithfulness``: every layer method's map is measured
    (the areas are torch-cam's on that method's saved map), and run.json ranks the methods."""
    result = run_cli(tmp_path, "--faithfulness", "--save-tensors", "--pictures", "none", "--cam", "gradcam,layercam,eigencam")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "cat"
    trust = json.loads((folder / "report.json").read_text())["layers"][0]["trust"]
    assert sorted(trust["methods"]) == ["eigencam", "layercam"]
    tensors = np.load(folder / "tensors.npz")
    inputs = torch.from_numpy(tensors["input"])
    for method in ("layercam", "eigencam"):
        measured = trust["methods"][method]["faithfulness"]
        theirs = torchcam_areas(tiny_net().eval(), inputs, torch.from_numpy(tensors[f"features.3/cam.{method}"])[None])[0]
        areas = measured["deletion_insertion"]
        assert [areas["deletion_auc"], areas["insertion_auc"]] == pytest.approx(theirs, abs=1e-5)
        assert len(measured["road"]["most_relevant_first"]) == 9
    run = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]
    ranked = [entry["method"] for entry in run["maps"]]
    assert sorted(ranked) == ["eigencam", "gradcam", "layercam"]
    areas = [entry["deletion_auc"] for entry in run["maps"]]
    assert areas == sorted(areas)
    assert run["summary"][0].startswith(f"faithfulness: on this photo, {ranked[0]} at features.3 deletes the class fastest")


def test_sanity_checks_each_method_of_a_run_as_that_method_alone(tmp_path):
    """``--cam gradcam,layercam,scorecam --sanity``: every layer method's map is checked, each
    exactly as a run of that method alone checks it; report.json validates and run.json says
    each method's verdict."""
    from .test_records import _validator

    methods = ("gradcam", "layercam", "scorecam")
    result = run_cli(tmp_path / "all", "--sanity", "--pictures", "none", "--cam", ",".join(methods))
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "all" / "out" / "cat" / "report.json").read_text())
    _validator("report").validate(report)
    trust = report["layers"][0]["trust"]
    found = {"gradcam": trust["sanity"], **{name: trust["methods"][name]["sanity"] for name in methods[1:]}}
    for method in methods:
        alone = run_cli(tmp_path / method, "--sanity", "--pictures", "none", "--cam", method)
        assert alone.exit_code == 0, alone.output
        expected = json.loads((tmp_path / method / "out" / "cat" / "report.json").read_text())["layers"][0]["trust"]["sanity"]
        assert found[method]["layers"] == expected["layers"] == ["fc", "features.3", "features.1", "features.0"]
        assert found[method]["correlations"] == pytest.approx(expected["correlations"], abs=1e-6, nan_ok=True)
        assert found[method]["verdict"] == expected["verdict"]
    summary = json.loads((tmp_path / "all" / "out" / "run.json").read_text())["trust"]["summary"]
    for method in methods:
        assert any(line.startswith(f"randomisation check: {method} at features.3: ") for line in summary), summary


def assert_labels_tell_apart(labels, methods, values, word):
    """Each label is ``method, word VALUE`` with VALUE the measured value to its printed
    decimals (3 at least), and labels of values that differ differ."""
    printed = []
    for label, method, value in zip(labels, methods, values, strict=True):
        found = re.fullmatch(rf"{method}, {word} ([+-]?\d+\.(\d+))(, ties .*)?", label)
        assert found and len(found[2]) >= 3, label
        assert float(found[1]) == pytest.approx(value, abs=0.51 * 10 ** -len(found[2])), label
        printed.append(found[1])
    for (a, x), (b, y) in itertools.combinations(zip(values, printed), 2):
        assert abs(a - b) <= 1e-6 or x != y, labels


def test_the_faithfulness_figure_draws_each_measured_methods_curves():
    """``--cam gradcam,layercam,scorecam --faithfulness``: the picture has a deletion and an
    insertion panel with one labelled curve per method (its measured curve and area), and ROAD's
    curves of each method; the title names every method."""
    methods = ("gradcam", "layercam", "scorecam")
    result = hookviz.explain(tiny_net(), torch.rand(3, 24, 24), layers=["features.3"], cam=",".join(methods), faithfulness=True)
    trust = result["features.3"].trust
    measured = {"gradcam": trust, **{name: trust.methods[name] for name in methods[1:]}}
    figure = result.figure("features.3", "faithfulness")
    deletion, insertion, road = figure.axes
    for ax, curve, area in ((deletion, "deletion", "deletion_auc"), (insertion, "insertion", "insertion_auc")):
        legend = [text.get_text() for text in ax.get_legend().get_texts()]
        assert_labels_tell_apart(legend, methods, [getattr(measured[name].deletion, area) for name in methods], "area")
        for line, name in zip(ax.get_lines(), methods):
            assert np.allclose(line.get_ydata(), getattr(measured[name].deletion, curve))
        assert "fraction of pixels" in ax.get_xlabel() and "probability" in ax.get_ylabel() and curve in ax.get_title()
    legend = [text.get_text() for text in road.get_legend().get_texts()]
    assert_labels_tell_apart(legend, methods, [measured[name].road.combined for name in methods], "combined")
    assert len(road.get_lines()) >= 2 * len(methods)
    assert "gradcam, layercam, scorecam: how far to trust the maps" in figure.get_suptitle()


class _Holed(torch.nn.Module):
    """A convolution's output with one NaN activation (channel 0, top-left) that the model then
    reads as zero: the logits stay finite, the layer's maps need not."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        out = self.conv(x)
        hole = torch.zeros_like(out)
        hole[:, 0, 0, 0] = float("nan")
        return out + hole


def nan_net() -> torch.nn.Module:
    """Factory used as ``--model tests.test_trust:nan_net``."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        _Holed(), torch.nn.ReLU(), torch.nn.Identity(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3)
    )


class _Zeroed(torch.nn.Module):
    def forward(self, x):
        return torch.nan_to_num(x, nan=0.0)


def holed_net() -> torch.nn.Module:
    """nan_net with its NaN read as zero after the holed layer (``0``)."""
    model = nan_net()
    model[2] = _Zeroed()
    return model


def test_a_map_that_is_not_finite_says_so_in_one_note_and_fails_only_with_fail_on(tmp_path):
    args = ["--model", "tests.test_trust:holed_net", "--layer", "0", "--cam", "gradcam,scorecam", "--pictures", "none"]
    result = run_cli_with(tmp_path / "a", *args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "a" / "out" / "cat" / "report.json").read_text())
    assert report["logits"]["nonfinite"] == 0
    notes = [line for line in result.stderr.splitlines() if line.startswith("hookviz: note: ") and "not finite" in line]
    assert {method for method in ("gradcam", "scorecam") for line in notes if f"0 ({method})" in line} == {"gradcam", "scorecam"}
    assert all("cat.png" in line and "--fail-on nonfinite" in line for line in notes), notes
    assert any("cat.png" in note and "scorecam" in note for note in report["notes"])
    failed = run_cli_with(tmp_path / "b", *args, "--fail-on", "nonfinite")
    assert failed.exit_code == 3, failed.output
    assert any(
        line.startswith("hookviz: check nonfinite failed: ") and "cat.png 0: scorecam map has" in line
        for line in failed.stderr.splitlines()
    ), failed.stderr


def run_cli_with(tmp_path, *args):
    photo = SAMPLES / "cat.png"
    common = ["--resize", "32", "--crop", "32", "--workers", "1", "--out", str(tmp_path / "out")]
    return hookviz_run(photo, *common, *args, model=None, weights=None)


class _NanGradient(torch.nn.Module):
    """The identity forward, NaN backward (0 * d sqrt(u)/du at u = 0): a gradient method's map
    of the layer before it is not finite, a re-scoring method's is."""

    def forward(self, x):
        return x + 0 * torch.sqrt(x - x.detach())


def nan_gradient_net() -> torch.nn.Module:
    """Factory used as ``--model tests.test_trust:nan_gradient_net``."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        _NanGradient(),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_the_other_methods_are_measured_where_the_main_methods_map_is_not_finite(tmp_path):
    args = ["--layer", "0", "--faithfulness", "--sanity", "--pictures", "cam"]
    result = run_cli_with(tmp_path / "both", "--model", "tests.test_trust:nan_gradient_net", "--cam", "gradcam,scorecam", *args)
    assert result.exit_code == 0, result.output
    assert "0 (gradcam): the map has 1024 NaN/Inf values of 1024" in result.stderr
    folder = tmp_path / "both" / "out" / "cat"
    trust = json.loads((folder / "report.json").read_text())["layers"][0]["trust"]
    assert "faithfulness" not in trust and "sanity" not in trust and sorted(trust["methods"]) == ["scorecam"]
    alone = run_cli_with(tmp_path / "alone", "--model", "tests.test_trust:nan_gradient_net", "--cam", "scorecam", *args)
    assert alone.exit_code == 0, alone.output
    expected = json.loads((tmp_path / "alone" / "out" / "cat" / "report.json").read_text())["layers"][0]["trust"]
    scorecam = trust["methods"]["scorecam"]
    assert scorecam["faithfulness"]["deletion_insertion"]["deletion_auc"] == pytest.approx(
        expected["faithfulness"]["deletion_insertion"]["deletion_auc"], abs=1e-6
    )
    assert scorecam["sanity"]["correlations"] == pytest.approx(expected["sanity"]["correlations"], abs=1e-6)
    assert (folder / "0.faithfulness.png").exists() and (folder / "0.sanity.png").exists()
    maps = json.loads((tmp_path / "both" / "out" / "run.json").read_text())["trust"]["maps"]
    assert [(entry["method"], entry["images"]) for entry in maps] == [("scorecam", 1)]


def test_the_sanity_figure_draws_a_row_per_checked_method():
    methods = ("gradcam", "layercam", "scorecam")
    result = hookviz.explain(tiny_net(), torch.rand(3, 24, 24), layers=["features.3"], cam=",".join(methods), sanity=True)
    trust = result["features.3"].trust
    checked = {"gradcam": trust.sanity, **{name: trust.methods[name].sanity for name in methods[1:]}}
    figure = result.figure("features.3", "sanity")
    maps = [ax for ax in figure.axes if ax.images]
    steps = len(maps) // len(methods)
    assert steps == 1 + len(checked["gradcam"].layers) and "gradcam, layercam, scorecam" in figure.get_suptitle()
    for row, name in enumerate(methods):
        first = maps[row * steps]
        assert first.get_title() == f"{name}: original"
        assert np.allclose(first.images[0].get_array(), checked[name].maps[0], equal_nan=True)
        assert np.allclose(maps[row * steps + steps - 1].images[0].get_array(), checked[name].maps[-1], equal_nan=True)
    curves = [ax for ax in figure.axes if not ax.images]
    assert len(curves) == len(methods)
    for ax, name in zip(curves, methods):
        assert np.allclose(
            ax.get_lines()[0].get_ydata(), [np.nan if c is None else c for c in checked[name].correlations], equal_nan=True
        )
        assert ax.get_title().startswith(f"{name}: ")
