"""The ``video`` sample kind (issue 28): a video file or a folder of frames is one clip, decoded
with seeks (a long video costs its sampled frames), its options settled against the model, bad
files refused in one line each, and a Conv3d model of the kind run end to end by ``hookviz run``.
Every video is made here with PyAV's own encoder."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookviz.errors import ImageError, UsageError
from hookviz.inputs.images import Preprocessing
from hookviz.samples import VideoOptions, get_sample_kind
from hookviz.samples.video_decode import ClipPlan, decode_clip

from .conftest import ROOT
from .video_clips import VideoNet, encode, moving_square

pytest.importorskip("av")

BIG = 10**9


def _index_of(frame: np.ndarray) -> int:
    """Which moving-square frame a decoded one is, by its top-left block's grey (index * 8)."""
    return round(float(frame[2:6, 2:6].mean()) / 8)


def test_a_long_video_costs_its_sampled_frames_not_its_length(tmp_path):
    video = encode(tmp_path / "long.mp4", frames=600, gop=15)
    clip = decode_clip(video, ClipPlan(frames=4), BIG)
    expected = [round(i) for i in np.linspace(0, 599, 4)]
    assert [round(t * 30) for t in clip.times] == expected
    assert [_index_of(frame) for frame in clip.frames] == [i % 32 for i in expected]  # the grey wraps at 256
    assert clip.decoded <= 4 * 16 and clip.frames.shape == (4, 24, 32, 3)  # a keyframe each 15 frames: 600 not decoded


def test_the_clips_of_a_video_of_one_keyframe_cost_one_pass_over_it(tmp_path):
    """``--clips 10`` on a video whose only keyframe is its first (where seeking cannot help):
    each clip decodes on from where the one before ended, one pass over the file in all, not
    one pass per clip; the frames are those the seeking path takes."""
    video = encode(tmp_path / "one_key.mp4", frames=400, gop=1000)
    clips = [decode_clip(video, ClipPlan(frames=4, part=k, parts=10), BIG) for k in range(1, 11)]
    assert sum(clip.decoded for clip in clips) <= 400 + 40  # before: 2200 (each clip decoded from the first frame)
    for k, clip in reversed(list(enumerate(clips, start=1))):  # last first: each clip asked alone, by seeking
        alone = decode_clip(video, ClipPlan(frames=4, part=k, parts=10), BIG)
        assert clip.times == alone.times and np.array_equal(clip.frames, alone.frames)
        assert [_index_of(frame) for frame in clip.frames] == [round(t * 30) % 32 for t in clip.times]
    keyed = encode(tmp_path / "keyed.mp4", frames=400, gop=15)  # keyframes every half second: seeking as before
    assert sum(decode_clip(keyed, ClipPlan(frames=4, part=k, parts=10), BIG).decoded for k in range(1, 11)) <= 10 * 4 * 16


def test_stride_start_and_end_pick_the_frames_by_time(tmp_path):
    video = encode(tmp_path / "a.mp4", frames=30)
    strided = decode_clip(video, ClipPlan(frames=4, stride=3, start=0.2), BIG)
    assert [round(t * 30) for t in strided.times] == [6, 9, 12, 15] and not strided.notes
    assert [_index_of(frame) for frame in strided.frames] == [6, 9, 12, 15]
    spanned = decode_clip(video, ClipPlan(frames=3, start=0.5, end=0.9), BIG)
    assert [round(t * 30) for t in spanned.times] == [15, 21, 26]


def test_a_video_shorter_than_the_clip_repeats_its_last_frame_with_a_note(tmp_path):
    clip = decode_clip(encode(tmp_path / "short.mp4", frames=5), ClipPlan(frames=8), BIG)
    assert [round(t * 30) for t in clip.times] == [round(i) for i in np.linspace(0, 4, 8)]
    assert len(clip.notes) == 1 and "holds 5 frames" in clip.notes[0] and "repeat" in clip.notes[0]
    strided = decode_clip(encode(tmp_path / "s.mp4", frames=5), ClipPlan(frames=3, stride=3), BIG)
    assert [round(t * 30) for t in strided.times] == [0, 3, 4] and "repeat" in strided.notes[0]


def test_bad_files_are_one_line_each(tmp_path):
    good = encode(tmp_path / "good.mp4", frames=30)
    (tmp_path / "noise.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    (tmp_path / "cut.mp4").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (tmp_path / "empty.mkv").write_bytes(b"")
    for name, words in (("noise.mp4", "corrupt"), ("cut.mp4", "truncated"), ("empty.mkv", "empty"), ("none.mp4", "no such")):
        with pytest.raises(ImageError, match=words) as caught:
            decode_clip(tmp_path / name, ClipPlan(frames=4), BIG)
        assert "\n" not in str(caught.value) and name in str(caught.value)
    with pytest.raises(ImageError, match="holds no video stream \\(audio only\\)"):
        decode_clip(_audio_only(tmp_path / "song.mp4"), ClipPlan(frames=4), BIG)


def _audio_only(path: Path) -> Path:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=8000)
        for index in range(4):
            samples = np.zeros((1, 1024), np.float32)
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 8000, index * 1024
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def test_deep_colour_big_frames_and_a_variable_rate_are_decoded_with_a_note(tmp_path):
    deep = decode_clip(encode(tmp_path / "deep.mkv", frames=6, codec="ffv1", pix_fmt="yuv420p10le"), ClipPlan(frames=3), BIG)
    assert deep.frames.dtype == np.uint8 and any("10-bit video (yuv420p10le) converted to 8-bit RGB" in n for n in deep.notes)
    assert [_index_of(frame) for frame in deep.frames] == [0, 2, 5]
    small = decode_clip(encode(tmp_path / "big.mp4", frames=4, width=320, height=240), ClipPlan(frames=2), 320 * 240 // 4)
    assert small.frames.shape[1:3] == (120, 160) and any("320x240 frames downscaled to 160x120" in n for n in small.notes)
    times = [0.0, 0.1, 0.15, 0.5, 0.55, 0.6, 1.2, 1.25, 1.3, 1.35]
    vfr = decode_clip(encode(tmp_path / "vfr.mkv", frames=10, fps=10, times=times), ClipPlan(frames=10), BIG)
    assert any("variable frame rate" in note for note in vfr.notes)
    assert set(vfr.times) <= {round(t, 6) for t in times}  # every time is a frame's own timestamp


def test_the_options_settle_against_the_model(tmp_path):
    kind = get_sample_kind("video")
    model = type("Loaded", (), {"module": VideoNet(frames=6)})()
    assert kind.settings_for_model(VideoOptions(), model).frames == 6  # the model's own
    assert kind.settings_for_model(VideoOptions(), type("Loaded", (), {"module": VideoNet()})()).frames == 16
    for_model = kind.settings_for_model(VideoOptions(frames="8", start="1.5", end="3"), model)  # the command line gives text
    assert (for_model.frames, for_model.start, for_model.end) == (8, 1.5, 3.0)
    for given, words in (({"frames": 0}, "1 to 1024"), ({"frames": "x"}, "give a whole number"), ({"start": -1}, "0 or more")):
        with pytest.raises(UsageError, match=words):
            kind.settings_for_model(VideoOptions(**given), model)
    with pytest.raises(UsageError, match="must be after"):
        kind.settings_for_model(VideoOptions(start=2, end=1), model)


def test_the_options_group_is_registered_and_its_names_are_its_own():
    from hookviz.options.declared import check_group, groups, settings_of

    assert groups()[VideoOptions] == ("video",)
    check_group(VideoOptions, "sample kind 'video'")  # names no setting another owner or the run's options take
    for setting in settings_of(VideoOptions):
        clash = dataclasses.make_dataclass("Clash", [(setting.name, int, dataclasses.field(default=0))], frozen=True)
        with pytest.raises(UsageError, match=f"setting '{setting.name}' is taken by video"):
            check_group(clash, "method 'clash'")


def _frame_folder(folder: Path, count: int = 5) -> Path:
    folder.mkdir(parents=True)
    for index in range(count):
        Image.fromarray(moving_square(index)).save(folder / f"f{index + 1}.png")  # f10 after f9: numbers compare as numbers
    return folder


def test_find_takes_video_files_and_folders_of_frames_and_a_photo_model_keeps_photos(tmp_path):
    (tmp_path / "in").mkdir()
    encode(tmp_path / "in" / "walk.mp4")
    _frame_folder(tmp_path / "in" / "frames", 11)
    (tmp_path / "in" / "notes.txt").write_text("no clip")
    kind = get_sample_kind("video")
    assert [p.name for p in kind.find([str(tmp_path / "in")])] == ["frames", "walk.mp4"]
    assert kind.files(tmp_path / "in" / "frames")[-2:] == [tmp_path / "in" / "frames" / f"f{i}.png" for i in (10, 11)]
    assert len(get_sample_kind("photo").find([str(tmp_path / "in")])) == 11  # a photo model: each frame a photo
    with pytest.raises(UsageError, match="names no clip: a video file"):
        kind.find([str(tmp_path / "in" / "notes.txt")])


def test_a_folder_of_frames_is_prepared_as_its_photos(tmp_path):
    kind = get_sample_kind("video")
    folder = _frame_folder(tmp_path / "clip", 7)
    settings = VideoOptions(frames=4, start=0.0)
    loaded = kind.load(folder, BIG, settings)
    assert loaded.times == (0.0, 2.0, 4.0, 6.0) and "frame numbers" in loaded.notes[0]
    processing = Preprocessing(resize=24, size=24)
    sample = kind.prepare(loaded, processing, BIG, settings)
    assert sample.tensor.shape == (3, 4, 24, 24) and sample.times == loaded.times and sample.main == "clip"
    from hookviz.inputs.images import LoadedSample, prepare

    third = prepare(LoadedSample(None, Image.fromarray(moving_square(4))), processing, BIG)
    assert np.allclose(sample.tensor[:, 2].numpy(), third.tensor.numpy())  # each frame as the photo path makes it
    assert sample.shown.shape == (49, 49, 3)  # 2 x 2 tiles of 24 and a 1-pixel gap


def test_a_video_transform_object_makes_the_clip(tmp_path):
    import torch
    from torchvision.transforms._presets import VideoClassification

    from hookviz.inputs.transforms import WeightsTransform

    function = VideoClassification(crop_size=(16, 16), resize_size=(20, 26))
    transform = WeightsTransform(function, "the r3d_18 transform", applied=True, shape=(3, 16, 16))
    processing = Preprocessing(16, 16, mean=function.mean, std=function.std, mode="transform", transform=transform)
    kind, settings = get_sample_kind("video"), VideoOptions(frames=4, start=0.0)
    loaded = kind.load(encode(tmp_path / "a.webm", frames=12, codec="libvpx-vp9"), BIG, settings)
    sample = kind.prepare(loaded, processing, BIG, settings)
    expected = function(torch.from_numpy(loaded.frames).permute(0, 3, 1, 2))
    assert sample.tensor.shape == (3, 4, 16, 16) and torch.equal(sample.tensor, expected)


@pytest.mark.slow  # two runs of a fresh interpreter
def test_a_video_model_runs_end_to_end_and_redoes_a_clip_when_the_options_change(tmp_path):
    clips = tmp_path / "clips"
    clips.mkdir()
    encode(clips / "walk.mp4", frames=30)
    _frame_folder(clips / "jump", 6)
    (clips / "broken.avi").write_bytes(b"RIFF not a video")
    out = tmp_path / "out"
    first = _run(clips, out, "--frames", "4", "--frame-stride", "2")
    assert "broken.avi" in first.stderr and "2 of 3 clips done" in first.stderr, first.stderr
    report = json.loads((out / "walk.mp4" / "report.json").read_text()) if (out / "walk.mp4").exists() else None
    report = report or json.loads(next(out.glob("walk*/report.json")).read_text())
    assert report["asked"]["target"]["sample"] == {"frames": 4, "frame_stride": 2, "start": 0.0, "end": None, "clips": 1}
    assert report["layers"][0]["shapes"]["output"][2] == 4
    again = _run(clips, out, "--frames", "4", "--frame-stride", "2", "--skip-existing")
    assert "2 skipped" in again.stderr, again.stderr
    third = _run(clips, out, "--frames", "3", "--skip-existing")
    assert "walk" in third.stdout and "jump" in third.stdout, third.stderr


def _run(folder, out, *extra):
    command = [sys.executable, "-m", "hookviz", "run", str(folder), "--model", "tests.video_clips:video_net"]
    command += ["--resize", "24", "--crop", "24", "--out", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode in (0, 1), done.stderr
    return done


@pytest.mark.slow  # two clips with the faithfulness curves and the randomisation check: several seconds of CPU
def test_the_faithfulness_summary_of_a_clip_run_says_clip_not_photo(tmp_path):
    """run.json's trust summary names what was measured: ``on this clip``, ``on these 2 clips``."""
    import json

    from tests.cli_helpers import hookviz_run
    from tests.video_clips import encode

    (tmp_path / "in").mkdir()
    for name in ("walk", "jump"):
        encode(tmp_path / "in" / f"{name}.mp4", frames=8)
    result = hookviz_run(
        tmp_path / "in", "--frames", "3", "--crop", "16", "--resize", "16", "--faithfulness", "--sanity", "--pictures", "none",
        model="tests.video_clips:video_net", out=tmp_path / "out",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]["summary"]
    assert summary[0].startswith("faithfulness: on these 2 clips, "), summary
    assert not any("photo" in sentence for sentence in summary), summary
