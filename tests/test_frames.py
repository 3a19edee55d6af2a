"""A sample kind whose sample is a folder, proved from outside hookviz (issue 27): the
``frames`` plug-in (``tests.frames_plugin``) takes a folder of frames as one clip, declares
``--clip-frames``, and a Conv3d classifier over it runs end to end through ``hookviz run``.
The run's samples come from the model's kind; the kind's option is a flag, an ``explain()``
keyword, kept in report.json's ``asked`` and refused for a model of another kind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookviz.errors import UsageError
from hookviz.options import InputOptions, LayerOptions, ModelOptions, RunOptions
from hookviz.runs.request import RunRequest
from hookviz.store.report_records import read_report

from .conftest import ROOT, SAMPLES, tiny_net
from .explorer_helpers import explorer_text
from .test_records import _validate_run_folder

SIDE = 32


@pytest.fixture
def plugin(registries_restored):
    """``tests.frames_plugin``, its kind registered for this test alone: a sample kind other than
    the photo, registered for the whole session, would change how other tests' runs find photos."""
    from hookviz.samples import SAMPLE_KINDS

    from . import frames_plugin

    if "frames" not in SAMPLE_KINDS:  # imported by an earlier test, whose registries_restored took it away
        SAMPLE_KINDS.add("frames", frames_plugin.Frames())
    return frames_plugin


def _clips(folder: Path, frames: int = 6) -> Path:
    """Two clips, ``walk`` and ``jump``, of a square moving over ``frames`` frames, and a
    hidden folder that is no clip."""
    for name, colour in (("walk", (250, 200, 50)), ("jump", (50, 200, 250))):
        clip = folder / name
        clip.mkdir(parents=True)
        for t in range(frames):
            pixels = np.full((40, 48, 3), 30, np.uint8)
            pixels[5 + 4 * t : 15 + 4 * t, 10 + 3 * t : 22 + 3 * t] = colour
            Image.fromarray(pixels).save(clip / f"{t:03d}.png")
    (folder / ".cache").mkdir()
    Image.new("RGB", (8, 8)).save(folder / ".cache" / "000.png")
    return folder


def test_a_folder_of_frames_is_one_sample_and_a_folder_of_clips_is_each(tmp_path, plugin):
    clips = _clips(tmp_path / "clips")
    kind, evenly = plugin.Frames(), plugin.evenly
    assert kind.find([str(clips)]) == [clips / "jump", clips / "walk"]
    assert kind.find([str(clips / "walk"), str(clips / "walk")]) == [clips / "walk"]
    assert kind.files(clips / "walk") == [clips / "walk" / f"{t:03d}.png" for t in range(6)]
    assert evenly(6, 4) == [0, 2, 3, 5] and evenly(6, 1) == [0]
    with pytest.raises(UsageError) as caught:
        kind.find([str(SAMPLES)])  # photos, but no folder of frames
    message = str(caught.value)
    assert "\n" not in message and "names no sample of kind 'frames'" in message and str(SAMPLES) in message
    with pytest.raises(UsageError, match="choose another"):
        kind.find([str(clips)], exclude=[clips])


def test_the_run_finds_the_kinds_samples_and_shards_them(tmp_path, plugin):
    """The photos found while torch imports become the clips once the model's kind is known; a shard takes its part of those."""
    clips = _clips(tmp_path / "clips")
    frames = sorted(clips.glob("*/*.png"))
    asked = RunRequest(
        tuple(frames), ModelOptions("x"), options=RunOptions(out=tmp_path / "out", shard=(2, 2)), sources=(str(clips),)
    )
    found = asked.found_by(plugin.Frames(), [])
    assert found.images == (clips / "jump", clips / "walk") and found.selected == [clips / "walk"]
    assert RunRequest(tuple(frames), ModelOptions("x")).found_by(plugin.Frames(), []).images == tuple(
        frames
    )  # no sources: as given


def _explainer(plugin, frames: int, layers=("features.3",)):
    from hookviz.explaining.explainer import Explainer
    from hookviz.models.loading import load_model

    loaded = load_model(ModelOptions("tests.frames_plugin:clip_net"))
    inputs = InputOptions(resize=SIDE, crop=SIDE)
    return Explainer.create(
        loaded, layers=LayerOptions(layers=layers), inputs=inputs, sample_options=(plugin.ClipOptions(frames),)
    )


def test_the_clips_gradcam_is_torch_cams_3d_gradcam(tmp_path, plugin):
    """Independent check: hookviz's Grad-CAM at the Conv3d over the clip equals torch-cam's."""
    from torchcam.methods import GradCAM

    clips = _clips(tmp_path / "clips")
    explainer = _explainer(plugin, 5)
    sample = explainer.prepare(clips / "walk")
    assert tuple(sample.tensor.shape) == (3, 5, SIDE, SIDE) and sample.main == "clip"
    assert sample.shown.ndim == 3 and sample.shown.shape[2] == 3
    ours = np.asarray(explainer.explain_batch([sample])[0]["features.3"].cam, dtype=np.float64)
    model = explainer.model.module.eval()
    with GradCAM(model, target_layer="features.3") as extractor:
        scores = model(sample.tensor[None])
        theirs = extractor(class_idx=int(scores.argmax()), scores=scores)[0][0].detach().double().numpy()
    assert ours.shape == theirs.shape == (5, SIDE // 2, SIDE // 2)
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] >= 0.999


def test_the_kinds_option_is_an_explain_keyword_and_refused_for_another_kind(tmp_path, plugin):
    import hookviz
    from hookviz.explaining.explainer import Explainer
    from hookviz.inputs.images import Preprocessing
    from hookviz.models.sources.base import LoadedModel

    clips = _clips(tmp_path / "clips")
    result = hookviz.explain(
        "tests.frames_plugin:clip_net",
        clips / "jump",
        layers="features.3",
        clip_frames=3,
        inputs=InputOptions(resize=SIDE, crop=SIDE),
    )
    assert result["features.3"].shapes["input"][2] == 3
    with pytest.raises(UsageError) as caught:
        hookviz.explain(tiny_net(), SAMPLES / "cat.png", clip_frames=3)
    message = str(caught.value)
    assert "\n" not in message and "clip_frames" in message and "frames" in message and "photo" in message
    with pytest.raises(UsageError, match="clip_frames"):
        hookviz.explain("tests.frames_plugin:clip_net", clips / "jump", clip_frames=0)
    loaded = LoadedModel("tiny", tiny_net(), "none", None, Preprocessing(resize=32, size=32))
    with pytest.raises(UsageError, match="sample kind"):
        Explainer.create(loaded, sample_options=("four",))
    assert Explainer.create(loaded).sample_settings is None and "sample" not in Explainer.create(loaded).asked


def test_the_kinds_option_is_a_flag_in_the_images_panel(plugin):
    from hookviz.options.declared import owners
    from hookviz.run_arguments import declared_parameters
    from hookviz.samples import VideoOptions
    from hookviz.samples.multi_bindings import MultiOptions

    found = [(o.name, o.group, o.panel) for o in owners("sample kind")]
    built_in = {("video", VideoOptions, "Images"), ("multi", MultiOptions, "Images")}
    assert set(found[:2]) == built_in and found[2:] == [("frames", plugin.ClipOptions, "Images")]  # the built-in kinds first
    parameter = next(p for p in declared_parameters(set()) if p.name == "clip_frames")
    declared = parameter.annotation.__metadata__[0]
    assert declared.default == "--clip-frames" and declared.rich_help_panel == "Images" and parameter.default == 4


def _run(folder, out, *extra):
    command = [sys.executable, "-m", "hookviz", "run", str(folder), "--model", "tests.frames_plugin:clip_net"]
    command += ["--resize", str(SIDE), "--crop", str(SIDE), "--layer", "features.3", "--out", str(out), *extra]
    env = {**os.environ, "HOOKVIZ_PLUGINS": "tests.frames_plugin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow  # four runs of a fresh interpreter: about 60 s of CPU, and a comparison with the first
def test_a_plugin_clip_kind_runs_end_to_end(tmp_path):
    clips, out = _clips(tmp_path / "clips"), tmp_path / "out"
    first = _run(clips, out, "--clip-frames", "4", "--faithfulness")
    assert _validate_run_folder(out) == 3  # two reports and the run file, each valid against its schema
    assert "walk: target" in first.stdout and "2 of 2 clips done" in first.stderr
    for name in ("walk", "jump"):
        report = json.loads((out / name / "report.json").read_text())
        assert report["sample"].endswith(name) and report["asked"]["target"]["sample"] == {"clip_frames": 4}
        layer = report["layers"][0]
        assert report["preprocessing"]["input_size"] == [4, SIDE, SIDE] and layer["shapes"]["output"] == [1, 8, 4, 16, 16]
        curves = layer["trust"]["faithfulness"]["deletion_insertion"]
        assert 0 < curves["deletion_auc"] <= 1 and 0 < curves["insertion_auc"] <= 1 and len(curves["deletion"]) > 2
        for picture in ("summary", "channels", "cam", "faithfulness"):
            with Image.open(out / name / layer["pictures"][picture]) as drawn:
                assert drawn.size[0] > 200 and len(np.unique(np.asarray(drawn.convert("L")))) > 10, picture
    run_json = json.loads((out / "run.json").read_text())
    assert sorted(entry["image"].rsplit("/", 1)[-1] for entry in run_json["images"]) == ["jump", "walk"]
    gallery = explorer_text(out)
    assert "walk" in gallery and "jump" in gallery and "000.png" not in gallery
    assert read_report(out / "walk" / "report.json").input_hw == (4, SIDE, SIDE)  # preprocessing's input_size
    shutil.copytree(out, tmp_path / "base")
    again = _run(clips, out, "--clip-frames", "4", "--faithfulness", "--skip-existing")
    assert "2 skipped (done by an earlier run)" in again.stderr and "target" not in again.stdout, again.stderr
    frame = clips / "walk" / "003.png"  # one frame changes: that clip alone is redone
    Image.fromarray(np.asarray(Image.open(frame))[::-1].copy()).save(frame)
    third = _run(clips, out, "--clip-frames", "4", "--faithfulness", "--skip-existing", "--baseline", str(tmp_path / "base"))
    assert "walk: target" in third.stdout and "jump: target" not in third.stdout and "1 skipped" in third.stderr
    diff = {entry["output"]: entry for entry in json.loads((out / "diff.json").read_text())["images"]}
    shift = diff["walk"]["layers"][0]["cam"]  # the clip's size is known: its CAM's peak shift is a number
    assert shift["compared_shape"]["after"] == [4, SIDE // 2, SIDE // 2] and shift["peak_shift_pixels"] >= 0
    _run(clips, out, "--clip-frames", "3", "--skip-existing")  # another T: both redone
    for name in ("walk", "jump"):
        report = json.loads((out / name / "report.json").read_text())
        assert report["preprocessing"]["input_size"] == [3, SIDE, SIDE] and report["layers"][0]["shapes"]["output"][2] == 3
        assert report["asked"]["target"]["sample"] == {"clip_frames": 3}


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_a_clip_model_given_photos_says_so_in_one_line(tmp_path):
    command = [sys.executable, "-m", "hookviz", "run", str(SAMPLES / "cat.png"), "--model", "tests.frames_plugin:clip_net"]
    command += ["--out", str(tmp_path / "out")]
    env = {**os.environ, "HOOKVIZ_PLUGINS": "tests.frames_plugin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "cat.png" in lines[0] and "'frames'" in lines[0] and not (tmp_path / "out").exists()


def test_the_progress_counts_the_samples_the_kind_found():
    """The command counted the photos found while torch imported (36 frames: too many for a line
    each); the model's kind found 3 clips, so each gets its line, as any 3 samples would."""
    from hookviz.progress import FEW_IMAGES, Progress

    progress = Progress(36, quiet=True, stdout_lines=True)
    assert not progress.stdout_lines and 36 > FEW_IMAGES
    progress.start("model ...", 3)
    assert progress.total == 3 and progress.stdout_lines
    asked_none = Progress(3, quiet=True, stdout_lines=False)  # --json: no lines, however few
    asked_none.start("model ...", 2)
    assert not asked_none.stdout_lines
