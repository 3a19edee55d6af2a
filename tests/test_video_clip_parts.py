"""``--clips K`` (issue 28): a video (or a folder of frames) cut into K clips, one after another
over its span, each a sample of its own keyed ``VIDEO#k``: its own folder, report.json row and
``--skip-existing`` verdict. Every video is made here with PyAV's own encoder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from hookviz.errors import ImageError, UsageError
from hookviz.inputs.parts import part_key, part_stem, split_part
from hookviz.samples import VideoOptions, get_sample_kind, sample_keys
from hookviz.samples.video_decode import ClipPlan, decode_clip
from hookviz.store.folders import output_names

from .conftest import ROOT
from .explorer_helpers import explorer_pictures
from .video_clips import VideoNet, encode, moving_square

pytest.importorskip("av")

BIG = 10**9


def test_each_clip_takes_its_own_run_of_the_span(tmp_path):
    video = encode(tmp_path / "a.mp4", frames=30)
    runs = [decode_clip(video, ClipPlan(frames=2, part=k, parts=3), BIG) for k in (1, 2, 3)]
    # 30 frames in 3 runs of 10 (0-9, 10-19, 20-29), 2 frames spread over each: its first and last
    assert [[round(t * 30) for t in clip.times] for clip in runs] == [[0, 9], [10, 19], [20, 29]]
    spanned = [decode_clip(video, ClipPlan(frames=2, start=0.5, parts=2, part=k), BIG) for k in (1, 2)]
    assert [[round(t * 30) for t in clip.times] for clip in spanned] == [[15, 21], [22, 29]]  # 15 frames: 7 and 8
    strided = decode_clip(video, ClipPlan(frames=3, stride=2, part=2, parts=2), BIG)
    assert [round(t * 30) for t in strided.times] == [15, 17, 19]


def test_a_span_shorter_than_its_clips_is_refused_in_one_line(tmp_path):
    video = encode(tmp_path / "short.mp4", frames=4)
    with pytest.raises(ImageError) as caught:
        decode_clip(video, ClipPlan(frames=2, part=1, parts=5), BIG)
    message = str(caught.value)  # arg() spells the option as the caller gave it: clips=5 here, --clips 5 on the command line
    assert "holds 4 frames in its span, fewer than clips=5; give fewer clips" in message and "\n" not in message
    few = decode_clip(video, ClipPlan(frames=3, part=2, parts=2), BIG)  # 2 frames for 3: repeated, noted, no overlap
    assert [round(t * 30) for t in few.times] == [2 + round(i) for i in np.linspace(0, 1, 3)] and "repeat" in few.notes[0]


def test_the_option_is_filled_in_for_the_model_and_gives_a_key_per_clip(tmp_path):
    kind = get_sample_kind("video")
    model = type("Loaded", (), {"module": VideoNet(frames=4)})()
    assert kind.settings_for_model(VideoOptions(clips="3"), model).clips == 3  # the command line gives text
    for clips in (0, 2000, "x"):
        with pytest.raises(UsageError, match=r"^clips="):
            kind.settings_for_model(VideoOptions(clips=clips), model)
    (tmp_path / "in").mkdir()
    video = encode(tmp_path / "in" / "walk.mp4")
    photo = tmp_path / "in" / "cat.png"
    Image.fromarray(moving_square(0)).save(photo)
    keys = sample_keys(kind, [video, photo], VideoOptions(clips=2))
    assert keys == [tmp_path / "in" / "walk.mp4#1", tmp_path / "in" / "walk.mp4#2", photo]  # a photo is refused later
    assert kind.files(keys[1]) == [video] and kind.identity(keys[1]) == kind.identity(video)
    assert list(output_names(keys).values()) == ["walk.clip-1", "walk.clip-2", "cat"]


def test_a_key_that_exists_is_never_a_part(tmp_path):
    folder = tmp_path / "take#2"
    folder.mkdir()
    assert split_part(folder) == (folder, None) and part_stem(folder) == "take#2"
    assert split_part(part_key(tmp_path / "w.mp4", 12)) == (tmp_path / "w.mp4", 12)


def test_a_folder_of_frames_is_cut_as_a_video_is(tmp_path):
    kind = get_sample_kind("video")
    folder = tmp_path / "jump"
    folder.mkdir()
    for index in range(9):
        Image.fromarray(moving_square(index)).save(folder / f"{index}.png")
    settings = VideoOptions(frames=3, start=0.0, clips=3)
    loaded = [kind.load(part_key(folder, k), BIG, settings) for k in (1, 2, 3)]
    assert [clip.times for clip in loaded] == [(0.0, 1.0, 2.0), (3.0, 4.0, 5.0), (6.0, 7.0, 8.0)]
    assert loaded[1].path == part_key(folder, 2)
    with pytest.raises(ImageError, match="cuts it into 3 clips: name one, as jump#1"):
        kind.load(folder, BIG, settings)  # explain() given the whole folder: which clip?
    with pytest.raises(ImageError, match="names clip 4"):
        kind.load(part_key(folder, 4), BIG, settings)


@pytest.mark.slow  # two runs of a fresh interpreter
def test_three_clips_are_three_rows_and_a_second_run_redoes_none(tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    encode(clips / "walk.mp4", frames=30)
    out = tmp_path / "out"
    first = _run(clips, out, "--frames", "4", "--clips", "3")
    assert "3 of 3 clips done" in first.stderr, first.stderr
    reports = [json.loads((out / f"walk.clip-{k}" / "report.json").read_text()) for k in (1, 2, 3)]
    assert [r["sample"].rsplit("/", 1)[-1] for r in reports] == ["walk.mp4#1", "walk.mp4#2", "walk.mp4#3"]
    starts = [r["times"][0] for r in reports]
    assert np.allclose(starts, [0, 10 / 30, 20 / 30], atol=1e-3) and len(set(starts)) == 3
    assert all(r["asked"]["target"]["sample"]["clips"] == 3 for r in reports)
    gallery = "".join(explorer_pictures(out))
    assert all(f"walk.clip-{k}/" in gallery for k in (1, 2, 3))
    again = _run(clips, out, "--frames", "4", "--clips", "3", "--skip-existing")
    assert "0 of 3 clips done, 3 skipped" in again.stderr, again.stderr


def _run(folder, out, *extra):
    command = [sys.executable, "-m", "hookviz", "run", str(folder), "--model", "tests.video_clips:video_net"]
    command += ["--resize", "24", "--crop", "24", "--out", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode in (0, 1), done.stderr
    return done


def test_report_keeps_times_only_for_a_clip():
    from hookviz.store.report_records import Report

    assert "times" not in Report().to_json()
    assert Report.from_json({**Report(times=(0.0, 0.5)).to_json()}).times == (0.0, 0.5)
