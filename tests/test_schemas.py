"""Every kind of sample's report.json, run.json and diff.json against the shipped schemas
(issue 37): a photo, a clip (a torchvision video classifier by name, whose report keeps the
frames it used, and a factory's clip model), a sample of several inputs, and the plug-in kinds
of tests/sample_plugin.py, tests/frames_plugin.py and tests/signal_plugin.py. Each is run twice,
the second time with ``--baseline`` the first, so that a diff.json is written and checked too; what
the runs say of a kind other than the photo calls its samples by the kind's own noun, never photos
or images (issue 38)."""

from __future__ import annotations

import json
import os
import re
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
COVERED = {"photo", "video", "multi", "photo+vector", "frames", "csv-signal"}
PLUG_INS = ("photo+vector", "frames", "csv-signal")


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
    return type("Result", (), {"exit_code": done.returncode, "output": done.stdout + done.stderr})


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


def _signals(folder, out, *extra):
    signals = folder / "signals"
    if not signals.exists():
        signals.mkdir()
        rng = np.random.default_rng(0)
        for k in range(2):
            np.savetxt(signals / f"s{k}.csv", rng.normal(size=(64, 2)), delimiter=",", header="x,y", comments="", fmt="%.6f")
    model, plugin = "tests.signal_plugin:signal_net", "tests.signal_plugin"
    return _plugin_run(model, plugin, signals, out, "--weights", "none", "--layer", "3", "--faithfulness", *extra)


CASES = {
    "photo": _photo,
    "video (torchvision, by name)": _torchvision_clip,
    "video (a factory's model)": _factory_clip,
    "multi": _several_inputs,
    "photo+vector": _photo_and_vector,
    "frames": _frames,
    "csv-signal": _signals,
}

#: A kind's own words, which may name the photo its sample holds (``SampleKind.words``).
OWN_WORDS = ("a photo and the inputs bound to it with --input", "a photo and the vector of its .npy file")


def test_the_cases_cover_every_sample_kind():
    from hookviz.samples import SAMPLE_KINDS, get_sample_kind

    get_sample_kind("photo")
    built_in = {name for name in SAMPLE_KINDS if name not in PLUG_INS}
    assert built_in | set(PLUG_INS) == COVERED
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
def test_every_kinds_files_are_valid_and_its_runs_call_its_samples_by_its_noun(tmp_path, case):
    first, second = tmp_path / "first", tmp_path / "second"
    done = CASES[case](tmp_path, first)
    assert done.exit_code == 0, done.output
    again = CASES[case](tmp_path, second, "--baseline", first)
    assert again.exit_code == 0, again.output
    assert _validate_run_folder(first) >= 2
    assert _validate_run_folder(second) >= 3 and (second / "diff.json").exists()
    said = _said(tmp_path, (done.output, again.output), first, second)
    if case != "photo":
        assert not re.findall(r"\b(?:photo|image)s?\b", said, re.IGNORECASE), said
    if case == "csv-signal":
        assert "faithfulness: on these 2 signals, " in said and "2 of 2 signals done" in said, said
    if case.startswith("video (torchvision"):
        report = json.loads(next(first.glob("*/report.json")).read_text())
        assert report["preprocessing"]["frames"] == 4 and report["preprocessing"]["input_size"] == [4, 32, 32]


def _said(tmp_path, outputs, *runs) -> str:
    """What the runs said: their output and the notes of their reports and run files, the
    folders' paths and the kind's own words left out."""
    documents = [json.loads(p.read_text()) for out in runs for p in [out / "run.json", *out.glob("*/report.json")]]
    said = "\n".join([*outputs, *(note for document in documents for note in document.get("notes", []))])
    for words in (str(tmp_path), *OWN_WORDS):
        said = said.replace(words, "")
    return said
