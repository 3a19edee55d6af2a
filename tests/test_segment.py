"""Segmentation models: targets over pixels, CAMs equal to pytorch-grad-cam's, pictures, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torchvision

import hookviz

from .cli_helpers import hookviz_cli, hookviz_run
from .conftest import SAMPLES
from .explorer_helpers import explorer_pictures


@pytest.fixture(scope="module")
def deeplab():
    """Random weights, and random BatchNorm statistics: with the initial ones (mean 0, var 1)
    the random model paints one class over the whole photo."""
    torch.manual_seed(0)
    model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_var.uniform_(0.5, 2)
                module.running_mean.normal_(0, 0.2)
    return model


@pytest.fixture(scope="module")
def cat_tensor():
    from PIL import Image

    photo = Image.open(SAMPLES / "cat.png").convert("RGB").resize((128, 96))
    return (torchvision.transforms.functional.to_tensor(photo) - 0.45) / 0.225


def _raw_gradcam(cam) -> np.ndarray:
    """pytorch-grad-cam's Grad-CAM before its min-max scaling and resizing."""
    activations = cam.activations_and_grads.activations[0].numpy()
    gradients = cam.activations_and_grads.gradients[0].numpy()
    return np.maximum((gradients.mean(axis=(2, 3), keepdims=True) * activations).sum(axis=1), 0)[0]


class _Out(torch.nn.Module):
    """pytorch-grad-cam's tutorial wrapper: the segmenter's ``out`` entry only."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


@pytest.mark.parametrize("role", ["largest", "second", "absent"])  # predicted on most pixels, on some, on none
def test_segmentation_cam_equals_pytorch_grad_cam(deeplab, cat_tensor, role):
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget

    x = cat_tensor
    present = [share.index for share in hookviz.explain(deeplab, x, layers=["backbone.16"]).prediction.classes]
    assert len(present) >= 2
    target = {"largest": "top1", "second": str(present[1]), "absent": str(min(set(range(21)) - set(present)))}[role]
    result = hookviz.explain(deeplab, x, layers=["backbone.16"], target=target)
    assert result.task == "segment" and result.prediction.mask.shape == (96, 128)
    index = result.target.index
    mask = result.prediction.mask == index
    if not mask.any():  # the objective then covers every pixel, and the report says so
        assert "over all pixels" in result.prediction.objective and result.notes
        mask = np.ones_like(mask)
    with GradCAM(model=_Out(deeplab), target_layers=[deeplab.backbone.get_submodule("16")]) as cam:
        cam(input_tensor=x[None], targets=[SemanticSegmentationTarget(index, mask.astype(np.float32))])
        theirs = _raw_gradcam(cam)
    ours = result.layers[0].cam
    assert ours.shape == theirs.shape == (6, 8)
    if role != "absent":
        assert 0.05 < mask.mean() < 0.95 and theirs.max() > 0
    assert np.abs(ours - theirs).max() <= 1e-3 * max(np.abs(theirs).max(), 1e-12)


class Painted(torch.nn.Module):
    """Logits that paint class 2 over the left 60%, class 5 (more sure of itself) over the
    rest but a corner of background."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        features = self.conv(x)
        logits = torch.zeros(x.shape[0], 8, *x.shape[-2:])
        logits[:, 2, :, : int(0.6 * x.shape[-1])] = 5
        logits[:, 5, :, int(0.6 * x.shape[-1]) :] = 8
        logits[:, 0, :4, -4:] = 10
        return {"out": logits + 0.01 * features.mean(1, keepdim=True)}


def painted_net():
    return Painted().eval()


def test_top1_is_the_largest_class_besides_background_and_topk_the_largest_present():
    names = [f"c{i}" for i in range(8)]
    result = hookviz.explain(painted_net(), torch.rand(3, 20, 30), layers=["conv"], categories=names, topk=3)
    assert result.task == "segment" and result.target.name == "c2"
    assert [score.index for score, _ in result.layers[0].topk_cams] == [2, 5]  # background is not explained
    fractions = {share.name: share.fraction for share in result.prediction.classes}
    assert fractions["c2"] == pytest.approx(0.6, abs=1e-5) and fractions["c0"] == pytest.approx(16 / 600, abs=1e-5)
    assert "over the 360 pixels predicted as c2" in result.prediction.objective


def test_the_top5_line_and_report_give_each_classs_share_of_pixels_largest_first(photo, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(
        photo,
        "--task",
        "segment",
        "--resize",
        "30",
        "--pictures",
        "none",
        model="tests.test_segment:painted_net",
        layer="conv",
        out=out,
    )
    assert result.exit_code == 0, result.output
    top5 = json.loads((out / "photo" / "report.json").read_text())["top5"]
    assert [s["index"] for s in top5] == [2, 5] and top5[0]["probability"] < top5[1]["probability"]
    assert top5[0]["fraction"] > top5[1]["fraction"] > 0.3
    assert json.loads((out / "run.json").read_text())["images"][0]["top5"] == top5
    line = next(line for line in result.stdout.splitlines() if "photo" in line and "target" in line)
    assert "(share of pixels, mean probability there): 2 " in line, line
    assert f"2 {100 * top5[0]['fraction']:.1f}% {top5[0]['probability']:.3f} · 5 " in line, line


@pytest.mark.slow
def test_a_segmentation_run_writes_its_mask_picture_and_report(tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", "--resize", "96", "--topk", "2", model="lraspp_mobilenet_v3_large", out=out)
    assert result.exit_code == 0, result.output
    assert "using backbone." in result.stderr and "the backbone's last feature map" in result.stderr
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["task"] == "segment" and report["preprocessing"]["mode"] == "shorter"
    assert report["preprocessing"]["resize"] == 96 and sum(
        c["fraction"] for c in report["prediction"]["classes"]
    ) == pytest.approx(1)
    assert "prediction.png" in report["files"]
    layer = report["layers"][0]["name"]
    assert (out / "cat" / f"{layer}.cam.png").exists()
    page = (out / "index.html").read_text()
    assert page and "cat/prediction.png" in explorer_pictures(out)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target", "zebra"], "--target zebra: not a class name of this model"),
        (["--crop", "224"], "--crop: a segmentation model sees the whole photo"),
        (["--objective", "ce"], "--objective ce: a segmentation is explained by the target class's logits"),
    ],
)
def test_segmentation_usage_errors_are_one_line(tmp_path, args, message):
    result = hookviz_run(SAMPLES / "cat.png", *args, model="lraspp_mobilenet_v3_large", out=tmp_path / "out")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


class _TinySegmenter(torch.nn.Module):
    """torchvision's segmentation interface (``{"out": N, C, H, W}``) at a toy's size."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
        self.classifier = torch.nn.Conv2d(8, 3, 1)

    def forward(self, x):
        return {"out": self.classifier(self.features(x))}


@pytest.mark.parametrize("resize", [64, 100])
def test_a_resize_alone_needs_no_crop_for_a_module_of_any_task(resize):
    """A module's task is probed at the usual ImageNet transform (resize 256, crop 224) with the
    user's resize: a resize below 224 was refused as "crop=224 is larger than resize=64", a
    crop the user never gave. The photo's shorter side is now the resize, for each task."""
    torch.manual_seed(0)
    for model in (_TinySegmenter().eval(), torchvision.models.resnet18(num_classes=4).eval()):
        result = hookviz.explain(model, SAMPLES / "cat.png", inputs=hookviz.InputOptions(resize=resize))
        assert min(result.image.tensor.shape[-2:]) == resize


def test_run_json_gives_every_image_the_runs_task_also_failed_and_skipped_ones(photo, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    out = tmp_path / "out"
    args = ["run", str(photo), str(broken), "--model", "tests.test_segment:painted_net", "--task", "segment"]
    args += ["--resize", "30", "--layer", "conv", "--pictures", "none", "--out", str(out)]
    first = hookviz_cli(*args)
    assert first.exit_code == 1, first.output  # the broken photo fails
    again = hookviz_cli(*args, "--skip-existing")
    assert again.exit_code == 1, again.output
    document = json.loads((out / "run.json").read_text())
    assert document["task"] == "segment"
    assert {(image["status"], image["task"]) for image in document["images"]} == {("skipped", "segment"), ("failed", "segment")}


@pytest.mark.parametrize(
    "resize, choice",
    [
        ("128", "backbone.16 (Conv2dNormActivation), the backbone's last feature map"),
        (
            "64",
            "backbone.7.block.0 (Conv2dNormActivation), the backbone's last feature map of at least 7x7 pixels: "
            "its later ones, to backbone.16, are too coarse to show where",
        ),
    ],
)
def test_the_default_layers_reason_says_when_it_is_not_the_backbones_last_map(tmp_path, resize, choice):
    """At --resize 64, backbone.7.block.0 was called "the backbone's last feature map"."""
    out = tmp_path / "out"
    command = ["run", str(SAMPLES / "cat.png"), "--model", "lraspp_mobilenet_v3_large", "--weights", "none"]
    result = hookviz_cli(*command, "--resize", resize, "--pictures", "none", "--out", out)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "cat" / "report.json").read_text())["layer_choice"] == choice
    assert f"no --layer given: using {choice}\n" in result.stderr
