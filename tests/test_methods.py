"""The CAM-method seam: methods registered from outside the package, given only what they
declare, re-scoring through the task's own score, on maps of any number of dimensions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from hookviz import Explainer, LayerOptions, TargetOptions, UsageError, explain
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.methods import (
    METHODS,
    MethodContext,
    get_method,
    method_names,
    register_method,
)
from hookviz.models.loading import LoadedModel
from hookviz.options.declared import option

from .cli_helpers import hookviz_cli, hookviz_run
from .conftest import SAMPLES, tiny_convnext, tiny_net

SEEN: list[dict] = []  # what the spies below were handed, call by call


@pytest.fixture(autouse=True)
def _forget_what_was_seen():
    SEEN.clear()


def _hooks_on(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


# ----------------------------------------------------------------------------- methods of this module's own


@register_method("toy-activation-sum", needs_gradients=False)
def activation_sum(ctx):
    """The layer's channels summed, after a ReLU: a method that needs no gradient."""
    return ctx.activations.sum(dim=1).clamp(min=0)


@register_method("spy-bare", needs_gradients=False)
def spy_bare(ctx):
    SEEN.append({"ctx": ctx})
    return ctx.activations.sum(dim=1).clamp(min=0)


@register_method("spy-grad")
def spy_grad(ctx):
    SEEN.append({"ctx": ctx})
    return (ctx.gradients * ctx.activations).sum(dim=1).clamp(min=0)


@register_method("bad-shape", needs_gradients=False)
def bad_shape(ctx):
    return ctx.activations  # one map per channel, not per image


@register_method("relu-in-place", needs_gradients=False)
def relu_in_place(ctx):
    return ctx.activations.relu_().sum(dim=1)  # writes into the recorded output


@register_method("scale-gradients-in-place")
def scale_gradients_in_place(ctx):
    ctx.gradients.mul_(2)  # writes into the recorded grad_output
    return (ctx.gradients * ctx.activations).sum(dim=1).clamp(min=0)


@register_method("raising", needs_gradients=False)
def raising(ctx):
    raise ValueError("no maps today")


@register_method("one-number", needs_gradients=False)
def one_number(ctx):
    return ctx.activations.sum()


@register_method("spy-score-cam", needs_gradients=False, needs_rescoring=True, needs_input=True)
def spy_score_cam(ctx):
    """Score-CAM in a few lines: each channel's normalised map masks the input, and the
    target's score on the masked input (against the plain input's) weighs that channel."""
    activations, inputs = ctx.activations, ctx.inputs
    count, channels = activations.shape[:2]
    low = activations.flatten(2).min(-1).values[..., None, None]
    high = activations.flatten(2).max(-1).values[..., None, None]
    masks = (activations - low) / (high - low).clamp(min=1e-8)
    upsampled = F.interpolate(masks.flatten(0, 1)[:, None], size=inputs.shape[-2:], mode="bilinear")
    images = torch.arange(count).repeat_interleave(channels)
    masked = inputs[images] * upsampled.to(inputs.dtype)
    scores = ctx.score(masked, images)
    plain = ctx.score(inputs)
    many = torch.arange(70) % count  # more rows than one re-scoring pass takes
    many = torch.arange(70) % count  # more rows than one re-scoring pass takes
    SEEN.append(
        {
            "ctx": ctx,
            "masked": masked,
            "images": images,
            "scores": scores,
            "plain": plain,
            "many": many,
            "many_scores": ctx.score(inputs[many], many),
            "hooks": _hooks_on(ctx.module),
            "grad": scores.requires_grad,
        }
    )
    weights = torch.softmax((scores.view(count, channels) - plain[:, None]).to(activations.dtype), dim=1)
    return (weights[..., None, None] * activations).sum(dim=1).clamp(min=0)


@register_method("spy-layer-score", needs_gradients=False, needs_rescoring=True)
def spy_layer_score(ctx):
    """Each photo scored with the layer's output as it was, then with its channel 0 set to zero."""
    everyone = torch.arange(ctx.activations.shape[0])
    altered = ctx.activations.clone()
    altered[:, 0] = 0
    SEEN.append(
        {
            "ctx": ctx,
            "plain": ctx.score_layer(ctx.activations, everyone),
            "altered": ctx.score_layer(altered, everyone),
            "hooks": _hooks_on(ctx.module),
        }
    )
    return ctx.activations.sum(dim=1).clamp(min=0)


@register_method("spy-plain-score", needs_gradients=False, needs_rescoring=True, needs_input=True)
def spy_plain_score(ctx):
    SEEN.append({"ctx": ctx, "plain": ctx.score(ctx.inputs), "hooks": _hooks_on(ctx.module)})
    return ctx.activations.sum(dim=1).clamp(min=0)


# ----------------------------------------------------------------------------- the registry


def test_a_second_method_under_a_taken_name_is_refused():
    with pytest.raises(UsageError, match="'gradcam' is already registered"):
        register_method("gradcam")(activation_sum.function)
    with pytest.raises(UsageError, match="'none' is already registered"):
        register_method("none", needs_gradients=False)(activation_sum.function)
    with pytest.raises(UsageError, match="'toy-activation-sum' is already registered"):
        register_method("toy-activation-sum", needs_gradients=False)(lambda ctx: ctx.activations.sum(dim=1))
    assert get_method("toy-activation-sum") is activation_sum and get_method("gradcam").needs_gradients
    with pytest.raises(UsageError, match="did you mean 'layercam'"):
        get_method("layercam2")


@pytest.mark.parametrize("name", ["", "two words", "a,b", None])
def test_a_method_name_that_cannot_be_typed_after_cam_is_refused(name):
    before = method_names()
    with pytest.raises(
        UsageError, match=r"cannot name a method: cam takes it as one word; give a name without spaces or commas$"
    ):
        register_method(name)(activation_sum.function)
    assert method_names() == before


def test_run_help_lists_every_registered_method():
    result = hookviz_cli("run", "--help", env={"COLUMNS": "1000"})
    assert result.exit_code == 0
    (line,) = [line for line in result.output.splitlines() if "--cam " in line]
    listed = line.split("CAM method:")[1].split(".")[0]
    assert [name.strip() for name in listed.replace(" or ", ",").split(",")] == [*method_names(), "none"]
    assert {"gradcam", "gradcam++", "layercam", "toy-activation-sum", "spy-score-cam"} <= set(METHODS.names())


# ----------------------------------------------------------------------------- the command


def test_a_method_registered_outside_the_package_runs_through_the_command(photo, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(
        photo,
        "--resize",
        "64",
        "--crop",
        "64",
        "--cam",
        "toy-activation-sum",
        "--save-tensors",
        layer="features.3",
        out=out,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    folder = out / "photo"
    assert (folder / "features.3.cam.png").stat().st_size > 0
    report = json.loads((folder / "report.json").read_text())
    (layer,) = report["layers"]
    assert layer["cam"]["method"] == "toy-activation-sum" and layer["cam"]["shape"] == [32, 32]
    tensors = np.load(folder / "tensors.npz")
    np.testing.assert_allclose(tensors["features.3/cam"], np.maximum(tensors["features.3/output"][0].sum(0), 0), rtol=1e-5)


def test_a_method_that_returns_no_map_per_image_is_refused_in_one_line():
    with pytest.raises(
        UsageError, match=r"cam='bad-shape': the method returned 1x6x16x16 at features.3, not one map per image \(1x16x16\)"
    ):
        explain(tiny_net(), torch.zeros(3, 32, 32), layers=["features.3"], cam="bad-shape")


def test_a_method_that_returns_one_number_says_so():
    with pytest.raises(UsageError, match=r"cam='one-number': the method returned a single number at features.3, not one map"):
        explain(tiny_net(), torch.zeros(3, 32, 32), layers=["features.3"], cam="one-number")


@pytest.mark.parametrize("cam, tensor", [("relu-in-place", "activations"), ("scale-gradients-in-place", "gradients")])
def test_a_method_that_writes_into_what_was_recorded_is_refused_in_one_line(photo, tmp_path, cam, tensor):
    out = tmp_path / "out"
    result = hookviz_run(photo, "--resize", "64", "--crop", "64", "--cam", cam, "-q", layer="features.3", out=out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"hookviz: error: --cam {cam}: the method changed ctx.{tensor} in place at features.3, which would change what "
        f"hookviz recorded; work on a copy (ctx.{tensor}.clone()) or use ops without a trailing _"
    )
    assert not (out / "photo").exists()
    with pytest.raises(UsageError, match=f"^cam='{cam}': the method changed ctx.{tensor} in place"):
        explain(tiny_net(), torch.zeros(3, 32, 32), layers=["features.3"], cam=cam)


def test_a_method_that_raises_fails_the_images_in_its_own_name_not_the_models(photo, tmp_path):
    from hookviz.errors import MethodError

    out = tmp_path / "out"
    result = hookviz_run(photo, "--resize", "64", "--crop", "64", "--cam", "raising", "-q", layer="features.3", out=out)
    assert result.exit_code == 1, result.output
    reason = "--cam raising: the method failed at features.3 (ValueError: no maps today)"
    assert f"hookviz: failed: {photo}: {reason}" in result.stderr.splitlines(), result.stderr
    assert "the model failed" not in result.stderr
    assert json.loads((out / "run.json").read_text())["images"][0]["error"] == f"{photo}: {reason}"
    with pytest.raises(MethodError, match=r"^cam='raising': the method failed at features.3 \(ValueError: no maps today\)$"):
        explain(tiny_net(), torch.zeros(3, 32, 32), layers=["features.3"], cam="raising")


# ----------------------------------------------------------------------------- what each method is given


class SideBranch(nn.Module):
    """A branch the logits never use: the target's gradient never reaches ``side``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.side = nn.Conv2d(4, 3, 1)
        self.head = nn.Linear(4, 5)

    def forward(self, x):
        features = self.stem(x).relu()
        self.side(features)
        return self.head(features.mean(dim=(2, 3)))


def test_a_method_gets_only_what_it_declares_and_without_gradients_explains_a_layer_they_never_reach():
    model, image = SideBranch().eval(), torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(1))
    (refused,) = explain(model, image, layers=["side"], cam="gradcam").layers
    assert refused.cam is None and "does not depend on this layer" in refused.cam_note
    (side,) = explain(model, image, layers=["side"], cam="spy-bare", topk=2, objective="ce").layers
    np.testing.assert_allclose(side.cam, np.maximum(side.output[0].sum(0), 0), rtol=1e-6)
    assert side.cam_note is None and len(side.topk_cams) == 2
    contexts = [seen["ctx"] for seen in SEEN]
    assert len(contexts) == 3  # the target's, then each top class's
    assert all(c.gradients is None and c.inputs is None and c.score is None for c in contexts)
    assert contexts[0].module is model.side and contexts[0].layer == "side"
    SEEN.clear()
    (stem,) = explain(model, image, layers=["stem"], cam="spy-grad").layers
    (given,) = [seen["ctx"] for seen in SEEN]
    assert given.inputs is None and given.score is None
    np.testing.assert_array_equal(given.gradients.numpy(), stem.grad_output)


# ----------------------------------------------------------------------------- re-scoring


def _prepared(tensors) -> list[PreparedSample]:
    return [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((64, 64, 3), np.uint8)) for t in tensors]


def test_rescoring_scores_each_images_class_logit_on_the_bare_model_and_leaves_it_as_it_was():
    model = tiny_net().train()  # explained in eval mode; its mode and statistics come back
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    loaded = LoadedModel("tiny", model, "seeded", None, Preprocessing())
    explainer = Explainer.create(loaded, layers=LayerOptions(("features.3",)), target=TargetOptions(cam="spy-score-cam", topk=2))
    results = explainer.explain_batch(_prepared(batch))
    assert model.training and _hooks_on(model) == 0
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())
    model.eval()
    with torch.no_grad():
        logits = model(batch)
    # One context per CAM key, in the plan's order: the target's, then each top class's.
    classes = [[r.target.index for r in results], *[[r.top5[k].index for r in results] for k in range(2)]]
    assert len(SEEN) == 3
    for seen, wanted in zip(SEEN, classes):
        assert seen["hooks"] == 0 and not seen["grad"]  # no hook on the model, no graph
        wanted = torch.tensor(wanted)
        torch.testing.assert_close(seen["plain"], logits[torch.arange(2), wanted])
        with torch.no_grad():
            masked_logits = model(seen["masked"])
        torch.testing.assert_close(seen["scores"], masked_logits[torch.arange(len(seen["images"])), wanted[seen["images"]]])
        torch.testing.assert_close(seen["many_scores"], logits[seen["many"], wanted[seen["many"]]])
        np.testing.assert_array_equal(seen["ctx"].inputs.numpy(), batch.numpy())
    for result in results:
        assert result.cam_method == "spy-score-cam" and result.layers[0].cam.shape == (32, 32)
        assert result.layers[0].cam.max() > 0 and len(result.layers[0].topk_cams) == 2
    np.testing.assert_allclose(SEEN[0]["plain"].numpy(), [r.target.logit for r in results], rtol=1e-5)


class ToySegmenter(nn.Module):
    """Per-pixel logits of 4 classes, at the input's size, as torchvision's segmenters return them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())
        self.classifier = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        logits = self.classifier(self.body(x))
        return {"out": F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)}


def test_rescoring_a_segmentation_scores_the_class_mean_logit_over_its_first_predicted_pixels():
    model = ToySegmenter().eval()
    image = torch.randn(3, 64, 64, generator=torch.Generator().manual_seed(4))
    result = explain(model, image, layers=["body"], task="segment", cam="spy-score-cam")
    assert result.task == "segment" and result.layers[0].cam.shape == (32, 32)
    (seen,) = SEEN
    target = result.target.index
    pixels = torch.from_numpy(result.prediction.mask == target)
    assert 0 < int(pixels.sum()) < pixels.numel()
    with torch.no_grad():
        plain = model(image[None])["out"][0, target][pixels].mean()
        masked = model(seen["masked"])["out"][:, target][:, pixels].mean(dim=1)
    torch.testing.assert_close(seen["plain"], plain[None])
    torch.testing.assert_close(seen["scores"], masked)
    assert seen["plain"].item() == pytest.approx(result.target.logit, rel=1e-5)


def test_rescoring_a_detection_scores_its_matched_box():
    from .test_detect import detector

    model = detector().eval()
    photo = torch.from_numpy(np.array(Image.open(SAMPLES / "cat.png").convert("RGB").resize((96, 96)))).permute(2, 0, 1)
    result = explain(
        model, photo.float() / 255, layers=["backbone.body.16"], cam="spy-plain-score", score_threshold=0.01, max_detections=2
    )
    detections = result.prediction.detections
    assert len(SEEN) == len(detections) == 2  # one context per detection
    for seen, detection in zip(SEEN, detections):
        assert seen["hooks"] == 0
        assert seen["plain"].item() == pytest.approx(detection.score, rel=1e-5)
    assert model.roi_heads.score_thresh == 0.05 and _hooks_on(model) == 0


# ----------------------------------------------------------------------------- maps of any dimension


def _by_hand(name: str, a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Each method's formula, one image and one channel at a time, in float64."""
    maps = np.zeros((a.shape[0], *a.shape[2:]))
    for n in range(a.shape[0]):
        for c in range(a.shape[1]):
            if name == "gradcam":
                maps[n] += g[n, c].mean() * a[n, c]
            elif name == "xgradcam":
                maps[n] += (g[n, c] * a[n, c]).sum() / (a[n, c].sum() + 1e-7) * a[n, c]
            elif name == "hirescam":
                maps[n] += g[n, c] * a[n, c]
            elif name == "gradcam++":
                alpha = g[n, c] ** 2 / (2 * g[n, c] ** 2 + a[n, c].sum() * g[n, c] ** 3 + 1e-6)
                alpha[g[n, c] == 0] = 0
                maps[n] += (np.maximum(g[n, c], 0) * alpha).sum() * a[n, c]
            elif name == "layercam":
                maps[n] += np.maximum(g[n, c], 0) * a[n, c]
    return np.maximum(maps, 0)


@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (2, 4, 3, 5, 6)], ids=["2d", "3d"])
@pytest.mark.parametrize("name", ["gradcam", "gradcam++", "layercam", "xgradcam", "hirescam"])
def test_each_method_equals_its_formula_on_maps_of_any_number_of_dimensions(name, shape):
    generator = torch.Generator().manual_seed(5)
    activations = torch.rand(shape, generator=generator, dtype=torch.float64)
    gradients = torch.randn(shape, generator=generator, dtype=torch.float64)
    gradients[0, 1] = 0  # a channel the target ignores
    ours = get_method(name).compute(MethodContext(activations, gradients, nn.Identity(), "clip"))
    assert ours.shape == (shape[0], *shape[2:])
    expected = _by_hand(name, activations.numpy(), gradients.numpy())
    assert expected.max() > 0
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-10, atol=1e-12)


def _eigencam_by_hand(a: np.ndarray) -> np.ndarray:
    maps = []
    for image in a:
        positions = image.reshape(image.shape[0], -1).T
        centred = positions - positions.mean(axis=0)
        projection = centred @ np.linalg.svd(centred)[2][0]
        if np.corrcoef(projection, positions.mean(axis=1))[0, 1] < 0:
            projection = -projection
        maps.append(np.maximum(projection, 0).reshape(image.shape[1:]))
    return np.stack(maps)


@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (2, 4, 3, 5, 6)], ids=["2d", "3d"])
def test_eigencam_is_the_first_principal_component_signed_to_agree_with_the_mean_activation(shape):
    generator = torch.Generator().manual_seed(6)
    activations = torch.rand(shape, generator=generator, dtype=torch.float64)
    activations[1] *= -1  # a layer of negative values: the sign follows the mean, not the SVD
    ours = get_method("eigencam").compute(MethodContext(activations, None, nn.Identity(), "clip"))
    assert not get_method("eigencam").class_specific and not get_method("eigencam").needs_gradients
    expected = _eigencam_by_hand(activations.numpy())
    assert (expected.reshape(2, -1).max(axis=1) > 0).all()
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-8, atol=1e-10)


# ----------------------------------------------------------------------------- gradient-free methods that re-score


class Patchy(nn.Module):
    """40 channels at ``act``: 36 that vary, 2 constant (0.5 everywhere) and 2 zero everywhere."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.stem = nn.Conv2d(3, 40, 3, stride=4, padding=1)
        with torch.no_grad():
            self.stem.weight[36:] = 0
            self.stem.bias[36:38] = 0.5
            self.stem.bias[38:] = -1.0
        self.act = nn.ReLU()
        self.head = nn.Linear(40, 5)

    def forward(self, x):
        return self.head(self.act(self.stem(x)).mean(dim=(2, 3)))


class Passes:
    """Counts the rows of each forward pass of a model run under ``torch.inference_mode``."""

    def __init__(self, model):
        self.rows: list[int] = []
        self.handle = model.register_forward_pre_hook(self.hook)

    def hook(self, _module, args):
        if torch.is_inference_mode_enabled():
            self.rows.append(args[0].shape[0])


def _patchy_explained(method: str, counted: str = "", model: nn.Module | None = None):
    """The method's maps of two photos at ``act`` (of ``Patchy`` unless ``model`` is given),
    and the rows of each pass of the model (of its ``counted`` submodule) run under
    ``torch.inference_mode``."""
    model = (model or Patchy()).eval()
    batch = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(8))
    passes = Passes(model.get_submodule(counted))
    try:
        results = Explainer.create(
            LoadedModel("patchy", model, "seeded", None, Preprocessing()),
            layers=LayerOptions(("act",)),
            target=TargetOptions(target="3", cam=method),
        ).explain_batch(_prepared(batch))
    finally:
        passes.handle.remove()
    return model, batch, np.stack([r.layers[0].cam for r in results]), passes.rows


def _activations(model, batch):
    with torch.no_grad():
        return model.act(model.stem(batch))


def test_scorecam_scores_masked_inputs_in_batches_and_each_constant_channel_once():
    model, batch, maps, rows = _patchy_explained("scorecam")
    # 36 varying channels per photo in passes of 32 masked inputs, and one pass of each photo
    # masked to zeros for the 4 constant channels
    assert rows == [2, 32, 32, 8] and sum(rows) == 2 * 36 + 2
    assert maps.shape == (2, 8, 8) and maps.max() > 0
    np.testing.assert_allclose(maps, _scorecam_by_hand(model, batch), rtol=1e-4, atol=1e-6)


def test_scorecam_scores_a_channel_that_scales_another_once():
    model = Patchy()
    with torch.no_grad():  # channel 1 is twice channel 0 everywhere: the same mask
        model.stem.weight[1] = 2 * model.stem.weight[0]
        model.stem.bias[1] = 2 * model.stem.bias[0]
    model, batch, maps, rows = _patchy_explained("scorecam", model=model)
    assert rows == [2, 32, 32, 6] and sum(rows) == 2 * 35 + 2
    np.testing.assert_allclose(maps, _scorecam_by_hand(model, batch), rtol=1e-4, atol=1e-6)


def test_scorecam_scores_a_faint_copy_of_a_channel_on_its_own():
    model = Patchy()
    with torch.no_grad():  # channel 1 is channel 0 times 2**-24: equal scaled to 0..1, but faint
        model.stem.weight[1] = model.stem.weight[0] * 2**-24
        model.stem.bias[1] = model.stem.bias[0] * 2**-24
    model, batch, maps, rows = _patchy_explained("scorecam", model=model)
    # pytorch-grad-cam's (A - min) / (max - min + 1e-8) makes the faint channel's mask fainter,
    # so it is scored, as every varying channel is
    assert rows == [2, 32, 32, 8]
    np.testing.assert_allclose(maps, _scorecam_by_hand(model, batch), rtol=1e-4, atol=1e-6)


def _scorecam_by_hand(model, batch) -> np.ndarray:
    """Score-CAM as its paper and pytorch-grad-cam compute it, every channel scored."""
    activations = _activations(model, batch).double()
    expected = []
    for n in range(len(batch)):
        scores = []
        for c in range(activations.shape[1]):
            channel = activations[n, c]
            mask = F.interpolate(channel[None, None], size=(32, 32), mode="bilinear", align_corners=False)[0, 0]
            mask = (mask - mask.min()) / (mask.max() - mask.min() + 1e-8)
            with torch.no_grad():
                scores.append(model((batch[n] * mask.float())[None])[0, 3].double())
        weights = torch.softmax(torch.stack(scores), dim=0)
        expected.append((weights[:, None, None] * activations[n]).sum(0).clamp(min=0).numpy())
    return np.stack(expected)


def _ablationcam_by_hand(model, batch) -> np.ndarray:
    """Ablation-CAM with every channel ablated in a whole pass of its own."""
    activations = _activations(model, batch).double()
    with torch.no_grad():
        plain = model(batch)[:, 3].double()
    expected = []
    for n in range(len(batch)):
        drops = []
        for c in range(activations.shape[1]):
            ablated = activations[n].clone()
            ablated[c] = 0
            with torch.no_grad():
                score = model.head(ablated.float().mean(dim=(1, 2))[None])[0, 3].double()
            drops.append((plain[n] - score) / plain[n].abs())
        weights = torch.stack(drops)
        assert weights[38:].abs().max() < 1e-6  # zero channels ablated: no drop (float rounding of a 1-row pass aside)
        expected.append((weights[:, None, None] * activations[n]).sum(0).clamp(min=0).numpy())
    return np.stack(expected)


def test_ablationcam_runs_only_the_model_after_the_layer_for_each_ablation():
    model, batch, maps, head_rows = _patchy_explained("ablationcam", counted="head")
    _, _, _, input_rows = _patchy_explained("ablationcam")
    # Per photo: a whole pass and the tail's check (the layer's own output, twice) find that
    # the rows after the layer are independent; then the photo's own score. Then its 38
    # ablations (the 2 zero channels need none) in one pass, which computes the layers
    # before `act` once, from the photo alone.
    assert head_rows == [1, 2, 1, 1, 2, 1, 38, 38]
    assert input_rows == [1] * len(head_rows)
    assert maps.shape == (2, 8, 8) and maps.max() > 0
    np.testing.assert_allclose(maps, _ablationcam_by_hand(model, batch), rtol=1e-4, atol=1e-6)
    assert _hooks_on(model) == 0


class BatchSized(Patchy):
    """Patchy whose head reshapes by the batch size it read before ``act``: the rows after
    the layer must come from as many inputs."""

    def forward(self, x):
        count = x.shape[0]
        return self.head(self.act(self.stem(x)).mean(dim=(2, 3)).reshape(count, -1))


def test_ablationcam_runs_whole_passes_where_the_model_needs_its_inputs_batch_size():
    model, batch, maps, rows = _patchy_explained("ablationcam", model=BatchSized())
    # per photo: the whole pass and the failed check, then whole passes of up to 32 copies
    assert rows == [1, 1, 1, 1, 1, 1, 32, 6, 32, 6]
    np.testing.assert_allclose(maps, _ablationcam_by_hand(model, batch), rtol=1e-4, atol=1e-6)
    assert _hooks_on(model) == 0


class TinyTokens(nn.Module):
    """A ViT in miniature: 4x4 patch tokens after a class token, (N, 17, 8) at ``block``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(9)
        self.patches = nn.Conv2d(3, 8, 8, stride=8)
        self.token = nn.Parameter(torch.randn(1, 1, 8))
        self.block = nn.Linear(8, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        tokens = self.patches(x).flatten(2).transpose(1, 2)
        tokens = self.block(torch.cat([self.token.expand(len(x), -1, -1), tokens], dim=1)).relu()
        return self.head(tokens[:, 0] + tokens[:, 1:].mean(dim=1))


def _zero_channel_zero(layout: str):
    """A forward hook that sets channel 0 of an output laid out as ``layout`` to zero."""

    def hook(_module, _args, output):
        output = output.clone()
        if layout == "nhwc":
            output[..., 0] = 0
        else:  # tokens: the patch tokens' channel 0, the class token left as it was
            output[:, 1:, 0] = 0
        return output

    return hook


@pytest.mark.parametrize(
    "model, layer, layout, side",
    [(tiny_convnext, "mixer.out", "nhwc", 48), (TinyTokens, "block", "tokens", 32)],
    ids=["channels-last", "tokens"],
)
def test_score_layer_reads_the_maps_back_into_the_layers_own_layout(model, layer, layout, side):
    model = model().eval()
    batch = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(10))
    results = (
        explain(model, batch[0], layers=[layer], cam="spy-layer-score"),
        explain(model, batch[1], layers=[layer], cam="spy-layer-score"),
    )
    assert [r.layers[0].layout.kind for r in results] == [layout] * 2
    handle = model.get_submodule(layer).register_forward_hook(_zero_channel_zero(layout))
    try:
        with torch.no_grad():
            altered = model(batch)
    finally:
        handle.remove()
    for seen, result, n in zip(SEEN, results, range(2)):
        assert seen["hooks"] == 0
        assert seen["plain"].item() == pytest.approx(result.target.logit, rel=1e-5)
        assert seen["altered"].item() == pytest.approx(altered[n, result.target.index].item(), rel=1e-5)
        assert abs(seen["altered"].item() - seen["plain"].item()) > 1e-4  # the change is seen


def test_score_layer_of_a_segmentation_scores_the_class_mean_logit_over_its_pixels():
    model = ToySegmenter().eval()
    image = torch.randn(3, 64, 64, generator=torch.Generator().manual_seed(4))
    result = explain(model, image, layers=["body"], task="segment", cam="spy-layer-score")
    (seen,) = SEEN
    pixels = torch.from_numpy(result.prediction.mask == result.target.index)
    with torch.no_grad():
        features = model.body(image[None])
        features[:, 0] = 0
        logits = F.interpolate(model.classifier(features), size=(64, 64), mode="bilinear", align_corners=False)
    assert seen["plain"].item() == pytest.approx(result.target.logit, rel=1e-5)
    assert seen["altered"].item() == pytest.approx(logits[0, result.target.index][pixels].mean().item(), rel=1e-5)


def test_score_layer_of_a_detection_scores_its_matched_box():
    from .test_detect import detector

    model = detector().eval()
    photo = torch.from_numpy(np.array(Image.open(SAMPLES / "cat.png").convert("RGB").resize((96, 96)))).permute(2, 0, 1)
    result = explain(
        model, photo.float() / 255, layers=["backbone.body.16"], cam="spy-layer-score", score_threshold=0.01, max_detections=2
    )
    assert len(SEEN) == len(result.prediction.detections) == 2
    for seen, detection in zip(SEEN, result.prediction.detections):
        assert seen["plain"].item() == pytest.approx(detection.score, rel=1e-5)
    assert _hooks_on(model) == 0


@pytest.mark.parametrize("method", ["scorecam", "ablationcam"])
def test_rescoring_methods_explain_a_segmentation(method):
    model = ToySegmenter().eval()
    image = torch.randn(3, 64, 64, generator=torch.Generator().manual_seed(4))
    result = explain(model, image, layers=["body"], task="segment", cam=method)
    (layer,) = result.layers
    assert result.cam_method == method and layer.cam.shape == (32, 32) and layer.cam.max() > 0


# ----------------------------------------------------------------------------- several methods in one run


def test_several_methods_in_one_run_keep_each_map_in_tensors_npz_and_report_json(photo, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(
        photo,
        "--resize",
        "64",
        "--crop",
        "64",
        "--cam",
        "hirescam, eigencam,toy-activation-sum",
        "--topk",
        "2",
        "--save-tensors",
        "--pictures",
        "none",
        layer=("features.3", "fc"),
        out=out,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    folder = out / "photo"
    tensors = np.load(folder / "tensors.npz")
    report = json.loads((folder / "report.json").read_text())
    assert report["cam_methods"] == ["hirescam", "eigencam", "toy-activation-sum"]
    assert report["asked"]["target"]["cam"] == "hirescam,eigencam,toy-activation-sum"
    conv, fc = report["layers"]
    assert conv["cam"]["method"] == "hirescam" and len(conv["cam_topk"]) == 2
    assert list(conv["cams"]) == ["hirescam", "eigencam", "toy-activation-sum"]
    assert all(entry["shape"] == [32, 32] for entry in conv["cams"].values())
    output, grad = tensors["features.3/output"][0], tensors["features.3/grad_output"][0]
    np.testing.assert_allclose(tensors["features.3/cam.toy-activation-sum"], np.maximum(output.sum(0), 0), rtol=1e-5)
    np.testing.assert_allclose(tensors["features.3/cam.hirescam"], np.maximum((grad * output).sum(0), 0), rtol=1e-4, atol=1e-7)
    np.testing.assert_array_equal(tensors["features.3/cam"], tensors["features.3/cam.hirescam"])  # the first stays at cam
    assert tensors["features.3/cam.eigencam"].shape == (32, 32) and "features.3/cam_2" in tensors.files
    assert conv["cams"]["eigencam"]["max"] == pytest.approx(float(tensors["features.3/cam.eigencam"].max()))
    assert set(fc["cams"]) == {"hirescam", "eigencam", "toy-activation-sum"}
    assert all("no spatial layout" in entry["skipped"] for entry in fc["cams"].values())
    assert not any(key.startswith("fc/cam") for key in tensors.files)


def test_several_methods_from_python_each_map_by_name():
    result = explain(
        tiny_net(),
        torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(11)),
        layers=["features.3"],
        cam=["eigencam", "gradcam"],
    )
    (layer,) = result.layers
    assert result.cam_method == "eigencam" and result.cam_methods == ("eigencam", "gradcam")
    assert list(layer.cams) == ["eigencam", "gradcam"] and layer.cam is layer.cams["eigencam"]
    alone = explain(
        tiny_net(), torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(11)), layers=["features.3"], cam="gradcam"
    )
    np.testing.assert_allclose(layer.cams["gradcam"], alone.layers[0].cam, rtol=1e-6)


def test_a_gradient_method_beside_one_without_says_why_it_has_no_map_of_a_layer_the_target_never_reaches():
    model, image = SideBranch().eval(), torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(1))
    (side,) = explain(model, image, layers=["side"], cam="toy-activation-sum,gradcam").layers
    assert list(side.cams) == ["toy-activation-sum"] and side.cam is not None
    assert "does not depend on this layer" in side.cam_notes["gradcam"]


@pytest.mark.parametrize(
    "cam, topk, message",
    [
        ("gradcam,,layercam", 1, "--cam gradcam,,layercam: an empty method name; give names separated by commas"),
        ("gradcam,layercam,gradcam", 1, "--cam gradcam,layercam,gradcam: gradcam named twice; give each method once"),
        ("gradcam,none", 1, "--cam gradcam,none: none means no CAM at all; drop it or the other names"),
        ("gradcam,eigencamm", 1, "--cam eigencamm: unknown method (did you mean 'eigencam'"),
        (
            "eigencam",
            3,
            "--topk 3 with --cam eigencam: eigencam makes the same map for every class (it uses no target), "
            "so its top-3 maps would be one map 3 times; drop --topk or put a class-specific method that maps a layer (gradcam) before eigencam",
        ),
    ],
)
def test_a_bad_list_of_methods_is_refused_in_one_line(photo, tmp_path, cam, topk, message):
    result = hookviz_run(photo, "--cam", cam, "--topk", topk, out=tmp_path / "out", env={"COLUMNS": "300", "TERM": "dumb"})
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_topk_with_a_class_specific_method_first_takes_eigencam_after_it():
    result = explain(tiny_net(), torch.rand(3, 32, 32), layers=["features.3"], cam="gradcam,eigencam", topk=2)
    assert len(result.layers[0].topk_cams) == 2 and list(result.layers[0].cams) == ["gradcam", "eigencam"]
    with pytest.raises(UsageError, match=r"topk=2 with cam='eigencam,gradcam': eigencam makes the same map"):
        explain(tiny_net(), torch.rand(3, 32, 32), layers=["features.3"], cam="eigencam,gradcam", topk=2)


# ----------------------------------------------------------------------------- maps at the input's resolution


class Smooth(nn.Module):
    """A model without kinks (tanh), where integrated gradients' sum is the score's change."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(12)
        self.stem = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.stem(x)).mean(dim=(2, 3)))


@pytest.mark.parametrize("which", ["zero", "blur", "mean"])
def test_integrated_gradients_sum_to_the_scores_change_from_each_baseline(which):
    from hookviz.methods.integrated_gradients import baseline

    model, image = Smooth().eval(), torch.rand(3, 40, 48, generator=torch.Generator().manual_seed(13))
    result = explain(model, image, layers=["stem"], cam="integrated-gradients", steps=16, ig_baseline=which)
    pixels = result.pixel_maps["integrated-gradients"]
    assert pixels.map.shape == (3, 40, 48) and pixels.layer is None and pixels.note is None
    start = baseline(image[None], which)
    with torch.no_grad():
        change = (model(image[None]) - model(start))[0, result.target.index].item()
    assert abs(change) > 1e-3
    assert pixels.map.sum() == pytest.approx(change, rel=1e-4, abs=1e-6)  # completeness
    assert result.asked["settings"] == {"integrated-gradients": {"steps": 16, "ig_baseline": which}}


def test_a_baseline_equal_to_the_input_is_noted_not_left_as_a_silent_zero_map():
    """A 1x1 input blurs to itself and is its own mean: its map was zero with no word."""
    model, one = Smooth().eval(), torch.rand(3, 1, 1, generator=torch.Generator().manual_seed(3))
    blurred = explain(model, one, layers=["stem"], cam="integrated-gradients", steps=4, ig_baseline="blur")
    assert not blurred.pixel_maps["integrated-gradients"].map.any()
    assert blurred.notes[-1] == (
        "<in-memory image>: integrated-gradients: the blur baseline equals the input, so integrated gradients "
        "are zero everywhere; try ig_baseline='zero'"
    )
    flat = explain(model, torch.full((3, 6, 6), 0.5), layers=["stem"], cam="integrated-gradients", steps=4, ig_baseline="mean")
    assert "the mean baseline equals the input" in flat.notes[-1] and "try ig_baseline='zero'" in flat.notes[-1]
    zero = explain(model, one, layers=["stem"], cam="integrated-gradients", steps=4, ig_baseline="zero")
    assert not any("baseline" in note for note in zero.notes), zero.notes


def test_the_blur_baseline_is_a_gaussian_of_sigma_a_tenth_of_the_shorter_side():
    from torchvision.transforms.functional import gaussian_blur

    from hookviz.methods.integrated_gradients import baseline

    image = torch.rand(1, 3, 40, 48, generator=torch.Generator().manual_seed(14))
    np.testing.assert_allclose(
        baseline(image, "blur").numpy(), gaussian_blur(image, [25, 25], [4.0, 4.0]).numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(baseline(image, "mean")[0, :, 7, 9].numpy(), image.mean(dim=(2, 3))[0].numpy(), rtol=1e-6)


def test_input_gradients_of_a_segmentation_are_those_of_the_class_mean_logit_over_its_pixels():
    model = ToySegmenter().eval()
    image = torch.randn(3, 64, 64, generator=torch.Generator().manual_seed(4))
    result = explain(model, image, layers=["body"], task="segment", cam="integrated-gradients", steps=1)
    pixels = torch.from_numpy(result.prediction.mask == result.target.index)
    half = (0.5 * image[None]).requires_grad_(True)  # one Gauss-Legendre node: the midpoint, weight 1
    model(half)["out"][0, result.target.index][pixels].mean().backward()
    np.testing.assert_allclose(
        result.pixel_maps["integrated-gradients"].map, (half.grad[0] * image).numpy(), rtol=1e-4, atol=1e-7
    )


def test_input_methods_explain_a_detection_and_leave_no_hook():
    from .test_detect import detector

    model = detector().eval()
    photo = torch.from_numpy(np.array(Image.open(SAMPLES / "cat.png").convert("RGB").resize((96, 96)))).permute(2, 0, 1)
    result = explain(
        model,
        photo.float() / 255,
        layers=["backbone.body.16"],
        cam="guided-backprop,integrated-gradients",
        steps=2,
        score_threshold=0.01,
        max_detections=1,
    )
    for method in ("guided-backprop", "integrated-gradients"):
        found = result.pixel_maps[method].map
        assert found.shape == (3, 96, 96) and np.isfinite(found).all()
        # the random detector's box scores 0.011, so its input gradients are about 1e-12: guided
        # backprop keeps them, but integrated gradients' two float32 steps round to 0 on some CPUs
        assert method != "guided-backprop" or np.abs(found).max() > 0
    assert _hooks_on(model) == 0


def test_input_methods_through_the_command_keep_their_maps_under_input(photo, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(
        photo,
        "--resize",
        "64",
        "--crop",
        "64",
        "--cam",
        "gradcam,guided-gradcam,integrated-gradients",
        "--steps",
        "4",
        "--ig-baseline",
        "mean",
        "--save-tensors",
        "--pictures",
        "none",
        layer="features.3",
        out=out,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "photo" / "report.json").read_text())
    tensors = np.load(out / "photo" / "tensors.npz")
    assert report["cam_methods"] == ["gradcam", "guided-gradcam", "integrated-gradients"]
    assert list(report["layers"][0]["cams"]) == ["gradcam"]
    guided, integrated = report["pixel_maps"]["guided-gradcam"], report["pixel_maps"]["integrated-gradients"]
    assert guided["shape"] == integrated["shape"] == [3, 64, 64] and guided["layer"] == "features.3"
    assert "layer" not in integrated and report["asked"]["target"]["settings"]["integrated-gradients"]["steps"] == 4
    assert tensors["input/guided-gradcam"].shape == tensors["input/integrated-gradients"].shape == (3, 64, 64)
    assert integrated["max"] == pytest.approx(float(tensors["input/integrated-gradients"].max()))


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--cam", "integrated-gradients", "--steps", "0"], "--steps 0: integrated gradients takes 1 to 1024 steps"),
        (["--cam", "integrated-gradients", "--ig-baseline", "noise"], "--ig-baseline noise: choose zero, blur, mean"),
        # Given to methods that all ignore them, they changed nothing, silently.
        (
            ["--steps", "8"],
            "--steps 8: only integrated-gradients takes it, and --cam gradcam does not include it; add integrated-gradients",
        ),
        (["--cam", "scorecam,guided-gradcam", "--ig-baseline", "blur"], "--ig-baseline blur: only integrated-gradients takes it"),
        (
            ["--cam", "gradcam,guided-backprop", "--model", "tests.conftest:tiny_convnext"],
            "--cam guided-backprop: TinyConvNeXt has no nn.ReLU module (its activations are another function, or F.relu), "
            "so guided backprop has nothing to guide; choose integrated-gradients",
        ),
        (
            ["--cam", "guided-gradcam", "--model", "tests.conftest:tiny_convnext"],
            "--cam guided-gradcam: TinyConvNeXt has no nn.ReLU",
        ),
        (
            ["--cam", "integrated-gradients", "--topk", "2"],
            "--topk 2 needs a method that maps a layer; --cam integrated-gradients has none",
        ),
    ],
)
def test_bad_input_method_options_are_refused_in_one_line(photo, tmp_path, arguments, message):
    model = [] if "--model" in arguments else ["--model", "tests.conftest:tiny_net"]
    result = hookviz_run(photo, *model, *arguments, model=None, out=tmp_path / "out", env={"COLUMNS": "300", "TERM": "dumb"})
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_a_plugin_method_does_not_switch_off_the_check_that_refuses_steps(photo, tmp_path, registries_restored):
    """--steps without a method that takes it changes nothing: refused, also when a method from
    outside the package is asked (one among them used to turn the check off, reading it or not)."""

    @register_method("toy-plain", needs_gradients=False)
    def plain(ctx):
        return ctx.activations.sum(dim=1).clamp(min=0)

    out = tmp_path / "out"
    result = hookviz_run(
        photo, "--cam", "gradcam,toy-plain", "--steps", "8", layer="features.3", out=out, env={"COLUMNS": "300", "TERM": "dumb"}
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "hookviz: error: --steps 8: only integrated-gradients takes it, and --cam gradcam,toy-plain does not include it; "
        "add integrated-gradients to the methods or drop the option"
    ]
    assert not out.exists()


@dataclass(frozen=True)
class ToyOptions:
    """A plug-in method's own settings."""

    strength: float = field(default=1.0, metadata={"help": "How much of the map to keep.", "low": 0.0, "high": 2.0})
    mode: str = option("sum", help="sum or max over the channels.", choices=("sum", "max"))


def test_a_plugin_method_that_declares_settings_gets_them_and_only_it_takes_them(photo, tmp_path, registries_restored):
    """A method declares its settings as a frozen dataclass (``options=``): they are its flags
    and explain()'s keywords, it reads them as ctx.settings, and one given while it is not asked
    is refused naming it; IG's settings stay refused for it."""

    @register_method("toy-settings", needs_gradients=False, options=ToyOptions)
    def with_settings(ctx):
        SEEN.append(ctx.settings)
        return ctx.activations.sum(dim=1).clamp(min=0) * ctx.settings.strength

    explain(tiny_net(), torch.rand(3, 32, 32), layers=["features.3"], cam="toy-settings", strength=0.5, mode="max")
    assert SEEN == [ToyOptions(strength=0.5, mode="max")]
    assert _refusal(strength=0.5, cam="gradcam") == (
        "strength=0.5: only toy-settings takes it, and cam='gradcam' does not include it; "
        "add toy-settings to the methods or drop the option"
    )
    assert _refusal(ig_baseline="blur", cam="toy-settings") == (
        "ig_baseline='blur': only integrated-gradients takes it, and cam='toy-settings' does not include it; "
        "add integrated-gradients to the methods or drop the option"
    )
    assert _refusal(mode="mean", cam="toy-settings") == "mode='mean': choose sum or max"
    assert (
        _refusal(strengh=1.5, cam="toy-settings")
        == "strengh: explain() takes no such keyword (did you mean 'strength', 'steps', 'start'?)"
    )
    helped = hookviz_cli("run", "--help", env={"COLUMNS": "300", "TERM": "dumb", "NO_COLOR": "1"})
    assert "--strength" in helped.output and "How much of the map to keep." in helped.output
    refused = hookviz_run(photo, "--strength", "3", "--cam", "toy-settings", layer="features.3", out=tmp_path / "o")
    assert refused.exit_code == 2 and refused.output.strip().splitlines() == [
        "hookviz: error: --strength 3.0: must be from 0.0 to 2.0"
    ], refused.output
    given = hookviz_run(
        photo, "--cam", "toy-settings", "--strength", "2", "--pictures", "none", layer="features.3", out=tmp_path / "out"
    )
    assert given.exit_code == 0, given.output
    report = json.loads((tmp_path / "out" / "photo" / "report.json").read_text())
    assert report["asked"]["target"]["settings"] == {"toy-settings": {"strength": 2.0, "mode": "sum"}}


def test_none_for_a_setting_that_has_a_value_is_refused_in_one_line():
    """None passed every check: ``ig_baseline=None`` reached the method as a KeyError, a
    plug-in's ``strength=None`` its arithmetic."""
    from hookviz.options.declared import check_values

    assert _refusal(cam="integrated-gradients", ig_baseline=None) == "ig_baseline=None: choose zero, blur, mean"
    for given, refusal in (
        ({"strength": None}, "strength=None: give a number"),
        ({"mode": None}, "mode=None: choose sum or max"),
    ):
        with pytest.raises(UsageError) as refused:
            check_values(ToyOptions(**given))
        assert str(refused.value) == refusal


def test_a_method_option_group_is_checked_when_it_is_registered(registries_restored):
    with pytest.raises(
        UsageError, match=r"^method 'toy-seed': its setting 'seed' is taken by the run's own options; give it another name$"
    ):

        @dataclass(frozen=True)
        class Seeded:
            seed: int = 0

        register_method("toy-seed", options=Seeded)
    with pytest.raises(UsageError, match=r"^method 'toy-plain-class': options=.*; give a frozen dataclass"):
        register_method("toy-plain-class", options=dict)
    assert "toy-seed" not in METHODS and "toy-plain-class" not in METHODS


def _refusal(**given) -> str:
    with pytest.raises(UsageError) as refused:
        explain(tiny_net(), torch.rand(3, 32, 32), layers=["features.3"], **given)
    return str(refused.value)


def test_skip_existing_redoes_an_image_explained_with_other_steps_or_methods(photo, tmp_path):
    common = [
        "run",
        str(photo),
        "--model",
        "tests.conftest:tiny_net",
        "--weights",
        "none",
        "--pictures",
        "none",
        "--skip-existing",
        "--out",
        str(tmp_path / "out"),
    ]
    first = [*common, "--cam", "gradcam,integrated-gradients", "--steps", "4"]
    assert hookviz_cli(*first).exit_code == 0
    assert "1 skipped" in hookviz_cli(*first).stderr
    for changed in (["--cam", "gradcam,integrated-gradients", "--steps", "8"], ["--cam", "gradcam,eigencam"]):
        again = hookviz_cli(*common, *changed)
        assert again.exit_code == 0 and "skipped" not in again.stderr, again.stderr


@register_method("spy-layer-fill", needs_gradients=False, needs_rescoring=True)
def spy_layer_fill(ctx):
    """Each photo scored with the layer's channel 0 set to 1 everywhere."""
    altered = ctx.activations.clone()
    altered[:, 0] = 1.0
    SEEN.append({"altered": ctx.score_layer(altered, torch.arange(len(altered)))})
    return ctx.activations.sum(dim=1).clamp(min=0)


def test_score_layer_replaces_only_the_recorded_call_of_a_module_called_twice():
    model = tiny_net().eval()  # act runs twice: act:0, then act:1 on 1.5 times its output
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(15))
    result = explain(model, image, layers=["act:1"], cam="spy-layer-fill")
    (seen,) = SEEN
    calls = []

    def second_call_channel_filled(_module, _args, output):
        calls.append(1)
        if len(calls) == 2:  # filling the first call instead would give 1.5 after the second
            output = output.clone()
            output[:, 0] = 1.0
            return output
        return None

    handle = model.act.register_forward_hook(second_call_channel_filled)
    try:
        with torch.no_grad():
            altered = model(image[None])[0, result.target.index].item()
    finally:
        handle.remove()
    assert seen["altered"].item() == pytest.approx(altered, rel=1e-5)
    assert abs(altered - result.target.logit) > 1e-4


def test_several_methods_on_a_layer_without_a_map_draw_no_comparison_and_the_image_is_done(tmp_path):
    """A linear head among the layers: no method maps it, so it gets no cams.png (each method
    says why in a note), while the convolution beside it does."""

    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", "--cam", "gradcam,layercam", layer=("features.3", "fc"), out=out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    pictures = {layer["name"]: layer["pictures"] for layer in report["layers"]}
    assert pictures["features.3"]["cams"] == "features.3.cams.png" and pictures["fc"]["cams"] is None
    assert (out / "cat" / "features.3.cams.png").exists() and not (out / "cat" / "fc.cams.png").exists()


@register_method("toy-occlusion", needs_gradients=False, needs_rescoring=True, needs_input=True, resolution="input")
def toy_occlusion(ctx):
    """Occlusion in a few lines, as a plug-in writes it: each 16x16 patch set to zero, and the
    drop of the target's score where it was, on every input channel."""
    inputs = ctx.inputs
    count, _, height, width = inputs.shape
    plain = ctx.score(inputs)
    maps = torch.zeros_like(inputs, dtype=torch.float32)
    for top in range(0, height, 16):
        for left in range(0, width, 16):
            hidden = inputs.clone()
            hidden[..., top : top + 16, left : left + 16] = 0
            drop = plain - ctx.score(hidden)
            maps[..., top : top + 16, left : left + 16] = drop[:, None, None, None]
    return maps


def test_an_input_method_that_rescores_gets_its_scorer_so_occlusion_is_a_plugin():
    model = tiny_net().eval()
    batch = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    loaded = LoadedModel("tiny", model, "seeded", None, Preprocessing())
    explainer = Explainer.create(loaded, layers=LayerOptions(("features.3",)), target=TargetOptions(cam="toy-occlusion"))
    results = explainer.explain_batch(_prepared(batch))
    with torch.no_grad():
        for i, result in enumerate(results):
            target = result.target.index
            hidden = batch[i].clone()
            hidden[:, 16:, :16] = 0  # the bottom-left patch
            drop = model(batch[i : i + 1])[0, target] - model(hidden[None])[0, target]
            found = result.pixel_maps["toy-occlusion"].map
            assert found.shape[-2:] == (32, 32)
            np.testing.assert_allclose(found[..., 20, 4], float(drop), rtol=1e-4, atol=1e-6)
            assert np.ptp(found) > 0


@register_method("toy-input-gradient-at-layer", needs_gradients=False, needs_input=True, needs_input_gradients=True)
def toy_input_gradient_at_layer(ctx):
    """A layer method that reads the input's gradient: its magnitude pooled to the layer's grid."""
    gradient = ctx.input_gradient(ctx.inputs).abs().sum(dim=1, keepdim=True)
    return F.adaptive_avg_pool2d(gradient, ctx.activations.shape[-2:])[:, 0]


def test_a_layer_method_that_needs_input_gradients_gets_them_for_each_cam_key():
    """Every need a method declares is delivered at either resolution: a layer method's
    ``ctx.input_gradient`` was None, so a plug-in such as FullGrad could not be written."""
    model = tiny_net().eval()
    batch = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(6))
    loaded = LoadedModel("tiny", model, "seeded", None, Preprocessing())
    target = TargetOptions(cam="toy-input-gradient-at-layer", topk=2)
    results = Explainer.create(loaded, layers=LayerOptions(("features.3",)), target=target).explain_batch(_prepared(batch))
    for i, result in enumerate(results):
        for target, cam in [(result.target, result.layers[0].cam), *result.layers[0].topk_cams]:
            image = batch[i : i + 1].clone().requires_grad_(True)
            (gradient,) = torch.autograd.grad(model(image)[0, target.index], image)
            wanted = F.adaptive_avg_pool2d(gradient.abs().sum(dim=1, keepdim=True), (16, 16))[0, 0]
            np.testing.assert_allclose(cam, wanted.numpy(), rtol=1e-4, atol=1e-7)


NEEDS = {
    "needs_gradients": ("gradients",),
    "needs_rescoring": ("score", "score_layer"),
    "needs_input": ("inputs",),
    "needs_input_gradients": ("input_gradient",),
    "needs_hessian": ("hessian_vector",),
}


@pytest.mark.parametrize("resolution", ["layer", "input"])
@pytest.mark.parametrize("need", sorted(NEEDS))
def test_every_need_a_method_declares_is_delivered_at_either_resolution(need, resolution, registries_restored):
    given: list[MethodContext] = []

    def spy(ctx):
        given.append(ctx)
        if resolution == "input":
            return torch.ones(ctx.activations.shape[0], 3, 32, 32)
        return ctx.activations.sum(dim=1).clamp(min=0) + 1

    flags = dict.fromkeys(NEEDS, False) | {need: True}
    register_method(f"spy-{need}-{resolution}", resolution=resolution, **flags)(spy)
    model = tiny_net().eval()
    batch = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    loaded = LoadedModel("tiny", model, "seeded", None, Preprocessing())
    target = TargetOptions(cam=f"spy-{need}-{resolution}")
    Explainer.create(loaded, layers=LayerOptions(("features.3",)), target=target).explain_batch(_prepared(batch))
    assert given
    for ctx in given:
        assert all(getattr(ctx, name) is not None for name in NEEDS[need]), (need, resolution, ctx)
        others = [name for other, names in NEEDS.items() if other != need for name in names]
        assert all(getattr(ctx, name) is None for name in others), (need, resolution, ctx)
