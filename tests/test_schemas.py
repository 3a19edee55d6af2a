"""Every kind of sample's report.json, run.json and diff.json against the shipped schemas
(issue 37): a photo, a clip (a torchvision video classifier by name, whose report keeps the
frames it used, and a factory's clip model), a sample of several inputs, and the plug-in kinds
of tests/sample_plugin.py and tests/frames_plugin.py. Each is run twice, the second time with
``--baseline`` the first, so that a diff.json is written and checked too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from hookviz.inputs.images import Preprocessing

from .cli_helpers import hookviz_run
from .conftest import ROOT, SAMPLES
from .test_records import _validate_run_folder, _validator
from .video_clips import encode

#: The sample kinds the cases below cover: the built-in ones and the plug-ins' (a new kind is added here, with a case).
COVERED = {"photo", "video", "multi", "photo+vector", "frames"}


def _photo(folder, out, *extra):
    return hookviz_run(SAMPLES / "cat.png", "--crop", "32", "--resize", "32", *extra, out=out)


def _torchvision_clip(folder, out, *extra):
    clip = folder / "walk.mp4"
    if not clip.exists():
        encode(clip, frames=12, width=40, height=32)
    options = ("--frames", "4", "--crop", "32", "--resize", "32", "--pictures", "cam")
    return hookviz_run(clip, *options, *extra, model="r3d_18", layer="layer2", out=out)


def _factory_clip(folder, out, *extra):
    clip = folder / "jump.mp4"
    if not clip.exists():
        encode(clip, frames=8)
    return hookviz_run(
        clip, "--frames", "3", "--crop", "16", "--resize", "16", *extra, model="tests.video_clips:video_net", out=out
    )


def _several_inputs(folder, out, *extra):
    rgb, depth = folder / "rgb", folder / "depth"
    if not rgb.exists():
        rng = np.random.default_rng(0)
        rgb.mkdir(), depth.mkdir()
        Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(rgb / "a.png")
        np.save(depth / "a.npy", rng.random((24, 32)).astype(np.float32))
    options = ("--input", f"depth={depth}", "--aligned", "depth", "--task", "segment", "--resize", "32", *extra)
    return hookviz_run(rgb, *options, model="tests.multi_models:build_rgbd", weights=None, layer="fusion", out=out)


def _plugin_run(model: str, plugin: str, source, out, *extra):
    """A plug-in kind's run, in a fresh interpreter (its kind registered there alone)."""
    command = [sys.executable, "-m", "hookviz", "run", str(source), "--model", model, "--crop", "32", "--resize", "32"]
    command += ["--pictures", "cam", "--out", str(out), *map(str, extra)]
    env = {**os.environ, "HOOKVIZ_PLUGINS": plugin, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    return type("Result", (), {"exit_code": done.returncode, "output": done.stderr})


def _photo_and_vector(folder, out, *extra):
    if not (folder / "cat.npy").exists():
        Image.open(SAMPLES / "cat.png").save(folder / "cat.png")
        np.save(folder / "cat.npy", np.asarray([1.0, 2.0, 3.0, 4.0], np.float32))
    return _plugin_run(
        "tests.sample_plugin:pair_net", "tests.sample_plugin", folder / "cat.png", out, "--task", "pair-classify", *extra
    )


def _frames(folder, out, *extra):
    clip = folder / "walk"
    if not clip.exists():
        clip.mkdir()
        for t in range(5):
            pixels = np.full((40, 48, 3), 30, np.uint8)
            pixels[5 + 4 * t : 15 + 4 * t, 10 + 3 * t : 22 + 3 * t] = (250, 200, 50)
            Image.fromarray(pixels).save(clip / f"{t:03d}.png")
    return _plugin_run("tests.frames_plugin:clip_net", "tests.frames_plugin", clip, out, "--layer", "features.3", *extra)


CASES = {
    "photo": _photo,
    "video (torchvision, by name)": _torchvision_clip,
    "video (a factory's model)": _factory_clip,
    "multi": _several_inputs,
    "photo+vector": _photo_and_vector,
    "frames": _frames,
}


def test_the_cases_cover_every_sample_kind():
    from hookviz.samples import SAMPLE_KINDS, get_sample_kind

    get_sample_kind("photo")
    own = {name for name, kind in SAMPLE_KINDS.items() if type(kind).__module__.startswith("hookviz.")}
    built_in = own - {"photo+vector", "frames"}  # a test's plug-in (tests/signal_plugin.py) is not hookviz's
    assert built_in | {"photo+vector", "frames"} == COVERED
    assert {name.split(" ")[0] for name in CASES} == COVERED


def test_a_clips_preprocessing_with_its_frames_is_valid():
    """``preprocessing.frames`` (a clip model's frames per clip) is allowed by the schema."""
    import jsonschema

    schema = _validator("report").schema
    preprocessing = {**schema["properties"]["preprocessing"], "$defs": schema["$defs"]}

    jsonschema.validate(Preprocessing(resize=128, size=112, frames=8).to_json(), preprocessing)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**Preprocessing(frames=8).to_json(), "frames": 0}, preprocessing)


@pytest.mark.slow  # two runs each: 3 s (a photo) to 30 s (a plug-in's, two fresh interpreters) of CPU, measured
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_kinds_report_run_and_diff_are_valid_against_the_schemas(tmp_path, case):
    first, second = tmp_path / "first", tmp_path / "second"
    done = CASES[case](tmp_path, first)
    assert done.exit_code == 0, done.output
    again = CASES[case](tmp_path, second, "--baseline", first)
    assert again.exit_code == 0, again.output
    assert _validate_run_folder(first) >= 2
    assert _validate_run_folder(second) >= 3 and (second / "diff.json").exists()
    if case.startswith("video (torchvision"):
        report = json.loads(next(first.glob("*/report.json")).read_text())
        assert report["preprocessing"]["frames"] == 4 and report["preprocessing"]["input_size"] == [4, 32, 32]
