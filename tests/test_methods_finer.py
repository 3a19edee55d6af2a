"""Finer-CAM (``--cam finer-cam``) against pytorch-grad-cam's ``FinerCAM`` and torch-cam's, on the
random-weight resnet18 and seeded batch of tests/test_method_references.py; its refusals through
the command line.

pytorch-grad-cam's objective (softmax-weighted, alpha 1) is hookviz's default; torch-cam's (a plain
mean, gamma 0.6) is ``finer_weighting="mean", finer_alpha=0.6``. The two references' defaults make
different maps, which the last reference test shows (docs/methods.md says so).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from hookviz import Explainer, LayerOptions, TargetOptions
from tests.cli_helpers import hookviz_run
from tests.test_method_references import (  # noqa: F401  (fixtures)
    POSITIVE,
    SIDE,
    batch,
    correlation,
    relative,
    resnet18,
    scaled_like_pytorch_grad_cam,
)


def ours(model, batch, layers: tuple[str, ...], target: int, **settings) -> list[np.ndarray]:  # noqa: F811
    """hookviz's raw finer-cam maps of ``batch``, one (N, h, w) stack per layer."""
    from PIL import Image

    from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
    from hookviz.methods.finer_cam import FinerOptions
    from hookviz.models.loading import LoadedModel

    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("resnet18", model, "seeded", None, Preprocessing())
    options = TargetOptions(target=str(target), cam="finer-cam", settings=(FinerOptions(**settings),))
    explainer = Explainer.create(loaded, layers=LayerOptions(layers), target=options)
    results = explainer.explain_batch(images)
    return [np.stack([result.layers[n].cam for result in results]) for n in range(len(layers))]


def pytorch_grad_cams(model, batch, layer: str, target: int, **forward) -> tuple[np.ndarray, np.ndarray]:  # noqa: F811
    """pytorch-grad-cam's ``FinerCAM`` (Grad-CAM base): its public result and its raw map."""
    from pytorch_grad_cam import FinerCAM

    raw = []
    with FinerCAM(model, [model.get_submodule(layer)]) as cam:
        original = cam.base_cam.get_cam_image
        cam.base_cam.get_cam_image = lambda *args, **kwargs: raw.append(original(*args, **kwargs)) or raw[-1]
        scaled = cam(batch, target_idx=target, **forward)
    return scaled, np.maximum(raw[0], 0)


def torch_cams(model, batch, layer: str, target: int, **settings) -> np.ndarray:  # noqa: F811
    """torch-cam's ``FinerCAM`` (Grad-CAM base), not normalised."""
    from torchcam.methods import FinerCAM

    with FinerCAM(model, layer, input_shape=(3, SIDE, SIDE), **settings) as extractor:
        scores = model(batch)
        return extractor(target, scores, normalized=False)[0].detach().numpy()


def test_finer_cam_equals_pytorch_grad_cams_finer_cam(resnet18, batch):  # noqa: F811
    (mine,) = ours(resnet18, batch, ("layer4",), POSITIVE)
    scaled, theirs = pytorch_grad_cams(resnet18, batch, "layer4", POSITIVE)
    assert mine.shape == theirs.shape == (2, 4, 4) and theirs.max() > 0
    assert relative(mine, theirs) < 1e-3
    for hookviz_map, public in zip(scaled_like_pytorch_grad_cam(mine), scaled):
        assert correlation(hookviz_map, public) >= 0.999


def test_finer_cams_settings_equal_pytorch_grad_cams_at_two_layers(resnet18, batch):  # noqa: F811
    """Two comparison classes and alpha 0.5, at layer3 and layer4 (one contrast pass serves both)."""
    mine = ours(resnet18, batch, ("layer3", "layer4"), POSITIVE, finer_classes=2, finer_alpha=0.5)
    for layer, hookviz_map in zip(("layer3", "layer4"), mine):
        _, theirs = pytorch_grad_cams(resnet18, batch, layer, POSITIVE, alpha=0.5, comparison_categories=[1, 2])
        assert theirs.max() > 0 and relative(hookviz_map, theirs) < 1e-3


def test_mean_weighting_equals_torch_cams_finer_cam(resnet18, batch):  # noqa: F811
    (mine,) = ours(resnet18, batch, ("layer4",), POSITIVE, finer_weighting="mean", finer_alpha=0.6)
    theirs = torch_cams(resnet18, batch, "layer4", POSITIVE)  # its defaults: gamma 0.6, 3 references
    assert theirs.max() > 0 and relative(mine, theirs) < 1e-3


def test_the_two_references_defaults_make_different_maps(resnet18, batch):  # noqa: F811
    """pytorch-grad-cam weights the nearest classes by their softmax (alpha 1), torch-cam takes their
    plain mean (gamma 0.6): the same method, different maps; hookviz's default is pytorch-grad-cam's."""
    _, pgc = pytorch_grad_cams(resnet18, batch, "layer4", POSITIVE)
    tc = torch_cams(resnet18, batch, "layer4", POSITIVE)
    assert relative(tc, pgc) > 0.05


def test_two_classes_compare_the_target_with_the_other_as_pytorch_grad_cam(batch):  # noqa: F811
    """With fewer classes than asked for, the target is set against every other (pgc clamps alike)."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)).eval()
    (mine,) = ours(model, batch, ("1",), 1)
    _, theirs = pytorch_grad_cams(model, batch, "1", 1)
    assert theirs.max() > 0 and relative(mine, theirs) < 1e-3


def test_finer_cam_of_an_embedding_is_refused_in_one_line(photo, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(photo, "--cam", "finer-cam", "--target-image", photo, "-q", out=out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: --cam finer-cam without comparison classes: tests.conftest:tiny_net is an embed model "
        "(embedding similarity), whose target has no other classes to set it against; choose a classifier or another method"
    )
    assert not out.exists()


def test_finer_cam_of_a_single_class_is_refused_in_one_line(photo, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(photo, "--cam", "finer-cam", "-q", model="tests.conftest:one_value_net", out=out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: --cam finer-cam without comparison classes: the model has a single class, so there is "
        "nothing to set its target against; choose another method"
    )
    assert not (out / "photo").exists()


@pytest.mark.parametrize(
    "given, said",
    [
        (("--finer-classes", "0"), "--finer-classes 0: must be from 1 to 1000"),
        (("--finer-weighting", "max"), "--finer-weighting"),
    ],
)
def test_bad_settings_are_refused_in_one_line(photo, tmp_path, given, said):
    result = hookviz_run(photo, "--cam", "finer-cam", *given, "-q", out=tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().startswith(f"hookviz: error: {said}") and "\n" not in result.stderr.strip()


def test_other_methods_keep_no_graph_for_contrast(monkeypatch):
    """Grad-CAM alone back-propagates once and frees its graph; finer-cam adds one backward pass."""
    import hookviz
    from hookviz.explaining.recording import Recording
    from tests.conftest import tiny_net

    kept = []
    original = Recording.gradients

    def counted(self, objective, **kwargs):
        kept.append(kwargs.get("retain_graph", False))
        return original(self, objective, **kwargs)

    monkeypatch.setattr(Recording, "gradients", counted)
    hookviz.explain(tiny_net(), torch.rand(3, 32, 32), layers=["features.1", "features.3"], cam="gradcam")
    assert kept == [False]
    kept.clear()
    hookviz.explain(tiny_net(), torch.rand(3, 32, 32), layers=["features.1", "features.3"], cam="gradcam,finer-cam")
    assert kept == [True, True]


def test_each_top_class_is_set_against_its_own_nearest_classes(resnet18, batch):  # noqa: F811
    """With ``--topk 2`` the second class's map is pytorch-grad-cam's FinerCAM of that class."""
    from PIL import Image

    from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
    from hookviz.models.loading import LoadedModel

    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("resnet18", resnet18, "seeded", None, Preprocessing())
    options = TargetOptions(cam="finer-cam", topk=2)
    results = Explainer.create(loaded, layers=LayerOptions(("layer4",)), target=options).explain_batch(images)
    for n, result in enumerate(results):
        second, mine = result.layers[0].topk_cams[1]
        _, theirs = pytorch_grad_cams(resnet18, batch[n : n + 1], "layer4", second.index)
        assert theirs.max() > 0 and relative(mine[None], theirs) < 1e-3


def test_finer_cam_runs_beside_gradcam_through_the_command_line(photo, tmp_path):
    import json

    out = tmp_path / "out"
    result = hookviz_run(photo, "--cam", "gradcam,finer-cam", "--finer-weighting", "mean", "-q", out=out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "photo" / "report.json").read_text(encoding="utf-8"))
    assert report["asked"]["target"]["settings"]["finer-cam"] == {
        "finer_classes": 3,
        "finer_alpha": 1.0,
        "finer_weighting": "mean",
    }
    assert report["layers"][0]["cams"]["finer-cam"]["max"] > 0
