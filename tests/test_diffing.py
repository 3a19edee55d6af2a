"""Regression checks: a run compared with a baseline (``hookviz diff``, ``--baseline``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookviz.compare.diffing import compare, diff_runs
from hookviz.errors import ComparisonError, UsageError
from hookviz.options import CheckOptions, Tolerances
from hookviz.store.runfolder import open_run

from .cli_helpers import hookviz_cli
from .conftest import ROOT, SAMPLES, tiny_net
from .explorer_helpers import explorer_pictures, explorer_rows, explorer_samples

TINY = ["--model", "tests.conftest:tiny_net"]
CAT_PHOTO = SAMPLES / "cat.png"
#: Every kind of recorded layer of TinyNet, in the order the forward pass calls them.
LAYERS = ["--layer", "features.0", "--layer", "features.1", "--layer", "features.3", "--layer", "act", "--layer", "fc"]
BEFORE_THE_CHANGE = {"features.0", "features.1"}  # the tests change features.3
FROM_THE_CHANGE = {"features.3", "act:0", "act:1", "fc"}


def invoke(*args):
    return hookviz_cli(*args, catch_exceptions=False)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """TinyNet's weights, and a copy whose features.3 convolution is scaled by 1 + 1e-3."""
    folder = tmp_path_factory.mktemp("weights")
    model = tiny_net()
    torch.save(model.state_dict(), folder / "a.pth")
    with torch.no_grad():
        model.features[3].weight.mul_(1 + 1e-3)
    torch.save(model.state_dict(), folder / "b.pth")
    return {"a": folder / "a.pth", "b": folder / "b.pth"}


def _run(out: Path, weights: Path, *extra, images=(SAMPLES,)):
    result = invoke("run", *images, *TINY, "--weights", weights, *LAYERS, "--pictures", "none", "-q", "--out", out, *extra)
    return result


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, checkpoints) -> Path:
    out = tmp_path_factory.mktemp("runs") / "base"
    assert _run(out, checkpoints["a"]).exit_code == 0
    return out


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and a hash of its bytes: what 'nothing was modified' means."""
    return {
        str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _findings(document: dict) -> set[tuple]:
    return {(f["layer"], f["figure"].split(".")[0]) for f in document["drift"]["findings"]}


# ----------------------------------------------------------------------------- the cases


def test_a_run_compared_with_itself_has_zero_drift_and_exits_0(baseline, checkpoints, tmp_path):
    before = _tree(baseline)
    result = _run(tmp_path / "again", checkpoints["a"], "--baseline", baseline, "--fail-on", "drift")
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "again" / "diff.json").read_text())
    assert document["drift"] == {"checked": True, "passed": True, "findings": []}
    assert document["compared"]["images"] == 2 and not document["only_in_base"]["images"]
    for image in document["images"]:
        assert image["change"] == 0.0 and image["probability_change"] == 0.0 and not image["target_changed"]
        assert image["model_input"]["map"]["max_abs"] == 0.0 and image["logits"]["map"]["cosine"] == 1.0
        for layer in image["layers"]:
            for tensor in layer["tensors"].values():
                assert tensor["map"]["max_abs"] == 0.0 and tensor["stats"]["before"] == tensor["stats"]["after"]
            if layer["cam"] is not None:
                assert layer["cam"]["corr"] == 1.0 and layer["cam"]["peak_shift_pixels"] == 0.0
    run_json = json.loads((tmp_path / "again" / "run.json").read_text())
    assert run_json["checks"]["passed"] and run_json["checks"]["baseline"] == str(baseline)
    assert _tree(baseline) == before


@pytest.mark.parametrize("save_tensors", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["fingerprints", "tensors"])
def test_a_perturbed_conv_is_caught_at_that_layer_and_after_it_not_before(baseline, checkpoints, tmp_path, save_tensors):
    base = baseline
    extra = ("--save-tensors",) if save_tensors else ()
    if save_tensors:
        base = tmp_path / "base"
        assert _run(base, checkpoints["a"], *extra).exit_code == 0
    result = _run(tmp_path / "new", checkpoints["b"], *extra, "--baseline", base, "--fail-on", "drift")
    assert result.exit_code == 3, result.output
    document = json.loads((tmp_path / "new" / "diff.json").read_text())
    for image in document["images"]:
        flagged = {(f["layer"], f["figure"].split(".")[0]) for f in image["findings"]}
        assert {layer for layer, _ in flagged} == FROM_THE_CHANGE | {None}
        assert ("features.3", "output") in flagged and ("features.3", "input") not in flagged
        assert (None, "logits") in flagged and (None, "model_input") not in flagged
        assert {f["image"] for f in image["findings"]} == {image["image"]}
        source = "tensor" if save_tensors else "map"
        assert image["first_change"] == {"layer": "features.3", "figure": f"output.{source}"}
        assert any(f["figure"] == f"output.{source}" for f in image["findings"] if f["layer"] == "features.3")
        layers = {layer["name"]: layer for layer in image["layers"]}
        for name in BEFORE_THE_CHANGE:
            assert layers[name]["tensors"]["output"]["change"] == 0.0
        assert 4e-4 < layers["features.3"]["tensors"]["output"]["change"] < 2e-3
    # Each finding is one line on stderr naming image, layer and figure.
    assert "check drift failed: " in result.stderr and "features.3 [output." in result.stderr
    notes = json.loads((tmp_path / "new" / "run.json").read_text())["notes"]
    assert f"weights differ: {checkpoints['a']} -> {checkpoints['b']}" in notes


def test_a_weights_file_rewritten_in_place_is_said_to_differ(checkpoints, tmp_path):
    weights = tmp_path / "last.ckpt"
    shutil.copy(checkpoints["a"], weights)
    assert _run(tmp_path / "base", weights, images=(SAMPLES / "cat.png",)).exit_code == 0
    shutil.copy(checkpoints["b"], weights)  # another epoch, saved under the same name
    _run(tmp_path / "new", weights, "--baseline", tmp_path / "base", images=(SAMPLES / "cat.png",))
    notes = json.loads((tmp_path / "new" / "run.json").read_text())["notes"]
    assert any(note.startswith(f"weights differ: {weights} holds other bytes") for note in notes), notes
    assert json.loads((tmp_path / "new" / "diff.json").read_text())["base"]["weights_sha256"] is not None


def test_changed_preprocessing_is_caught_at_the_input(baseline, checkpoints, tmp_path):
    result = _run(tmp_path / "new", checkpoints["a"], "--mean", "0.5,0.456,0.406", "--baseline", baseline, "--fail-on", "drift")
    assert result.exit_code == 3
    document = json.loads((tmp_path / "new" / "diff.json").read_text())
    for image in document["images"]:
        flagged = {(f["layer"], f["figure"].split(".")[0]) for f in image["findings"]}
        assert (None, "model_input") in flagged and ("features.0", "input") in flagged
        assert image["first_change"]["layer"] is None and image["first_change"]["figure"].startswith("model_input.")
    assert any(note.startswith("preprocessing differs: mean [0.485") for note in document["notes"])


@pytest.mark.slow
def test_another_thread_count_stays_under_the_default_tolerances(tmp_path):
    """Fresh interpreters, torch on one thread and on two: summation orders differ, the
    figures stay far under the defaults."""

    def run(out: Path, threads: str):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "PYTHONPATH": str(ROOT)}
        command = [
            sys.executable,
            "-m",
            "hookviz",
            "run",
            str(SAMPLES),
            "--model",
            "efficientnet_lite0",
            "--layer",
            "_blocks.4",
            "--layer",
            "_blocks.10._depthwise_conv",
            "--layer",
            "_conv_head",
            "--pictures",
            "none",
            "-q",
            "--out",
            str(out),
        ]
        subprocess.run(command, check=True, env=env, cwd=tmp_path)

    run(tmp_path / "one", "1")
    run(tmp_path / "two", "2")
    diff = diff_runs(tmp_path / "one", tmp_path / "two", fail_on="drift", pictures=False)
    assert diff.findings == () and len(diff.images) == 2
    largest = max(image.change for image in diff.images)
    if largest == 0:
        # one and two threads summed in the same order on this machine: give the second run a
        # drift of the size other machines measure (2e-6), so the comparison still has to see it
        largest = _drifted_fingerprints(tmp_path / "two", 2e-6)
        diff = diff_runs(tmp_path / "one", tmp_path / "two", fail_on="drift", pictures=False)
        assert diff.findings == ()
        assert max(image.change for image in diff.images) == pytest.approx(largest, rel=0.05)
    assert 0 < largest < Tolerances().rtol / 5  # measured 2e-6 here: well under 5e-5


def _drifted_fingerprints(run: Path, relative: float) -> float:
    """Scales every fingerprint in ``run`` by ``1 + relative``; returns ``relative``."""
    for path in run.glob("*/fingerprint.npz"):
        with np.load(path) as arrays:
            scaled = {name: (arrays[name] * np.float32(1 + relative)).astype(arrays[name].dtype) for name in arrays.files}
        np.savez(path, **scaled)
    return relative


# ----------------------------------------------------------------------------- mismatches and bad input


def test_runs_of_different_layers_compare_what_matches_and_name_the_rest(baseline, checkpoints, tmp_path):
    other = tmp_path / "other"
    result = invoke(
        "run",
        SAMPLES,
        *TINY,
        "--weights",
        checkpoints["a"],
        "--layer",
        "features.3",
        "--layer",
        "pool",
        "--pictures",
        "none",
        "-q",
        "--out",
        other,
    )
    assert result.exit_code == 0
    shown = invoke("diff", baseline, other, "--pictures", "none", "--fail-on", "drift")
    assert shown.exit_code == 3  # a layer gone is a changed model
    document = json.loads((other / "diff.json").read_text())
    assert document["compared"]["layers"] == ["features.3"]
    assert document["only_in_base"]["layers"] == ["act:0", "act:1", "fc", "features.0", "features.1"]
    assert document["only_in_new"]["layers"] == ["pool"]
    assert {(f["layer"], f["figure"]) for f in document["drift"]["findings"]} == {
        (name, "layer") for name in ("features.0", "features.1", "act:0", "act:1", "fc", "pool")
    }
    lines = [line for line in shown.stderr.splitlines() if line.startswith("hookviz: note: layers recorded by")]
    assert len(lines) == 2 and "pool" in lines[1]


def test_another_model_and_images_in_one_run_only_are_named(baseline, checkpoints, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(SAMPLES / "cat.png", folder / "cat.png")
    shutil.copy(SAMPLES / "cat.png", folder / "dog.png")
    new = tmp_path / "new"
    result = invoke(
        "run",
        folder,
        "--model",
        "tests.conftest:chatty_net",
        "--weights",
        checkpoints["a"],
        *LAYERS,
        "--pictures",
        "none",
        "-q",
        "--out",
        new,
    )
    assert result.exit_code == 0
    diff = diff_runs(baseline, new, pictures=False)
    assert [image.output for image in diff.images] == ["cat"]
    assert diff.only_in_base == (str(SAMPLES / "coffee.png"),) and diff.only_in_new == (str(folder / "dog.png"),)
    assert "models differ: tests.conftest:tiny_net -> tests.conftest:chatty_net" in diff.notes
    # The same weights on the same photo: the same numbers; the photo the new run lost is drift.
    assert [(f.image, f.figure) for f in diff.findings] == [(str(SAMPLES / "coffee.png"), "image.missing")]


def test_a_baseline_without_fingerprints_is_compared_on_what_it_has(baseline, checkpoints, tmp_path):
    """A baseline written before fingerprints existed: statistics and top-5, with a note."""
    old = tmp_path / "old"
    shutil.copytree(baseline, old)
    for report_path in old.glob("*/report.json"):
        report = json.loads(report_path.read_text())
        del report["fingerprint"]
        report["files"].remove("fingerprint.npz")
        report_path.write_text(json.dumps(report))
        (report_path.parent / "fingerprint.npz").unlink()
    same = diff_runs(old, baseline, out=tmp_path / "same.json", fail_on="drift", pictures=False)
    assert same.findings == ()
    assert any("without a fingerprint" in note and "statistics and top-5 only" in note for note in same.notes)
    layer = same.images[0]["features.3"]
    assert layer["output"].map is None and layer.cam is None
    _run(tmp_path / "new", checkpoints["b"])
    changed = diff_runs(old, tmp_path / "new", pictures=False, fail_on="drift")
    assert {(f.layer, f.figure.split(".")[1]) for f in changed.findings if f.layer == "features.3"} == {("features.3", "stats")}
    assert not [f for f in changed.findings if f.layer in BEFORE_THE_CHANGE]


def test_a_baseline_from_a_newer_hookviz_is_compared_with_a_note(baseline, tmp_path):
    newer = tmp_path / "newer"
    shutil.copytree(baseline, newer)
    run_json = json.loads((newer / "run.json").read_text())
    run_json["hookviz"] = "99.0.0"
    (newer / "run.json").write_text(json.dumps(run_json))
    diff = diff_runs(newer, baseline, out=tmp_path / "diff.json", pictures=False)
    assert any("hookviz 99.0.0, newer than" in note for note in diff.notes) and diff.findings == ()


@pytest.mark.parametrize(
    "damage, named",
    [
        (lambda run: (run / "cat" / "report.json").unlink(), "cat/report.json: missing"),
        (lambda run: (run / "cat" / "report.json").write_text('{"layers": [tru'), "cat/report.json: truncated"),
        (lambda run: (run / "cat" / "fingerprint.npz").write_bytes(b"PK\x03\x04 half"), "cat/fingerprint.npz: damaged"),
        (lambda run: (run / "run.json").write_text("{"), "run.json: not readable JSON"),
        (lambda run: (run / "run.json").unlink(), "no run.json here"),
    ],
)
def test_a_broken_baseline_is_refused_in_one_line_naming_the_file(baseline, tmp_path, damage, named):
    broken = tmp_path / "broken"
    shutil.copytree(baseline, broken)
    damage(broken)
    result = invoke("diff", broken, baseline, "--out", tmp_path / "diff.json")
    assert result.exit_code == 2
    assert named in result.stderr and len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_bad_arguments_are_refused_before_any_work(baseline, checkpoints, tmp_path):
    missing = invoke("diff", tmp_path / "nowhere", baseline)
    assert missing.exit_code == 2 and "BASE " in missing.stderr and "no such folder" in missing.stderr
    inside = invoke("diff", baseline, baseline, "--out", baseline / "diff.json")
    assert inside.exit_code == 2 and "same folder" in inside.stderr
    other = tmp_path / "other"
    shutil.copytree(baseline, other)
    into_base = invoke("diff", baseline, other, "--out", baseline / "x.json")
    assert into_base.exit_code == 2 and "never writes into" in into_base.stderr
    assert invoke("diff", baseline, other, "--fail-on", "dead").exit_code == 2
    assert invoke("diff", baseline, other, "--rtol", "-1").exit_code == 2
    overlap = _run(baseline / "sub", checkpoints["a"], "--baseline", baseline)
    assert overlap.exit_code == 2 and "overlaps" in overlap.stderr
    sharded = _run(tmp_path / "s", checkpoints["a"], "--baseline", baseline, "--shard", "1/2")
    assert sharded.exit_code == 2 and "hookviz diff" in sharded.stderr
    no_base = _run(tmp_path / "n", checkpoints["a"], "--baseline", tmp_path / "nowhere")
    assert no_base.exit_code == 2 and "--baseline" in no_base.stderr and not (tmp_path / "n").exists()
    with pytest.raises(UsageError, match="--baseline BASE"):
        from hookviz.errors import command_line_spelling

        with command_line_spelling():
            CheckOptions(fail_on="drift")
    with pytest.raises(ComparisonError, match=r"^base='.*nowhere': no such folder"):
        diff_runs(tmp_path / "nowhere", baseline)
    with pytest.raises(UsageError, match="min_cam_corr=2"):
        Tolerances(min_cam_corr=2)


# ----------------------------------------------------------------------------- pictures and gallery


@pytest.mark.slow
def test_diff_pictures_go_into_new_and_the_gallery_shows_the_most_changed_first(baseline, checkpoints, tmp_path):
    """Only coffee changes (its photo is darker); it comes first in diff.json and the gallery."""
    photos = tmp_path / "photos"
    photos.mkdir()
    shutil.copy(SAMPLES / "cat.png", photos / "cat.png")
    with Image.open(SAMPLES / "coffee.png") as image:
        Image.fromarray((np.asarray(image.convert("RGB")) * 0.9).astype(np.uint8)).save(photos / "coffee.png")
    new = tmp_path / "new"
    result = invoke(
        "run",
        photos,
        *TINY,
        "--weights",
        checkpoints["a"],
        "--layer",
        "features.3",
        "--layer",
        "fc",
        "--pictures",
        "cam",
        "-q",
        "--out",
        new,
        "--baseline",
        baseline,
    )
    assert result.exit_code == 0, result.output  # drift not checked: reported, not failed
    document = json.loads((new / "diff.json").read_text())
    assert [image["output"] for image in document["images"]] == ["coffee", "cat"]
    assert document["images"][1]["change"] == 0.0 and document["images"][0]["change"] > 1e-3
    assert not document["drift"]["checked"] and not document["drift"]["passed"]
    for image in document["images"]:
        pictures = [layer["picture"] for layer in image["layers"]]
        assert pictures == ["features.3.diff.png", "fc.diff.png"]
        assert all((new / image["output"] / name).stat().st_size > 10_000 for name in pictures)
    assert not list(baseline.rglob("*.diff.png"))
    page = (new / "index.html").read_text()
    assert "Compared with the baseline" in page and "sorted most changed first" in page
    assert [row["name"] for row in explorer_rows(new)] == ["coffee", "cat"]
    change = explorer_samples(new)["coffee"]["change"]
    assert (
        "coffee/features.3.diff.png" in explorer_pictures(new)
        and "first changed at: the model's input (model_input.map)" in change["lines"]
    )


def test_a_rerun_without_baseline_removes_the_diff_pictures_the_report_lists(baseline, checkpoints, tmp_path):
    """The diff pictures were not in report.json's files, so a later save in the folder kept them."""
    new = tmp_path / "new"
    args = ["run", SAMPLES / "cat.png", *TINY, "--weights", checkpoints["b"], "--layer", "features.3", "-q", "--out", new]
    result = invoke(*args, "--pictures", "cam", "--baseline", baseline)
    assert result.exit_code == 0, result.output
    drawn = sorted(p.name for p in (new / "cat").glob("*.diff.png"))
    assert drawn == ["features.3.diff.png"]
    assert set(drawn) <= set(json.loads((new / "cat" / "report.json").read_text())["files"])
    assert invoke(*args, "--pictures", "cam").exit_code == 0
    assert not list((new / "cat").glob("*.diff.png"))
    assert (new / "cat" / "features.3.cam.png").exists()


def test_hookviz_diff_lists_its_pictures_in_the_new_runs_reports(baseline, checkpoints, tmp_path):
    new = tmp_path / "new"
    assert _run(new, checkpoints["b"], images=(SAMPLES / "cat.png",)).exit_code == 0
    assert invoke("diff", baseline, new).exit_code == 0
    files = json.loads((new / "cat" / "report.json").read_text())["files"]
    assert (
        sorted(name for name in files if name.endswith(".diff.png"))
        == sorted(p.name for p in (new / "cat").glob("*.diff.png"))
        != []
    )


@pytest.mark.slow
def test_hookviz_diff_redraws_the_new_gallery_and_a_stale_diff_is_not_shown(baseline, checkpoints, tmp_path):
    new = tmp_path / "new"
    _run(new, checkpoints["b"])
    assert "Compared with the baseline" not in (new / "index.html").read_text()
    before = _tree(baseline)
    assert invoke("diff", baseline, new).exit_code == 0
    assert _tree(baseline) == before
    page = (new / "index.html").read_text()
    assert "Compared with the baseline" in page and "cat/features.3.diff.png" in explorer_pictures(new)
    _run(new, checkpoints["b"])  # a rerun: the diff.json left there compares the earlier run
    assert "Compared with the baseline" not in (new / "index.html").read_text()


# ----------------------------------------------------------------------------- the measures


def test_compare_arrays_figures():
    from hookviz.compare.measures import compare_arrays

    same = compare_arrays(np.ones((3, 3)), np.ones((3, 3)))
    assert (same.max_abs, same.max_rel, same.cosine, same.scale) == (0.0, 0.0, 1.0, 1.0)
    moved = compare_arrays(np.array([2.0, -4.0]), np.array([2.0, -3.0]))
    assert moved.max_abs == 1.0 and moved.max_rel == 0.25 and moved.passes(Tolerances(rtol=0.25, atol=0))
    assert not moved.passes(Tolerances(rtol=0.2, atol=0.0))
    zeros = compare_arrays(np.zeros(4), np.zeros(4))
    assert (zeros.max_rel, zeros.cosine) == (0.0, 1.0)
    woke = compare_arrays(np.zeros(4), np.array([0, 0, 1e-3, 0]))
    assert woke.max_rel == float("inf") and woke.cosine == 0.0 and not woke.passes(Tolerances())
    holes = compare_arrays(np.array([1.0, np.nan]), np.array([1.0, np.nan]))
    assert holes.max_abs == 0.0  # NaN where the baseline has NaN is no change
    new_hole = compare_arrays(np.array([1.0, 2.0]), np.array([1.0, np.nan]))
    assert new_hole.max_abs == float("inf") and not new_hole.passes(Tolerances())


def test_cam_correlation_is_defined_for_flat_maps_and_peak_shift_is_in_input_pixels():
    from hookviz.compare.measures import cam_correlation, peak_shift

    peak = np.zeros((7, 7))
    peak[1, 2] = 1.0
    moved = np.zeros((7, 7))
    moved[4, 6] = 1.0
    assert cam_correlation(peak, peak * 3) == pytest.approx(1.0)
    assert cam_correlation(np.zeros((7, 7)), np.zeros((7, 7))) == 1.0
    assert cam_correlation(np.zeros((7, 7)), peak) == 0.0
    assert cam_correlation(np.full((7, 7), 0.5), np.full((7, 7), 0.7)) == 0.0
    assert cam_correlation(peak, moved) < 0
    assert np.isnan(cam_correlation(peak, np.full((7, 7), np.nan)))
    assert peak_shift(peak, moved, (224, 224), (224, 224)) == pytest.approx(32 * np.hypot(3, 4))
    assert peak_shift(peak, np.zeros((7, 7)), (224, 224), (224, 224)) is None


def test_ranking_puts_a_changed_target_first():
    from hookviz.compare.diffing import _rank
    from hookviz.compare.measures import ImageDiff, TensorDiff

    def image(name, change, target):
        tensor = TensorDiff(
            "logits",
            True,
            map=None,
            before={"min": -1.0, "max": 1.0, "mean": 0.0, "std": 1.0, "nonfinite": 0},
            after={"min": -1.0, "max": 1.0, "mean": change, "std": 1.0, "nonfinite": 0},
        )
        return ImageDiff(name, name, ({"index": 1}, {"index": target}), ((), ()), 0.0, tensor, tensor, ())

    ranked = sorted([image("a", 0.1, 1), image("b", 0.0, 2), image("c", 0.3, 1)], key=_rank)
    assert [i.output for i in ranked] == ["b", "c", "a"]


def test_the_fingerprint_is_a_few_kb_per_layer_and_read_back_as_written(baseline):
    from hookviz.store.fingerprints import read_fingerprint

    report = json.loads((baseline / "cat" / "report.json").read_text())
    assert report["files"][-1] == "fingerprint.npz" and report["fingerprint"]["format"] == 1
    size = (baseline / "cat" / "fingerprint.npz").stat().st_size
    assert size < 8_000 * len(report["layers"])  # ~7 KB per layer at 112x112 and 224x224, less at 7x7
    kept = read_fingerprint(baseline / "cat" / "fingerprint.npz", [layer["name"] for layer in report["layers"]])
    assert kept.logits.shape == (5,) and kept.model_input.map.shape == (16, 16) and kept.model_input.channels.shape == (3,)
    conv = kept.layers["features.3"]
    assert conv.tensors["output"].map.shape == (16, 16) and conv.tensors["output"].channels.shape == (6,)
    assert conv.cam.shape == (28, 28)  # the 112x112 CAM as area means of 4x4 blocks
    assert kept.layers["fc"].tensors["output"].map.shape == (5,) and kept.layers["fc"].tensors["output"].channels is None


def test_area_mean_keeps_block_means_and_a_nan_where_it_was():
    from hookviz.store.fingerprints import area_mean

    values = np.arange(56 * 56, dtype=np.float64).reshape(56, 56)
    np.testing.assert_allclose(area_mean(values, 16), values.reshape(14, 4, 14, 4).mean(axis=(1, 3)), rtol=1e-6)
    values[0, 0] = np.nan
    pooled = area_mean(values, 16)
    assert np.isnan(pooled[0, 0]) and np.isfinite(pooled).sum() == 14 * 14 - 1
    assert area_mean(np.ones((7, 7)), 16).shape == (7, 7) and area_mean(np.ones(1000), 256).shape == (250,)


def test_compare_reads_runs_in_python_too(baseline, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(baseline, copy)
    diff = compare(open_run(baseline, "base"), open_run(copy, "new"), Tolerances(), checked=True)
    assert diff.findings == () and diff["cat"]["features.3"]["output"].map.max_abs == 0.0
    assert diff.to_json()["drift"]["passed"] is True


def test_an_explanation_does_not_draw_a_diff(tmp_path):
    from hookviz import explain

    result = explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["features.3"])
    with pytest.raises(UsageError, match="kind='diff': drawn from two runs compared"):
        result.figure("features.3", "diff")


def test_statistics_decide_where_nothing_else_was_kept_and_gradients_never_drift():
    from hookviz.compare.measures import TensorDiff

    stats = {"min": -1.0, "max": 2.0, "mean": 0.5, "std": 0.3, "nonfinite": 0, "zero_fraction": 0.1}
    shapes = ([1, 4, 7, 7], [1, 4, 7, 7])

    def drift(after, name="output", before=stats):
        return TensorDiff(name, name in ("input", "output"), shapes, before, after).drift(Tolerances())

    assert drift(dict(stats, zero_fraction=0.2)) is None  # a ReLU's zeros move with float noise
    assert drift(dict(stats, mean=0.5 + 5e-5 * 2)) is None  # within rtol x max |before|
    assert drift(dict(stats, mean=0.5 + 1e-3))[0] == "stats.mean"
    assert drift(dict(stats, nonfinite=3)) == ("stats.nonfinite", "NaN/Inf values: 0 -> 3")
    assert drift(dict(stats, mean=7.0), name="grad_output") is None
    assert drift(dict(stats), before=dict(stats, mean="n/a"))[0] == "stats.mean"  # odd, not fatal
    moved = TensorDiff("output", True, ([1, 4, 7, 7], [1, 4, 8, 8]), stats, stats).drift(Tolerances())
    assert moved == ("shape", "shape 1x4x7x7 -> 1x4x8x8")


def test_nothing_is_written_into_the_baseline_and_a_foreign_fingerprint_is_refused(baseline, checkpoints, tmp_path):
    result = _run(tmp_path / "new", checkpoints["a"], "--baseline", baseline, "--tensorboard", baseline / "logs")
    assert result.exit_code == 2 and "is inside --baseline" in result.stderr
    assert not (baseline / "logs").exists()
    foreign = tmp_path / "foreign"
    shutil.copytree(baseline, foreign)
    np.savez(foreign / "cat" / "fingerprint.npz", foo=np.zeros(3, np.float32))
    result = invoke("diff", foreign, baseline, "--fail-on", "drift")
    assert result.exit_code == 2
    assert "fingerprint.npz" in result.stderr and "holds no fingerprint of a hookviz run" in result.stderr


def test_runs_against_other_references_say_so(tmp_path):
    # before: only "CAM correlation ... < 0.9" and a logits change, as if the model had drifted
    def run(reference, out):
        result = invoke(
            "run", CAT_PHOTO, *TINY, "--weights", "none", "--target-image", reference, "--pictures", "none",
            "--crop", "64", "--resize", "64", "-q", "--out", out,
        )  # fmt: skip
        assert result.exit_code == 0, result.output

    run(SAMPLES / "coffee.png", tmp_path / "a")
    run(SAMPLES / "cat.png", tmp_path / "b")
    compared = hookviz_cli("diff", tmp_path / "a", tmp_path / "b")
    said = f"hookviz: note: references differ (--target-image): {SAMPLES / 'coffee.png'} -> {SAMPLES / 'cat.png'}"
    assert said in compared.stderr.splitlines(), compared.output


def test_runs_with_other_prompts_say_so():
    from hookviz.compare.notes import target_notes
    from hookviz.store.report_records import Asked

    before, after = Asked(prompts=("a cat", "a dog")), Asked(prompts=("a cat", "a fox"))
    assert target_notes(before, after) == ["prompts differ: a cat, a dog -> a cat, a fox"]
    assert target_notes(before, before) == [] and target_notes(Asked(prompts=None), after) == []  # an old report: unknown


@pytest.mark.slow  # three runs and a diff: 5.5 s here
def test_runs_with_another_cam_method_say_so(tmp_path, checkpoints):
    """Two runs of one model with --cam gradcam and --cam scorecam: their maps differ by the
    method asked for, which the CAM correlation finding alone reads as model drift."""
    cat = (SAMPLES / "cat.png",)
    for name, cam in (("a", "gradcam"), ("a2", "gradcam"), ("b", "scorecam,gradcam")):
        assert _run(tmp_path / name, checkpoints["a"], "--cam", cam, images=cat).exit_code == 0
    compared = invoke("diff", tmp_path / "a", tmp_path / "b")
    assert compared.exit_code == 0, compared.output
    said = "hookviz: note: explained with other options: --cam gradcam -> scorecam,gradcam (maps differ by that choice, not by drift)"
    assert said in compared.stderr.splitlines(), compared.output
    assert "other options" not in invoke("diff", tmp_path / "a", tmp_path / "a2").output


# ----------------------------------------------------------------------------- NaN and Inf


def inf_net() -> torch.nn.Module:
    """Factory for ``--model tests.test_diffing:inf_net``: features.3's first three channels are +inf."""
    model = tiny_net()
    with torch.no_grad():
        model.features[3].bias[:3] = float("inf")
    return model


def _strict_json(path: Path) -> dict:
    def refuse(constant):
        raise AssertionError(f"{path} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_report_holding_nan_is_compared_and_its_nan_written_as_null(tmp_path):
    """An older or foreign writer's report may hold NaN (Python's json reads it): diff.json must stay JSON."""
    runs = [tmp_path / "base", tmp_path / "new"]
    for out in runs:
        assert invoke("run", CAT_PHOTO, *TINY, "--layer", "features.3", "--pictures", "none", "-q", "--out", out).exit_code == 0
    report = runs[1] / "cat" / "report.json"
    document = json.loads(report.read_text())
    document["layers"][0]["stats"]["output"].update(mean=float("nan"), max=float("inf"))
    document["target"]["score"] = float("nan")
    report.write_text(json.dumps(document))  # allow_nan: as such a writer did
    result = invoke("diff", *runs, "--pictures", "none")
    assert result.exit_code == 0, result.output
    written = _strict_json(runs[1] / "diff.json")
    stats = written["images"][0]["layers"][0]["tensors"]["output"]["stats"]["after"]
    assert stats["mean"] is None and stats["max"] is None and stats["min"] is not None


def test_maps_holding_nan_and_inf_are_compared_in_silence_but_for_one_note(tmp_path):
    """Inf survives a fingerprint of a small map: drawing the difference took inf - inf, and numpy warned."""
    import warnings

    runs = [tmp_path / "base", tmp_path / "new"]
    model = ["--model", "tests.test_diffing:inf_net", "--resize", "32", "--crop", "32", "--layer", "features.3"]
    for out in runs:
        assert invoke("run", CAT_PHOTO, *model, "--pictures", "none", "-q", "--out", out).exit_code == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning printed to the user fails the command
        result = hookviz_cli("diff", *map(str, runs))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("hookviz: note:")]
    assert notes == [
        f"hookviz: note: features.3: the output map and the CAM hold NaN/Inf values in both runs ({CAT_PHOTO}): "
        "compared where both are finite, and on where the NaN/Inf lie; figures that are not finite are null in diff.json"
    ]
    written = _strict_json(runs[1] / "diff.json")
    assert written["drift"]["findings"] == [] and (runs[1] / "cat" / "features.3.diff.png").is_file()


def test_nan_and_inf_in_the_same_places_compare_equal_only_when_they_are_the_same():
    from hookviz.compare.measures import compare_arrays

    same = compare_arrays([np.inf, np.nan, 1.0], [np.inf, np.nan, 1.0])
    assert same.max_abs == 0.0 and same.cosine == 1.0
    for other in ([-np.inf, np.nan, 1.0], [np.nan, np.inf, 1.0]):
        assert compare_arrays([np.inf, np.nan, 1.0], other).max_abs == np.inf


@pytest.mark.parametrize("damage", ["other bytes", "truncated", "inside"])
def test_a_damaged_fingerprint_is_called_damaged_and_its_advice_redoes_it(tmp_path, damage):
    """It was described as "pickled (object) data", and --skip-existing kept it."""
    runs = [tmp_path / "base", tmp_path / "new"]
    args = [CAT_PHOTO, *TINY, "--layer", "features.3", "--pictures", "none", "-q"]
    for out in runs:
        assert invoke("run", *args, "--out", out).exit_code == 0
    fingerprint = runs[1] / "cat" / "fingerprint.npz"
    data = bytearray(fingerprint.read_bytes())
    if damage == "inside":  # whole at both ends: only reading it tells
        data[60:-200] = bytes(b ^ 0x55 for b in data[60:-200])
    fingerprint.write_bytes(
        b"not an archive at all" if damage == "other bytes" else data[: len(data) // 2] if damage == "truncated" else data
    )
    result = invoke("diff", *runs, "--pictures", "none")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"hookviz: error: {fingerprint}: damaged, cannot be read (")
    if damage == "inside":
        assert result.stderr.endswith(f"; remove {runs[1] / 'cat'}, then rerun the run that wrote it with --skip-existing\n")
        shutil.rmtree(runs[1] / "cat")
    else:
        assert result.stderr.endswith(
            "(not a whole .npz archive: truncated, or other bytes); rerun the run that wrote it with --skip-existing, "
            "which redoes the images whose files are missing or damaged\n"
        )
    resumed = hookviz_cli("run", *map(str, args), "--out", runs[1], "--skip-existing", "--json")
    assert json.loads(resumed.stdout)["counts"]["done"] == 1  # redone, not skipped
    assert invoke("diff", *runs, "--pictures", "none").exit_code == 0


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_diff_refuses_a_run_folder_a_run_is_writing_into(tmp_path, baseline, checkpoints):
    """It compared the previous run.json of a folder being written, and wrote diff.json and
    pictures there that went stale once the run ended."""
    from hookviz.store.outfolder import FolderLock

    new = tmp_path / "new"
    assert _run(new, checkpoints["b"]).exit_code == 0
    writing = FolderLock(new)
    assert writing.acquire(create=False)  # as the run that writes there holds it
    try:
        result = invoke("diff", baseline, new)
    finally:
        writing.release()
    assert result.exit_code == 2 and not (new / "diff.json").exists(), result.output
    assert result.stderr.strip().splitlines() == [
        f"hookviz: error: NEW {new}: a hookviz run is writing into it now; compare it once that run has ended"
    ]
    assert invoke("diff", baseline, new).exit_code == 0  # once it ended
    assert invoke("diff", new, new).exit_code == 2  # still said to be the same folder, not a run at work
