"""captum's gradient maps of the input, each against captum 0.9's own class on the same
random-weight model and input: ``saliency`` (``Saliency``), ``input-x-gradient``
(``InputXGradient``), ``deconvolution`` (``Deconvolution``), ``deeplift`` (``DeepLift``),
``deeplift-shap`` (``DeepLiftShap``) and ``gradient-shap`` (``GradientShap``): the raw maps
differ by less than 1e-3 of captum's largest value.

Where captum is wrong the test shows it (docs/methods.md says so): its DeepLift refuses a
module called twice in one pass (a torchvision ResNet block's ``relu``), loses max pooling's
rule where a nonlinearity's output goes straight into the pooling (the stem of a ResNet), and
passes the plain gradient through a ReLU called as a function, which hookviz refuses.
"""

from __future__ import annotations

import contextlib
import copy
import types
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torch import nn

import hookviz
from hookviz import Explainer, LayerOptions, TargetOptions, UsageError
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.methods.deeplift import DeepLiftOptions, deeplift_maps
from hookviz.methods.deeplift_shap import DeepLiftShapOptions, draw_baselines, generator
from hookviz.methods.gradient_shap import GradientShapOptions, draws
from hookviz.methods.integrated_gradients import baseline
from hookviz.models.loading import LoadedModel
from tests.cli_helpers import hookviz_run
from tests.conftest import SAMPLES

SIDE = 32
TARGET = 8


@pytest.fixture(scope="module")
def resnet18():
    torch.manual_seed(0)  # fixed weights: the same for hookviz and captum
    return torchvision.models.resnet18(weights=None).eval()


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(1)
    return torch.randn(2, 3, SIDE, SIDE)


@pytest.fixture(autouse=True)
def _quiet_captum():
    with warnings.catch_warnings():
        # DeepLift says "Setting forward, backward hooks and attributes on non-linear activations"
        warnings.filterwarnings("ignore", message=".*hooks.*", category=UserWarning)
        yield


def pixel_maps(model, batch, method: str, target: int = TARGET, **options) -> np.ndarray:
    """hookviz's raw (C, H, W) maps of ``batch`` by ``method``, one per photo, through the explainer."""
    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("model", model, "seeded", None, Preprocessing())
    layer = next(name for name, module in model.named_modules() if isinstance(module, nn.Conv2d))
    target_options = TargetOptions(target=str(target), cam=method, **options)
    results = Explainer.create(loaded, layers=LayerOptions((layer,)), target=target_options).explain_batch(images)
    return np.stack([result.pixel_maps[method].map for result in results])


def relative(ours, theirs) -> float:
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    assert np.abs(theirs).max() > 0
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def _relus(model: nn.Module) -> list[tuple[str, nn.Module, bool, int]]:
    """Each ReLU with its in-place flag and its hooks' count: what a method must leave as it was."""
    return [
        (name, m, m.inplace, len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks))
        for name, m in model.named_modules()
        if isinstance(m, nn.ReLU)
    ]


# ----------------------------------------------------------------------------- one pass each


@pytest.mark.parametrize(
    "method, reference", [("saliency", "Saliency"), ("input-x-gradient", "InputXGradient"), ("deconvolution", "Deconvolution")]
)
def test_one_pass_methods_equal_captums(resnet18, batch, method, reference):
    import captum.attr

    before = _relus(resnet18)
    mine = pixel_maps(resnet18, batch, method)
    assert _relus(resnet18) == before  # the ReLUs' flags and hooks as they were
    theirs = getattr(captum.attr, reference)(resnet18).attribute(batch, target=TARGET)
    assert mine.shape == (2, 3, SIDE, SIDE) and relative(mine, theirs) < 1e-3


def test_saliency_is_the_absolute_gradient_as_captums_default_and_deconvolution_is_not_guided_backprop(resnet18, batch):
    from captum.attr import GuidedBackprop, Saliency

    mine = pixel_maps(resnet18, batch, "saliency")
    signed = Saliency(resnet18).attribute(batch, target=TARGET, abs=False).detach().numpy()
    assert (mine >= 0).all() and (signed < 0).any() and np.allclose(mine, np.abs(signed), atol=1e-3 * np.abs(signed).max())
    deconvolved = pixel_maps(resnet18, batch, "deconvolution")
    guided = GuidedBackprop(resnet18).attribute(batch, target=TARGET).detach().numpy()
    assert relative(deconvolved, guided) > 0.1  # ReLU(g) without the forward pass's mask is another map


# ----------------------------------------------------------------------------- DeepLIFT


def split_relus(model: nn.Module) -> nn.Module:
    """A copy of a torchvision ResNet that captum's DeepLift can take and that computes the same
    function: each block's second ReLU a module of its own (captum refuses a module called twice),
    and a copy (a 1x1 average pooling) between the stem's ReLU and its max pooling (captum loses
    the pooling's rule where a nonlinearity's output goes straight into it, see below)."""
    model = copy.deepcopy(model)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu_out(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + identity)

    for block in model.modules():
        if isinstance(block, torchvision.models.resnet.BasicBlock):
            block.relu_out = nn.ReLU(inplace=True)
            block.forward = types.MethodType(forward, block)
    model.maxpool = nn.Sequential(nn.AvgPool2d(1), model.maxpool)
    return model


@pytest.mark.parametrize("which", ["zero", "blur"])
def test_deeplift_equals_captums_on_a_resnet_whose_relus_it_can_take(resnet18, batch, which):
    from captum.attr import DeepLift

    baselines = torch.cat([baseline(photo[None], which) for photo in batch])
    theirs = DeepLift(split_relus(resnet18)).attribute(batch, baselines=baselines, target=TARGET)
    before = _relus(resnet18)
    mine = pixel_maps(resnet18, batch, "deeplift", settings=DeepLiftOptions(dl_baseline=which))
    assert _relus(resnet18) == before and not any(m._forward_hooks or m._forward_pre_hooks for m in resnet18.modules())
    assert mine.shape == (2, 3, SIDE, SIDE) and relative(mine, theirs) < 1e-3


def _gradient(model, target: int):
    """``ctx.input_gradient`` of a classifier, by hand: d(logit ``target``)/d(row), under ``within``."""

    def gradient(rows, _images=None, within=None):
        with within(model) if within is not None else contextlib.nullcontext():
            part = rows.detach().clone().requires_grad_(True)
            return torch.autograd.grad(model(part)[:, target].sum(), part)[0]

    return gradient


def _pooled(*between: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), *between, nn.MaxPool2d(3, 2, 1), nn.Conv2d(4, 4, 3), nn.Sigmoid(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3),
    ).eval()  # fmt: skip


def test_captums_deeplift_loses_max_poolings_rule_behind_a_relu_and_hookvizs_does_not():
    """captum hooks a module's output tensor to read its gradient and its input tensor to
    replace it; where a ReLU's output is the pooling's input, the ReLU reads the gradient before
    the pooling's hook replaced it. A copy between them (a 1x1 average pooling: the same
    function) gives captum's map hookviz's."""
    from captum.attr import DeepLift

    torch.manual_seed(2)
    x, b = torch.randn(1, 3, 16, 16), 0.1 * torch.randn(1, 3, 16, 16)
    chained, copied = _pooled(), _pooled(nn.AvgPool2d(1))
    assert torch.allclose(chained(x), copied(x))
    mine = deeplift_maps(_gradient(chained, 1), x, b, 0).numpy()
    assert relative(mine, DeepLift(copied).attribute(x, baselines=b, target=1)) < 1e-3
    assert relative(deeplift_maps(_gradient(copied, 1), x, b, 0).numpy(), torch.from_numpy(mine)) < 1e-5
    assert relative(mine, DeepLift(chained).attribute(x, baselines=b, target=1)) > 0.05


class FunctionalNet(nn.Module):
    """A convolution, a ReLU called as a function, a linear layer: no nonlinear module to hook."""

    def __init__(self, functional: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc, self.functional, self.relu = nn.Conv2d(3, 4, 3), nn.Linear(4, 5), functional, nn.ReLU()

    def forward(self, x):
        h = self.conv(x)
        h = F.relu(h) if self.functional else self.relu(h)
        return self.fc(h.mean(dim=(2, 3)))


def functional_net() -> nn.Module:
    """Factory used as ``--model tests.test_methods_captum:functional_net``."""
    return FunctionalNet().eval()


def test_a_relu_called_as_a_function_is_refused_where_captum_passes_its_plain_gradient(batch):
    from captum.attr import DeepLift, InputXGradient

    model, twin = FunctionalNet().eval(), FunctionalNet(functional=False).eval()
    x = batch[:1, :, :16, :16]
    with pytest.raises(UsageError, match=r"FunctionalNet calls relu as a function, which DeepLIFT's hooks"):
        hookviz.explain(model, x[0], cam="deeplift", layers=["conv"])
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # every hook removed, on error too
    assert torch._C._len_torch_function_stack() == 0  # and the function mode that watched the pass left
    # captum's map of the functional ReLU is the plain input x gradient (the zero baseline's),
    # not DeepLift's, which its twin with an nn.ReLU gets, and hookviz's equals
    theirs = DeepLift(model).attribute(x, target=1).detach()
    assert torch.allclose(theirs, InputXGradient(model).attribute(x, target=1).detach(), atol=1e-7)
    twins = DeepLift(twin).attribute(x, target=1).detach()
    assert relative(theirs.numpy(), twins) > 0.05
    mine = deeplift_maps(_gradient(twin, 1), x, torch.zeros_like(x), 0)
    assert relative(mine.numpy(), twins) < 1e-3


@pytest.mark.slow  # 1.4 s
def test_deeplift_shap_equals_captums_with_the_same_baselines(resnet18, batch):
    from captum.attr import DeepLiftShap

    settings = DeepLiftShapOptions(dls_baselines=3, dls_source="noise", dls_seed=5)
    mine = pixel_maps(resnet18, batch, "deeplift-shap", settings=settings)
    split = split_relus(resnet18)
    for n, photo in enumerate(batch):  # hookviz draws each image's own baselines: captum is given them, image by image
        baselines = draw_baselines(photo[None], "noise", 3, generator(5))
        theirs = DeepLiftShap(split).attribute(photo[None], baselines=baselines, target=TARGET)
        assert relative(mine[n : n + 1], theirs) < 1e-3


@pytest.mark.parametrize("source", ["noise", "shuffle", "blur"])
def test_baselines_are_drawn_from_their_source_seeded_without_touching_the_callers_random_state(source):
    image = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    state = torch.get_rng_state()
    first, again = (draw_baselines(image, source, 4, generator(7)) for _ in range(2))
    assert torch.equal(torch.get_rng_state(), state) and torch.equal(first, again) and first.shape == (4, 3, 8, 8)
    if source == "shuffle":  # the image's own values, each baseline in its own order
        assert all(torch.equal(row.flatten(1).sort().values, image[0].flatten(1).sort().values) for row in first)
        assert not torch.equal(first[0], first[1])
    elif source == "noise":
        assert not torch.equal(first[0], first[1]) and not torch.equal(first, draw_baselines(image, source, 4, generator(8)))
    else:
        assert all(torch.equal(row, baseline(image, "blur")[0]) for row in first)


# ----------------------------------------------------------------------------- Gradient SHAP


def test_gradient_shap_equals_captums_given_the_same_draws(resnet18, batch, monkeypatch):
    """captum draws from numpy's and torch's global streams: its draws are replaced by hookviz's
    (each sample's baseline index, its coefficient, its noise; the images' baselines side by side,
    as captum takes one set for the batch), which hookviz makes from each image's own generator."""
    from captum.attr import GradientShap

    settings = GradientShapOptions(gs_samples=3, gs_stdevs=0.1, gs_baselines=4, gs_seed=3)
    state = torch.get_rng_state()
    mine = pixel_maps(resnet18, batch, "gradient-shap", settings=settings)
    assert torch.equal(torch.get_rng_state(), state)
    drawn = [draws(photo[None], settings) for photo in batch]
    baselines = torch.cat([d[0] for d in drawn])
    chosen = torch.cat([d[1] + 4 * n for n, d in enumerate(drawn)]).tolist()
    coefficients = torch.cat([d[2] for d in drawn]).numpy()
    noise = torch.cat([d[3] for d in drawn])
    monkeypatch.setattr(np.random, "choice", lambda count, size: np.array(chosen))
    monkeypatch.setattr(np.random, "uniform", lambda low, high, size: coefficients)
    monkeypatch.setattr(torch, "normal", lambda mean, std: noise)
    theirs = GradientShap(resnet18).attribute(batch, baselines=baselines, n_samples=3, stdevs=0.1, target=TARGET)
    assert relative(mine, theirs) < 1e-3
    assert relative(pixel_maps(resnet18, batch, "gradient-shap", settings=settings), torch.from_numpy(mine)) == 0  # seeded


# ----------------------------------------------------------------------------- through the command


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--cam", "deeplift", "--dl-baseline", "noise"], "--dl-baseline noise: choose zero, blur, mean"),
        (["--cam", "deeplift", "--steps", "8"], "--steps 8: only integrated-gradients takes it"),
        (["--cam", "deeplift-shap", "--dls-source", "photos"], "--dls-source photos: choose noise, shuffle, zero, blur, mean"),
        (["--cam", "deeplift-shap", "--dls-baselines", "0"], "--dls-baselines 0: must be from 1 to 256"),
        (["--cam", "gradient-shap", "--gs-stdevs", "-1"], "--gs-stdevs -1.0: must be from 0.0"),
        (["--cam", "saliency", "--gs-samples", "4"], "--gs-samples 4: only gradient-shap takes it"),
        (
            ["--cam", "deconvolution", "--model", "tests.conftest:tiny_convnext"],
            "--cam deconvolution: TinyConvNeXt has no nn.ReLU",
        ),
        (
            ["--cam", "deeplift", "--model", "tests.test_methods_captum:functional_net"],
            "--cam deeplift: FunctionalNet calls relu as a function, which DeepLIFT's hooks on modules cannot see",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line(photo, tmp_path, arguments, message):
    model = [] if "--model" in arguments else ["--model", "tests.conftest:tiny_net"]
    result = hookviz_run(photo, *model, "--resize", "32", *arguments, model=None, out=tmp_path / "out", env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    # a ReLU called as a function shows in the model's first pass, so after the run's header line
    errors = [line for line in result.stderr.strip().splitlines() if not line.startswith("hookviz: model ")]
    assert len(errors) == 1 and message in " ".join(errors[0].split()) and "Traceback" not in result.output


@pytest.mark.slow  # 5 s
def test_a_detector_is_refused_by_deeplift_for_the_functions_its_heads_call(tmp_path):
    """torchvision's Faster R-CNN heads call relu, and its post-processing sigmoid and softmax, as functions."""
    detector = ["--model", "tests.test_conformance:tiny_detector", "--layer", "backbone.1", "--score-threshold", "0"]
    result = hookviz_run(SAMPLES / "cat.png", *detector, "--cam", "deeplift", model=None, out=tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "hookviz: error: --cam deeplift: FasterRCNN calls relu, sigmoid, softmax as a function, which DeepLIFT's hooks on "
        "modules cannot see (captum's pass its plain gradient); choose integrated-gradients"
    )


@pytest.mark.slow  # 2.8 s
def test_a_segmenter_is_explained_at_the_input():
    """torchvision's LR-ASPP (ReLU, Hardswish and Hardsigmoid modules) at 64 pixels, random weights:
    each method's map is finite, of the input's shape and not all zero, for the segmentation's target class."""
    torch.manual_seed(0)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
    image = torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(0))
    methods = ["saliency", "deconvolution", "deeplift", "deeplift-shap", "gradient-shap"]
    result = hookviz.explain(model, image, cam=",".join(methods), layers=["backbone.16"], dls_baselines=2, gs_samples=2)
    for method in methods:
        found = result.pixel_maps[method].map
        assert found.shape == (3, 64, 64) and np.isfinite(found).all() and np.abs(found).max() > 0, method


@pytest.mark.slow  # 13 s
def test_the_trust_measures_take_the_new_maps_through_the_command(tmp_path):
    """--faithfulness and --sanity measure each new map at the input, as integrated gradients'."""
    import json

    from tests.test_trust import run_cli

    methods = ["saliency", "input-x-gradient", "deconvolution", "deeplift", "deeplift-shap", "gradient-shap"]
    result = run_cli(tmp_path, "--faithfulness", "--sanity", "--cam", ",".join(methods), "--pictures", "cam")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    for method in methods:
        trust = report["pixel_maps"][method]["trust"]
        assert 0 <= trust["faithfulness"]["deletion_insertion"]["deletion_auc"] <= 1, method
        sanity = trust["sanity"]["final_correlation"]
        assert sanity is None or -1 <= sanity <= 1, method
    ranked = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]
    assert {entry["method"] for entry in ranked["maps"]} == set(methods)


class Reused(nn.Module):
    """One ReLU module called twice in a pass, as a torchvision ResNet block calls its ``relu``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2, self.relu, self.fc = (
            nn.Conv2d(3, 4, 3),
            nn.Conv2d(4, 4, 3),
            nn.ReLU(inplace=True),
            nn.Linear(4, 3),
        )

    def forward(self, x):
        return self.fc(self.relu(self.conv2(self.relu(self.conv1(x)))).mean(dim=(2, 3)))


def test_captums_deeplift_refuses_a_relu_called_twice_which_hookvizs_records_call_by_call():
    """captum keeps one input per module, so a second call leaves the first's backward without
    it; hookviz records each call, and equals captum's on the same network with two ReLUs.
    Last in this file: captum's failed pass has once been seen to change a later pass's map."""
    from captum.attr import DeepLift

    torch.manual_seed(3)
    x, b = torch.randn(1, 3, 12, 12), 0.1 * torch.randn(1, 3, 12, 12)
    model = Reused().eval()
    twin = copy.deepcopy(model)
    twin.relu2 = nn.ReLU(inplace=True)
    twin.forward = types.MethodType(
        lambda self, x: self.fc(self.relu2(self.conv2(self.relu(self.conv1(x)))).mean(dim=(2, 3))), twin
    )
    theirs = DeepLift(twin).attribute(x, baselines=b, target=1)
    assert relative(deeplift_maps(_gradient(model, 1), x, b, 0).numpy(), theirs) < 1e-3
    with pytest.raises(RuntimeError, match="used more than once"):
        DeepLift(model).attribute(x, baselines=b, target=1)
