"""The superpixel methods (``feature-ablation``, ``lime``, ``kernel-shap``) against captum 0.9's own
classes (``FeatureAblation``, ``Lime``, ``KernelShap``) on one random-weight resnet18, one seeded
batch and the same superpixels (hookviz's SLIC labels handed to captum as its ``feature_mask``).

Lime and Kernel SHAP sample. hookviz draws each photo's perturbations from a ``torch.Generator``
seeded by ``--superpixel-seed``, with the very calls captum makes on torch's global generator
(``torch.bernoulli`` of K halves per sample; ``torch.multinomial`` then ``torch.randn`` per
sample), and a fresh generator seeded on the CPU gives the same stream as the global one after
``torch.manual_seed``. So each captum call below runs, one photo at a time, right after
``torch.manual_seed(seed)`` inside ``torch.random.fork_rng`` (the test's own random state is
put back): both then draw the same perturbations, and the fitted coefficients agree.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from hookviz import Explainer, LayerOptions, TargetOptions
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.methods.superpixels import SuperpixelOptions, segments
from hookviz.models.loading import LoadedModel

from .cli_helpers import hookviz_run
from .conftest import SAMPLES

SIDE = 64
TARGET = 8


@pytest.fixture(scope="module")
def resnet18():
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval()


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(1)
    # smooth patches, which SLIC can follow, and a little noise
    smooth = torch.nn.functional.interpolate(torch.randn(2, 3, 8, 8), size=(SIDE, SIDE), mode="bilinear")
    return smooth + 0.1 * torch.randn(2, 3, SIDE, SIDE)


def ours(model, batch, method: str, settings: SuperpixelOptions) -> np.ndarray:
    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("resnet18", model, "seeded", None, Preprocessing())
    target = TargetOptions(target=str(TARGET), cam=method, settings=(settings,))
    results = Explainer.create(loaded, layers=LayerOptions(("layer4",)), target=target).explain_batch(images)
    return np.stack([result.pixel_maps[method].map for result in results])


def masks(batch, settings: SuperpixelOptions) -> list[torch.Tensor]:
    """hookviz's superpixels of each photo, as captum's feature_mask (1, 1, H, W)."""
    return [segments(batch[n : n + 1], settings, "test")[None, None] for n in range(len(batch))]


def relative(mine: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(mine - theirs).max() / np.abs(theirs).max())


@pytest.mark.parametrize("which", ["zero", "blur"])
def test_feature_ablation_equals_captums_over_the_same_superpixels(resnet18, batch, which):
    from captum.attr import FeatureAblation

    from hookviz.methods.integrated_gradients import baseline

    settings = SuperpixelOptions(superpixels=12, superpixel_baseline=which)
    mine = ours(resnet18, batch, "feature-ablation", settings)
    theirs = [
        FeatureAblation(resnet18)
        .attribute(
            batch[n : n + 1],
            baselines=baseline(batch[n : n + 1], which),
            target=TARGET,
            feature_mask=mask,
            perturbations_per_eval=8,
        )[0]
        .numpy()
        for n, mask in enumerate(masks(batch, settings))
    ]
    theirs = np.stack(theirs)
    assert mine.shape == theirs.shape == (2, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3
    assert len(np.unique(mine[0, 0])) > 4  # one value per superpixel, and there are several


def _captum_sampled(reference, batch, settings: SuperpixelOptions) -> np.ndarray:
    found = []
    for n, mask in enumerate(masks(batch, settings)):
        with torch.random.fork_rng():
            torch.manual_seed(settings.superpixel_seed)  # what hookviz's generator is seeded with, for each photo
            found.append(
                reference.attribute(
                    batch[n : n + 1], baselines=0.0, target=TARGET, feature_mask=mask, n_samples=settings.superpixel_samples
                )[0].numpy()
            )
    return np.stack(found)


@pytest.mark.slow  # 2-4 s of CPU each: four maps by hookviz, two by captum
@pytest.mark.parametrize("method", ["lime", "kernel-shap"])
def test_lime_and_kernel_shap_equal_captums_drawing_the_same_samples(resnet18, batch, method):
    from captum.attr import KernelShap, Lime

    settings = SuperpixelOptions(superpixels=10, superpixel_samples=40, superpixel_seed=3)
    state = torch.random.get_rng_state()
    mine = ours(resnet18, batch, method, settings)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's random stream is untouched
    reference = Lime(resnet18) if method == "lime" else KernelShap(resnet18)
    theirs = _captum_sampled(reference, batch, settings)
    assert mine.shape == theirs.shape == (2, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3
    other = ours(resnet18, batch[:1], method, settings)  # a photo's map does not depend on its batch
    np.testing.assert_array_equal(other[0], mine[0])
    reseeded = ours(resnet18, batch[:1], method, SuperpixelOptions(superpixels=10, superpixel_samples=40, superpixel_seed=4))
    assert not np.array_equal(reseeded[0], mine[0])


@pytest.mark.slow
def test_superpixel_methods_explain_a_segmenter_by_its_class_score():
    """A segmentation class's score (its mean logit over the pixels first predicted as it), as
    the task defines it, through ``ctx.score``: feature ablation's map equals captum's with
    that score as the forward function."""
    from captum.attr import FeatureAblation

    import hookviz

    torch.manual_seed(0)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4).eval()
    torch.manual_seed(2)
    x = torch.nn.functional.interpolate(torch.randn(1, 3, 6, 6), size=(48, 48), mode="bilinear")
    result = hookviz.explain(model, x, layers=["backbone.4"], cam="feature-ablation", superpixels=8)
    mine = result.pixel_maps["feature-ablation"].map
    with torch.no_grad():
        logits = model(x)["out"]
    target = int(logits.argmax(1).flatten().mode().values)  # top1: the class over most pixels
    region = logits.argmax(1)[0] == target

    def score(batch):
        return model(batch)["out"][:, target][:, region].mean(dim=1)

    mask = segments(x, SuperpixelOptions(superpixels=8), "test")[None, None]
    theirs = FeatureAblation(score).attribute(x, feature_mask=mask)[0].numpy()
    assert mine.shape == theirs.shape == (3, 48, 48) and np.abs(theirs).max() > 0
    assert relative(mine, theirs) < 1e-3
    lime = hookviz.explain(model, x, layers=["backbone.4"], cam="lime", superpixels=8, superpixel_samples=8)
    assert np.isfinite(lime.pixel_maps["lime"].map).all()


def test_superpixels_that_do_not_fit_are_refused_in_one_line(tmp_path):
    cat = SAMPLES / "cat.png"
    for cam in ("lime", "kernel-shap"):
        result = hookviz_run(cat, "--resize", "16", "--crop", "16", "--cam", cam, "--superpixels", "300", out=tmp_path / cam)
        assert result.exit_code == 2, result.output
        assert "--superpixels 300: the input has only 16x16 pixels; ask for at most 256 superpixels" in result.output
        assert "Traceback" not in result.output and not (tmp_path / cam / "cat.png").exists()
    given = hookviz_run(cat, "--resize", "16", "--superpixel-samples", "5", out=tmp_path / "gradcam")
    assert given.exit_code == 2 and "only feature-ablation or lime or kernel-shap takes it" in given.output, given.output


def test_a_clip_is_refused_in_one_line(tmp_path):
    from .video_clips import moving_square

    frames = tmp_path / "jump"
    frames.mkdir()
    for index in range(4):
        Image.fromarray(moving_square(index)).save(frames / f"f{index + 1}.png")
    result = hookviz_run(frames, "--resize", "24", "--crop", "24", "--cam", "kernel-shap", model="tests.video_clips:video_net")
    assert result.exit_code == 2, result.output
    assert "kernel-shap: the input is a clip, and superpixels (SLIC) cut only photos" in result.output, result.output


def test_a_missing_extra_is_refused_in_one_line(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "skimage.segmentation", None)  # import_module then raises ImportError, as if not installed
    result = hookviz_run(SAMPLES / "cat.png", "--resize", "32", "--cam", "feature-ablation", out=tmp_path)
    assert result.exit_code == 2, result.output
    assert (
        "feature-ablation needs the superpixels extra" in result.output and "pip install 'hookviz[superpixels]'" in result.output
    )
    assert "Traceback" not in result.output


def test_the_draws_are_captums_from_a_seeded_generator_and_leave_the_global_one_alone():
    """What makes the sampled methods comparable: hookviz's draws from ``torch.Generator().manual_seed(s)``
    are those captum's samplers make from the global generator after ``torch.manual_seed(s)``."""
    from captum.attr import KernelShap
    from captum.attr._core.lime import default_perturb_func
    from torch.distributions.categorical import Categorical

    from hookviz.methods.kernel_shap import draw_shapley
    from hookviz.methods.lime import draw_halves

    state = torch.random.get_rng_state()
    halves = draw_halves(torch.Generator().manual_seed(5), 9, 30)
    shapley = draw_shapley(torch.Generator().manual_seed(5), 9, 30)
    assert torch.equal(torch.random.get_rng_state(), state)
    with torch.random.fork_rng():
        torch.manual_seed(5)
        theirs = torch.cat([default_perturb_func(torch.zeros(1), num_interp_features=9) for _ in range(30)])
    assert torch.equal(halves, theirs)
    counts = torch.arange(9, dtype=torch.float)
    probs = torch.tensor(8) / (counts * (9 - counts))
    probs[0] = 0.0
    with torch.random.fork_rng():
        torch.manual_seed(5)
        sampler = KernelShap(lambda x: x).kernel_shap_perturb_generator(
            torch.zeros(1), num_select_distribution=Categorical(probs), num_interp_features=9
        )
        theirs = torch.cat([next(sampler) for _ in range(30)])
    assert torch.equal(shapley, theirs) and 0 < int(shapley[2:].sum()) < 28 * 9


@pytest.mark.slow
def test_a_photo_slic_cannot_cut_fails_alone_and_the_others_are_explained(tmp_path):
    """Issue 37: 48 px of noise, which SLIC leaves as one superpixel, stopped the whole run (exit 2,
    0 done); it must fail as other per-photo faults do, in one line naming it, and the cat be explained."""
    import json

    photos = tmp_path / "in"
    photos.mkdir()
    noise = np.random.default_rng(0).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    Image.fromarray(noise).save(photos / "noise.png")
    Image.open(SAMPLES / "cat.png").save(photos / "cat.png")
    for cam in ("feature-ablation", "lime", "kernel-shap"):
        out = tmp_path / cam
        small = ("--resize", "48", "--crop", "48", "--superpixel-samples", "4")
        result = hookviz_run(photos, *small, "--cam", cam, "--batch-size", "2", out=out)
        assert result.exit_code == 1, result.output
        failed = [line for line in result.output.splitlines() if "SLIC finds only one superpixel" in line]
        assert len(failed) == 1 and failed[0].startswith(f"hookviz: failed: {photos / 'noise.png'}: --cam {cam}: "), failed
        run = json.loads((out / "run.json").read_text())
        assert run["counts"]["done"] == 1 and run["counts"]["failed"] == 1, run["counts"]
        report = json.loads((out / "cat" / "report.json").read_text())
        assert cam in report["pixel_maps"] and not (out / "noise" / "report.json").exists()
        assert "Traceback" not in result.output
