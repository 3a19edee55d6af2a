"""A video's rotation metadata turns its frames upright, and the wrong kind of input for a model
(a photo for a video model, a video for a photo model) is refused in one line as the run goes on."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookviz.samples.video_decode import ClipPlan, decode_clip

from .conftest import ROOT
from .video_clips import encode, moving_square

pytest.importorskip("av")

BIG = 10**8

# The mp4 track header's transformation matrix (ISO/IEC 14496-12, 'tkhd'): a, b, u, c, d, v, x, y, w,
# 16.16 fixed point but u, v, w (2.30); a point (x, y) is shown at (a x + c y, b x + d y), y pointing down.
TURNS = {
    "clockwise": ((0, 1, 0, -1, 0, 0, 0, 0, 1), -1),  # right goes down: shown turned 90 degrees clockwise
    "half": ((-1, 0, 0, 0, -1, 0, 0, 0, 1), 2),
    "anticlockwise": ((0, -1, 0, 1, 0, 0, 0, 0, 1), 1),
}


def _with_display_matrix(path: Path, matrix) -> Path:
    """``path`` (an mp4 of one track) with its track header's matrix replaced: PyAV 18 (FFmpeg 8)
    writes none from ``stream.metadata['rotate']``, as a phone's camera app writes one."""
    data = bytearray(path.read_bytes())
    at = data.find(b"tkhd")
    assert at > 0 and data[at + 4] == 0  # version 0: 32-bit times, the matrix 40 bytes after the box's type
    fixed = [round(value * (1 << 30 if i in (2, 5, 8) else 1 << 16)) for i, value in enumerate(matrix)]
    data[at + 44 : at + 80] = struct.pack(">9i", *fixed)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("turn", sorted(TURNS))
def test_rotation_metadata_turns_the_frames_upright(tmp_path, turn):
    matrix, quarters = TURNS[turn]
    path = _with_display_matrix(encode(tmp_path / "phone.mp4", frames=6), matrix)
    clip = decode_clip(path, ClipPlan(frames=3), BIG)
    for frame, index in zip(clip.frames, (0, 2, 5)):
        expected = np.rot90(moving_square(index), quarters).astype(float)  # as the matrix shows the frame
        assert frame.shape == expected.shape
        assert np.abs(frame - expected).mean() < 4  # a lossy codec: near, and far from any other turn
        for other in {0, 1, 2, 3} - {quarters % 4}:  # every other turn is far
            wrong = np.rot90(moving_square(index), other).astype(float)
            assert wrong.shape != frame.shape or np.abs(frame - wrong).mean() > 10


def test_a_video_without_rotation_metadata_is_left_as_encoded(tmp_path):
    clip = decode_clip(encode(tmp_path / "flat.mp4", frames=4), ClipPlan(frames=2), BIG)
    assert clip.frames.shape == (2, 24, 32, 3) and np.abs(clip.frames[0] - moving_square(0).astype(float)).mean() < 6


def _run(model: str, out: Path, *sources: Path, extra=()) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "hookviz", "run", *map(str, sources), "--model", model, "--out", str(out)]
    command += ["--resize", "24", "--crop", "24", "--pictures", "cam", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def _refusals(stderr: str, name: str) -> list[str]:
    return [line for line in stderr.splitlines() if name in line and line.startswith("hookviz: failed:")]


@pytest.mark.slow  # a fresh interpreter
def test_a_photo_given_to_a_video_model_is_refused_in_one_line_and_the_clip_is_explained(tmp_path):
    still = tmp_path / "still.png"
    Image.fromarray(moving_square(0)).save(still)
    done = _run("tests.video_clips:video_net", tmp_path / "out", still, encode(tmp_path / "walk.mp4"), extra=["--frames", "4"])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    (line,) = _refusals(done.stderr, "still.png")
    assert "is a photo, not a clip" in line and "give a video file, or a folder of frames" in line
    assert "1 of 2 clips done" in done.stderr, done.stderr


@pytest.mark.slow  # a fresh interpreter
def test_a_video_given_to_a_photo_model_is_refused_in_one_line_and_the_photo_is_explained(tmp_path):
    still = tmp_path / "still.png"
    Image.fromarray(moving_square(0)).save(still)
    clip = encode(tmp_path / "walk.mp4")
    done = _run("resnet18", tmp_path / "out", clip, still, extra=["--weights", "none"])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    (line,) = _refusals(done.stderr, "walk.mp4")
    assert "is a video (a clip), and this model takes photos" in line and "a model that takes clips" in line
    assert "1 of 2 images done" in done.stderr, done.stderr
