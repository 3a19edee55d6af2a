"""The multi-input kind (``hookviz.samples.multi``): ``--input NAME=PATH`` binds a forward argument
to files (folders paired by relative path), the same mapping goes to ``explain()`` and
``hookviz.run``, and bad input gets one line while the other samples go on."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from PIL import Image

from hookviz.errors import UsageError
from hookviz.tasks.segment import Segment

from .cli_helpers import hookviz_run
from .conftest import assert_same_cam
from .explorer_helpers import explorer_pictures
from .test_records import _validate_run_folder

RGBD, META, SIAMESE = "tests.multi_models:build_rgbd", "tests.multi_models:build_meta", "tests.multi_models:build_siamese"
KEYS = ("a/001", "a/002", "b/003")
HEIGHT, WIDTH = 40, 48


def _photos(folder, keys=KEYS, seed=0):
    rng = np.random.default_rng(seed)
    for key in keys:
        path = folder / f"{key}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)).save(path)
    return folder


def _depths(folder, keys=KEYS, shape=(HEIGHT, WIDTH), seed=1):
    rng = np.random.default_rng(seed)
    for key in keys:
        path = folder / f"{key}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, rng.random(shape).astype(np.float32))
    return folder


def _meta(path, rows):
    path.write_text(
        "file,age,height,weight\n" + "".join(f"{name},{','.join(map(str, values))}\n" for name, values in rows.items())
    )
    return path


@pytest.fixture
def rgbd(tmp_path):
    return _photos(tmp_path / "rgb"), _depths(tmp_path / "depth"), tmp_path / "out"


def _rgbd_run(rgb, depth, out, *args, layer=("depth.1", "fusion")):
    return hookviz_run(
        rgb, "--input", f"depth={depth}", "--aligned", "depth", "--task", Segment.name, "--resize", 32, *args,
        model=RGBD, weights=None, layer=layer, out=out,
    )  # fmt: skip


def _statuses(out) -> dict:
    run = json.loads((out / "run.json").read_text())
    return {entry["image"].rsplit("/", 1)[-1]: entry["status"] for entry in run["images"]}


@pytest.mark.slow  # hookviz run in this process: several seconds of CPU
def test_rgbd_segmentation_binds_depth_by_keyword_and_pairs_folders_by_relative_path(rgbd):
    rgb, depth, out = rgbd
    result = _rgbd_run(rgb, depth, out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "001" / "report.json").read_text())
    assert report["task"] == Segment.name and {layer["name"] for layer in report["layers"]} == {"depth.1", "fusion"}
    inputs = report["inputs"]
    assert inputs["rgb"]["file"].endswith("rgb/a/001.png") and inputs["depth"]["file"].endswith("depth/a/001.npy")
    assert inputs["depth"]["kind"] == "tensor" and len(inputs["depth"]["identity"]["sha256"]) == 64
    assert report["asked"]["target"]["sample"]["aligned"] == ["depth"]
    assert json.loads((out / "003" / "report.json").read_text())["inputs"]["depth"]["file"].endswith("depth/b/003.npy")
    assert _validate_run_folder(out) == 4  # the reports' inputs as the schema says
    assert "input.depth.jpg" in report["files"] and "001/input.depth.jpg" in explorer_pictures(out)


@pytest.mark.slow  # hookviz run in this process: several seconds of CPU
def test_skip_existing_redoes_a_sample_when_any_of_its_inputs_changed(rgbd):
    rgb, depth, out = rgbd
    assert _rgbd_run(rgb, depth, out, layer=("fusion",)).exit_code == 0
    again = _rgbd_run(rgb, depth, out, "--skip-existing", layer=("fusion",))
    assert "3 skipped" in again.stderr, again.stderr
    np.save(depth / "a" / "002.npy", np.zeros((HEIGHT, WIDTH), np.float32))  # the depth map alone changes
    third = _rgbd_run(rgb, depth, out, "--skip-existing", layer=("fusion",))
    assert "2 skipped" in third.stderr and "002.png" in third.stdout and "001.png" not in third.stdout, third.output


def _explainer(model, *inputs, aligned=(), task="auto", sources=()):
    from hookviz.explaining.explainer import Explainer
    from hookviz.inputs.images import Preprocessing
    from hookviz.models.sources.base import LoadedModel
    from hookviz.options import InputOptions
    from hookviz.samples import MultiOptions

    loaded = LoadedModel(type(model).__name__, model, "none", None, Preprocessing(resize=32, size=32), task=task)
    options = MultiOptions(input=tuple(inputs), aligned=tuple(aligned), sources=tuple(map(str, sources)))
    return Explainer.create(loaded, inputs=InputOptions(), sample_options=(options,))


def test_an_aligned_map_gets_the_photos_resize_and_crop_and_a_csv_its_row(tmp_path):
    from torchvision.transforms import functional as F

    from tests.multi_models import build_meta, build_rgbd

    rgb, depth = _photos(tmp_path / "rgb"), _depths(tmp_path / "depth")
    explainer = _explainer(build_rgbd(), f"depth={depth}", aligned=("depth",), task=Segment.name, sources=[rgb])
    kind, key = explainer.kind, rgb / "a" / "002.png"
    sample = kind.prepare(kind.load(key, 10**8), explainer.preprocessing, 10**8)
    raw = torch.from_numpy(np.load(depth / "a" / "002.npy"))[None]
    expected = (
        F.center_crop(F.resize(raw, 32, antialias=False), 32)
        if explainer.preprocessing.crop
        else F.resize(raw, 32, antialias=False)
    )
    assert sample.tensors["depth"].shape[1:] == sample.tensors["rgb"].shape[1:]
    assert torch.equal(sample.tensors["depth"], expected) and sample.positional == ("rgb", "depth")
    table = _meta(tmp_path / "meta.csv", {"001.png": (1, 2, 3), "002.png": (4, 5, 6.5), "003.png": (7, 8, 9)})
    explainer = _explainer(build_meta(), f"meta={table}", sources=[rgb])  # a file binds every sample
    sample = explainer.kind.prepare(explainer.kind.load(key, 10**8), explainer.preprocessing, 10**8)
    assert sample.tensors["meta"].tolist() == [4.0, 5.0, 6.5] and sample.features["meta"] == ("age", "height", "weight")


@pytest.mark.slow  # hookviz.run over three samples
def test_explain_and_run_take_a_mapping_of_inputs(tmp_path):
    import hookviz
    from hookviz.options import InputOptions, ModelOptions, RunOptions
    from hookviz.samples import MultiOptions
    from tests.multi_models import build_rgbd

    rgb, depth = _photos(tmp_path / "rgb"), _depths(tmp_path / "depth")
    model = build_rgbd()
    depth_tensor = torch.rand(1, 32, 38)  # the photo, its shorter side resized to 32 (a segmenter crops none)
    result = hookviz.explain(
        model, {"rgb": rgb / "a" / "001.png", "depth": depth_tensor}, layers=["depth.1"], task=Segment.name,
        inputs=InputOptions(resize=32),
    )  # fmt: skip
    sample = result.image
    assert torch.equal(sample.tensors["depth"], depth_tensor) and sample.files["rgb"].endswith("001.png")
    assert_same_cam(np.asarray(result["depth.1"].cam), _hand_gradcam(model, sample, "depth.1", result.target.index))
    summary = hookviz.run(
        {"rgb": rgb, "depth": depth}, ModelOptions(RGBD, task=Segment.name), inputs=InputOptions(resize=32),
        options=RunOptions(out=tmp_path / "out"), sample_options=(MultiOptions(aligned=("depth",)),),
    )  # fmt: skip
    assert summary.count("done") == 3 and (tmp_path / "out" / "002" / "report.json").is_file()


def _hand_gradcam(model, sample, layer: str, target: int) -> np.ndarray:
    """Grad-CAM at ``layer`` written out for the segmenter's objective (the target class's logits over its predicted pixels)."""
    store = {}
    handle = model.get_submodule(layer).register_forward_hook(lambda _m, _i, out: store.update(out=out))
    try:
        logits = model(sample.tensors["rgb"][None], sample.tensors["depth"][None])[0]
    finally:
        handle.remove()
    mask = logits.argmax(dim=0) == target
    objective = (logits[target] * mask).sum() if bool(mask.any()) else logits[target].sum()
    (grad,) = torch.autograd.grad(objective, store["out"])
    return (grad.mean(dim=(2, 3), keepdim=True) * store["out"]).sum(dim=1).clamp(min=0)[0].detach().numpy()


@pytest.mark.slow  # hookviz run in this process: several seconds of CPU
def test_two_views_bind_by_position_and_a_metadata_csv_by_keyword(tmp_path):
    left, right = _photos(tmp_path / "left"), _photos(tmp_path / "right", seed=5)
    result = hookviz_run([], "--input", f"0={left}", "--input", f"1={right}", model=SIAMESE, weights=None, out=tmp_path / "o1")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "o1" / "001" / "report.json").read_text())["inputs"]["right"]["file"].endswith(
        "right/a/001.png"
    )
    table = _meta(tmp_path / "meta.csv", {"001.png": (1, 2, 3), "a/002": (4, 5, 6), "003": (7, 8, 9)})
    result = hookviz_run(left, "--input", f"meta={table}", model=META, weights=None, out=tmp_path / "o2")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "o2" / "003" / "report.json").read_text())["inputs"]["meta"]["features"] == [
        "age",
        "height",
        "weight",
    ]


# -- bad input: one line, and the other samples go on


@pytest.mark.slow  # hookviz run in this process: several seconds of CPU
def test_a_sample_missing_an_input_or_with_a_bad_tensor_fails_alone(rgbd):
    rgb, depth, out = rgbd
    (depth / "a" / "002.npy").unlink()
    np.save(depth / "b" / "003.npy", np.zeros((HEIGHT, WIDTH), np.int64))
    result = _rgbd_run(rgb, depth, out, layer=("fusion",))
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if "002" in line or "003" in line]
    assert any("input 'depth' has no file" in line and "a/002" in line for line in lines), result.stderr
    assert any("003.npy" in line and "dtype int64" in line for line in lines), result.stderr
    assert "Traceback" not in result.output and _statuses(out) == {"001.png": "done", "002.png": "failed", "003.png": "failed"}


@pytest.mark.slow  # hookviz run in this process: several seconds of CPU
def test_a_tensor_of_the_wrong_shape_and_a_csv_without_the_row_fail_alone(tmp_path):
    rgb, out = _photos(tmp_path / "rgb"), tmp_path / "out"
    table = _meta(tmp_path / "meta.csv", {"001.png": (1, 2, 3), "003.png": (7, 8, 9)})
    result = hookviz_run(rgb, "--input", f"meta={table}", model=META, weights=None, out=out)
    assert result.exit_code == 1 and "meta.csv: input 'meta': no row for 002.png" in result.stderr, result.output
    assert _statuses(out)["001.png"] == "done" and _statuses(out)["002.png"] == "failed"
    vectors = _depths(tmp_path / "vectors", shape=(3,))  # the metadata as .npy files, taken as they are
    np.save(vectors / "b" / "003.npy", np.zeros(4, np.float32))
    result = hookviz_run(rgb, "--input", f"meta={vectors}", model=META, weights=None, out=tmp_path / "out2")
    assert result.exit_code == 1 and "003.npy: input 'meta': a tensor of shape (4,); the model takes (3,)" in result.stderr, (
        result.output
    )
    assert _statuses(tmp_path / "out2") == {"001.png": "done", "002.png": "done", "003.png": "failed"}


@pytest.mark.parametrize(
    "binding, words",
    [
        ("dept={depth}", "forward takes no argument 'dept'"),
        ("rgb={rgb}", "two inputs bound to one argument ('rgb'"),
        ("depth={elsewhere}", "pairs no file with the 3 photos"),
        ("depth", "give NAME=PATH"),
        ("depth={depth}", "(1x3x32x32, 1x40x48)"),  # a map of the photo's size, not --aligned
    ],
)
def test_a_binding_the_model_cannot_take_is_refused_in_one_line(rgbd, tmp_path, binding, words):
    rgb, depth, out = rgbd
    elsewhere = _depths(tmp_path / "elsewhere", keys=("x/9",))
    result = hookviz_run(rgb, "--input", binding.format(depth=depth, rgb=rgb, elsewhere=elsewhere), "--task", Segment.name,
                         "--resize", 32, model=RGBD, weights=None, out=out)  # fmt: skip
    assert result.exit_code == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.output
    assert not out.exists()


def test_the_kinds_settings_are_a_group_no_other_owner_names():
    from hookviz.options.declared import check_group, groups, settings_of
    from hookviz.samples import MultiOptions

    assert groups()[MultiOptions] == ("multi",)
    check_group(MultiOptions, "sample kind 'multi'")  # raises where --input or --aligned is another owner's too
    for setting in settings_of(MultiOptions):
        clash = dataclasses.make_dataclass("Clash", [(setting.name, int, dataclasses.field(default=0))], frozen=True)
        with pytest.raises(UsageError, match=f"setting '{setting.name}' is taken by multi"):
            check_group(clash, "method 'clash'")


@pytest.mark.parametrize("baselines", ["zero", "blur,meta=mean"])
def test_integrated_gradients_per_input_equal_captums_on_the_tuple_of_inputs(tmp_path, baselines):
    """Every input moves along the path together, as captum's IntegratedGradients on a tuple; the
    vector's attributions with the photo's sum to the score's rise (captum's convergence delta)."""
    from captum.attr import IntegratedGradients

    import hookviz
    from hookviz.methods.integrated_gradients import baseline
    from hookviz.options import InputOptions
    from tests.multi_models import build_meta

    photo = _photos(tmp_path / "rgb", keys=("001",)) / "001.png"
    model, meta = build_meta(), torch.tensor([0.5, -1.0, 2.0])
    result = hookviz.explain(
        model, {"image": photo, "meta": meta}, layers=["features.1"], cam="integrated-gradients", steps=16,
        ig_baseline=baselines, inputs=InputOptions(resize=32, crop=32),
    )  # fmt: skip
    found = result.pixel_maps["integrated-gradients"]
    image = result.image.tensors["image"][None]
    starts = (
        (torch.zeros_like(image), torch.zeros(1, 3))
        if baselines == "zero"
        else (baseline(image, "blur"), meta.mean().expand(1, 3))
    )
    reference, delta = IntegratedGradients(model).attribute(
        (image, meta[None]), baselines=starts, target=result.target.index, n_steps=16, method="gausslegendre",
        return_convergence_delta=True,
    )  # fmt: skip
    for ours, theirs in ((found.map, reference[0][0]), (found.inputs["meta"], reference[1][0])):
        theirs = theirs.detach().numpy()
        assert ours.shape == theirs.shape and np.abs(ours - theirs).max() / np.abs(theirs).max() < 1e-3
    assert found.figures["delta"] == pytest.approx(float(delta), abs=1e-4)
    total = float(reference[0].sum() + reference[1].sum())
    assert found.figures["attribution_sum"] == pytest.approx(total, rel=1e-4)


@pytest.mark.parametrize(
    ("baselines", "words"),
    [
        ("zero,nope=mean", "the model takes no input 'nope'; name one of image, meta"),
        ("zero,meta=blur", "input 'meta' is a vector, with no pixels to blur; choose zero or mean for it"),
    ],
)
def test_a_baseline_for_no_input_or_a_blurred_vector_is_refused_in_one_line(tmp_path, baselines, words):
    import hookviz
    from hookviz.errors import UsageError
    from hookviz.options import InputOptions
    from tests.multi_models import build_meta

    photo = _photos(tmp_path / "rgb", keys=("001",)) / "001.png"
    with pytest.raises(UsageError) as refused:
        hookviz.explain(
            build_meta(), {"image": photo, "meta": torch.tensor([0.5, -1.0, 2.0])}, layers=["features.1"],
            cam="integrated-gradients", steps=4, ig_baseline=baselines, inputs=InputOptions(resize=32, crop=32),
        )  # fmt: skip
    assert str(refused.value) == f"ig_baseline={baselines!r}: {words}"  # explain() names its keyword


def test_a_named_baseline_for_a_model_of_one_input_is_refused(tmp_path):
    import hookviz
    from hookviz.errors import UsageError

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    with pytest.raises(UsageError, match=r"^ig_baseline='zero,depth=blur': the model takes one input; give one baseline"):
        hookviz.explain(
            model.eval(), torch.rand(3, 16, 16), layers="0", cam="integrated-gradients", ig_baseline="zero,depth=blur"
        )


def test_guided_backprop_maps_each_input_as_captums_on_the_tuple(tmp_path):
    from captum.attr import GuidedBackprop

    import hookviz
    from hookviz.options import InputOptions
    from tests.multi_models import build_meta

    photo = _photos(tmp_path / "rgb", keys=("001",)) / "001.png"
    model, meta = build_meta(), torch.tensor([0.5, -1.0, 2.0])
    result = hookviz.explain(
        model,
        {"image": photo, "meta": meta},
        layers=["features.1"],
        cam="guided-backprop",
        inputs=InputOptions(resize=32, crop=32),
    )
    found = result.pixel_maps["guided-backprop"]
    image = result.image.tensors["image"][None]
    reference = GuidedBackprop(model).attribute((image, meta[None]), target=result.target.index)
    for ours, theirs in ((found.map, reference[0][0]), (found.inputs["meta"], reference[1][0])):
        theirs = theirs.detach().numpy()
        assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max() + 1e-7


@pytest.mark.slow  # three runs of hookviz in this process
def test_the_docs_worked_examples_run_as_written(tmp_path, monkeypatch):
    """docs/multi-input.md's three commands, each run as the page writes it, on data made here."""
    import shlex

    from .cli_helpers import hookviz_cli
    from .conftest import ROOT

    monkeypatch.chdir(tmp_path)
    _photos(tmp_path / "rgb"), _depths(tmp_path / "depth"), _photos(tmp_path / "photos")
    _photos(tmp_path / "left"), _photos(tmp_path / "right", seed=3)
    _meta(tmp_path / "meta.csv", {"001.png": (1, 2, 3), "002.png": (4, 5, 6), "003.png": (7, 8, 9)})
    page = (ROOT / "docs" / "multi-input.md").read_text(encoding="utf-8")
    commands = [line for line in page.splitlines() if line.startswith("hookviz run ")]
    assert len(commands) == 3
    for command in commands:
        words = shlex.split(command)[1:]
        result = hookviz_cli(*words)
        out = tmp_path / words[words.index("--out") + 1]
        assert result.exit_code == 0, (command, result.output)
        assert _statuses(out) == {"001.png": "done", "002.png": "done", "003.png": "done"}, command
    siamese = json.loads((tmp_path / "out-siamese" / "001" / "report.json").read_text())
    assert [layer["name"] for layer in siamese["layers"]] == ["encoder.1:0", "encoder.1:1"]
    assert (tmp_path / "out-meta" / "002" / "meta.attributions.png").is_file()
    assert (tmp_path / "out-rgbd" / "002" / "depth.pixel_maps.png").is_file()
    meta = json.loads((tmp_path / "out-meta" / "002" / "report.json").read_text())
    assert {"delta", "steps", "relative_error"} <= set(meta["pixel_maps"]["integrated-gradients"]["figures"])


def test_score_cam_rescores_each_row_with_its_own_samples_other_inputs(tmp_path):
    """Two samples, one batch: each channel-masked photo is scored with its own sample's metadata."""
    from dataclasses import replace

    import torch.nn.functional as F

    from hookviz.explaining.explainer import Explainer
    from hookviz.inputs.images import Preprocessing
    from hookviz.models.sources.base import LoadedModel
    from hookviz.options import LayerOptions, TargetOptions
    from hookviz.samples import MultiOptions
    from tests.multi_models import build_meta

    rgb = _photos(tmp_path / "rgb")
    table = _meta(tmp_path / "meta.csv", {"001.png": (1, 2, 3), "002.png": (-4, 5, 0.5), "003.png": (7, 8, 9)})
    model = build_meta()
    loaded = LoadedModel("meta", model, "none", None, Preprocessing(resize=32, size=32))
    explainer = Explainer.create(
        loaded, layers=LayerOptions(layers=("features.1",)), target=replace(TargetOptions(), cam="scorecam"),
        sample_options=(MultiOptions(input=(f"meta={table}",), sources=(str(rgb),)),),
    )  # fmt: skip
    kind = explainer.kind
    samples = [kind.prepare(kind.load(rgb / key, 10**8), explainer.preprocessing, 10**8) for key in ("a/001.png", "a/002.png")]
    results = explainer.explain_batch(samples)
    for sample, result in zip(samples, results):
        image, meta = sample.tensors["image"][None], sample.tensors["meta"][None]
        with torch.no_grad():
            activations = model.features(image)  # features.1 is the last of features
            target = int(model(image, meta).argmax())
        masks = F.interpolate(activations.transpose(0, 1), size=image.shape[2:], mode="bilinear", align_corners=False)
        low, high = masks.amin(dim=(1, 2, 3), keepdim=True), masks.amax(dim=(1, 2, 3), keepdim=True)
        masks = (masks - low) / (high - low + 1e-8)
        with torch.no_grad():
            scores = model(image * masks, meta.expand(len(masks), -1))[:, target]
        weights = torch.softmax(scores.double(), dim=0).float()
        expected = (weights[:, None, None] * activations[0]).sum(dim=0).clamp(min=0).numpy()
        assert_same_cam(np.asarray(result["features.1"].cam), expected)


@pytest.mark.parametrize("suffix", [".pt", ".safetensors", ".npy"])
def test_tensor_files_are_taken_as_they_are(tmp_path, suffix):
    from safetensors.torch import save_file

    from tests.multi_models import build_meta

    rgb, vectors = _photos(tmp_path / "rgb", keys=("001", "002")), tmp_path / "vectors"
    vectors.mkdir()
    for n, key in enumerate(("001", "002")):
        value = torch.tensor([1.5, -2.0, n], dtype=torch.float64)  # float64 becomes the model's float32
        if suffix == ".pt":
            torch.save(value, vectors / f"{key}.pt")
        elif suffix == ".safetensors":
            save_file({"meta": value}, str(vectors / f"{key}.safetensors"))
        else:
            np.save(vectors / f"{key}.npy", value.numpy())
    explainer = _explainer(build_meta(), f"meta={vectors}", sources=[rgb])
    sample = explainer.kind.prepare(explainer.kind.load(rgb / "002.png", 10**8), explainer.preprocessing, 10**8)
    assert sample.tensors["meta"].dtype == torch.float32 and sample.tensors["meta"].tolist() == [1.5, -2.0, 1.0]
    assert sample.inputs_record["meta"]["file"].endswith(f"vectors/002{suffix}")


def test_steps_auto_climbs_the_ladder_through_every_input_to_captums_delta_under_one_percent(tmp_path):
    """``--steps auto`` on a sample of several inputs: each rung's completeness error is captum's
    convergence delta on the tuple of inputs at that rung's steps; the first under 1% is kept."""
    from captum.attr import IntegratedGradients

    import hookviz
    from hookviz.methods.integrated_gradients import AUTO_LADDER, AUTO_TOLERANCE
    from hookviz.options import InputOptions
    from tests.multi_models import build_meta

    photo = _photos(tmp_path / "rgb", keys=("001",)) / "001.png"
    model, meta = build_meta(), torch.tensor([0.5, -1.0, 2.0])
    result = hookviz.explain(
        model, {"image": photo, "meta": meta}, layers=["features.1"], cam="integrated-gradients", steps="auto",
        inputs=InputOptions(resize=32, crop=32),
    )  # fmt: skip
    found = result.pixel_maps["integrated-gradients"].figures
    image, steps = result.image.tensors["image"][None], int(found["steps"])
    assert steps in AUTO_LADDER and found["steps_tried"] == sum(s for s in AUTO_LADDER if s <= steps)
    assert steps > AUTO_LADDER[0]  # this photo's path bends: the rungs below are checked too (16 steps, measured)
    assert found["relative_error"] < AUTO_TOLERANCE or steps == AUTO_LADDER[-1]
    assert found["delta"] == found["completeness_error"] and found["attribution_sum"] == found["map_sum"]

    def captum(n_steps: int) -> tuple[float, float]:  # captum's convergence delta and the score's rise
        _, delta = IntegratedGradients(model).attribute(
            (image, meta[None]), target=result.target.index, n_steps=n_steps, method="gausslegendre",
            return_convergence_delta=True,
        )  # fmt: skip
        with torch.no_grad():
            ends = model(torch.cat([image, torch.zeros_like(image)]), torch.stack([meta, torch.zeros(3)]))
        return float(delta), float(ends[0, result.target.index] - ends[1, result.target.index])

    delta, change = captum(steps)
    assert found["completeness_error"] == pytest.approx(delta, abs=1e-4) and found["score_change"] == pytest.approx(change)
    for fewer in AUTO_LADDER[: AUTO_LADDER.index(steps)]:  # every rung below missed by more than the tolerance
        assert abs(captum(fewer)[0]) > AUTO_TOLERANCE * abs(change)


@pytest.mark.slow  # hookviz run in this process: several seconds of CPU
def test_run_keeps_every_inputs_map_in_tensors_npz_and_its_statistics_and_auto_steps_in_report(tmp_path):
    """``--steps auto --save-tensors`` through ``hookviz run``: report.json (schema-valid) keeps the
    rung auto kept and its error, and each other input's map's statistics beside the main map's;
    tensors.npz keeps each map as ``input/<method>/<NAME>``, captum's on the tuple at those steps."""
    from captum.attr import IntegratedGradients

    from hookviz.methods.integrated_gradients import AUTO_LADDER, AUTO_TOLERANCE
    from tests.multi_models import build_meta

    rgb, out = _photos(tmp_path / "rgb", keys=("001", "002")), tmp_path / "out"
    table = _meta(tmp_path / "meta.csv", {"001.png": (1, 2, 3), "002.png": (4, -5, 6.5)})
    result = hookviz_run(
        rgb, "--input", f"meta={table}", "--cam", "integrated-gradients", "--steps", "auto", "--save-tensors",
        "--pictures", "none", "--resize", 32, model=META, weights=None, out=out, catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _validate_run_folder(out) == 3
    for key, row in (("001", (1, 2, 3)), ("002", (4, -5, 6.5))):
        report = json.loads((out / key / "report.json").read_text())
        found = report["pixel_maps"]["integrated-gradients"]
        figures, stats = found["figures"], found["inputs"]["meta"]
        assert figures["steps"] in AUTO_LADDER and (
            figures["relative_error"] < AUTO_TOLERANCE or figures["steps"] == AUTO_LADDER[-1]
        )
        assert {"steps_tried", "map_sum", "score_change", "completeness_error", "delta", "attribution_sum"} <= set(figures)
        arrays = np.load(out / key / "tensors.npz")
        image, meta = torch.from_numpy(arrays["input"]), torch.tensor([row], dtype=torch.float32)
        theirs = IntegratedGradients(build_meta()).attribute(
            (image, meta), target=report["target"]["index"], n_steps=int(figures["steps"]), method="gausslegendre"
        )
        for name, reference in (("input/integrated-gradients", theirs[0][0]), ("input/integrated-gradients/meta", theirs[1][0])):
            ours, reference = arrays[name], reference.detach().numpy()
            assert ours.shape == reference.shape and np.abs(ours - reference).max() / np.abs(reference).max() < 1e-3, name
        vector = arrays["input/integrated-gradients/meta"].astype(np.float64)
        assert stats["shape"] == [3] and stats["nonfinite"] == 0
        assert [stats[k] for k in ("min", "max", "mean", "std")] == pytest.approx(
            [vector.min(), vector.max(), vector.mean(), vector.std()], rel=1e-6
        )


def test_a_plug_in_input_method_attributes_every_input_through_the_public_protocol(tmp_path, registries_restored):
    """An input method of one's own on a model of two inputs: ``ctx.input_gradient.others()`` and
    ``.along()`` (``hookviz.methods.InputGradient``) give it each input's gradient, as captum's
    gradients of a tuple of inputs; its gradient x input maps equal those computed here."""
    import hookviz
    from hookviz.methods import MapFigures, register_method
    from hookviz.options import InputOptions
    from tests.multi_models import build_meta

    @register_method(
        "every-input-x-gradient", needs_gradients=False, needs_input=True, needs_input_gradients=True, resolution="input"
    )
    def every_input_x_gradient(ctx):
        """Each input times its gradient, the main one and the others alike."""
        others = ctx.input_gradient.others()
        rows = torch.arange(len(ctx.inputs))
        main, gradients, _ = ctx.input_gradient.along(ctx.inputs, others, rows)
        maps = tuple({name: (others[name][n] * gradients[name][n]).cpu().numpy() for name in others} for n in rows)
        return MapFigures(ctx.inputs.float() * main, tuple({} for _ in rows), maps)

    photo = _photos(tmp_path / "rgb", keys=("001",)) / "001.png"
    model, meta = build_meta(), torch.tensor([0.5, -1.0, 2.0])
    result = hookviz.explain(
        model, {"image": photo, "meta": meta}, layers=["features.1"], cam="every-input-x-gradient",
        inputs=InputOptions(resize=32, crop=32),
    )  # fmt: skip
    found = result.pixel_maps["every-input-x-gradient"]
    image = result.image.tensors["image"][None].clone().requires_grad_(True)
    vector = meta[None].clone().requires_grad_(True)
    score = model(image, vector)[0, result.target.index]
    image_grad, meta_grad = torch.autograd.grad(score, (image, vector))
    assert set(found.inputs) == {"meta"}
    np.testing.assert_allclose(found.map, (image * image_grad)[0].detach().numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(found.inputs["meta"], (vector * meta_grad)[0].detach().numpy(), rtol=1e-4, atol=1e-7)


def test_a_plug_in_input_method_that_maps_the_main_input_only_is_refused_in_one_line(tmp_path, registries_restored):
    """An input method of one's own that calls only ``ctx.input_gradient(batch)`` on a model of two
    inputs would say the vector does not matter: it is refused in one line naming the input it left out."""
    import hookviz
    from hookviz.errors import UsageError
    from hookviz.methods import register_method
    from hookviz.options import InputOptions
    from tests.multi_models import build_meta

    @register_method("main-x-gradient", needs_gradients=False, needs_input=True, needs_input_gradients=True, resolution="input")
    def main_x_gradient(ctx):
        """The main input times its gradient."""
        return ctx.inputs.float() * ctx.input_gradient(ctx.inputs)

    photo = _photos(tmp_path / "rgb", keys=("001",)) / "001.png"
    with pytest.raises(UsageError) as refused:
        hookviz.explain(
            build_meta(), {"image": photo, "meta": torch.tensor([0.5, -1.0, 2.0])}, layers=["features.1"],
            cam="main-x-gradient", inputs=InputOptions(resize=32, crop=32),
        )  # fmt: skip
    assert "main-x-gradient' mapped the main input only, but the model takes meta too" in str(refused.value)
    assert "\n" not in str(refused.value)
    torch.manual_seed(0)
    plain = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3)
    )
    one = hookviz.explain(plain, photo, layers=["0"], cam="main-x-gradient", inputs=InputOptions(resize=32, crop=32))
    assert one.pixel_maps["main-x-gradient"].map.shape == (3, 32, 32)  # one input: the main one is every input
