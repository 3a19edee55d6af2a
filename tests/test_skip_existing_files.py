"""``--skip-existing`` over samples of several files (issue 37): every file of a sample counts in
its identity, so one replaced by another of the same size and an older time (what ``cp -p`` or
``rsync -a`` from a backup makes) redoes the sample, as a photo's does."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from .cli_helpers import hookviz_run
from .test_multi_input import HEIGHT, WIDTH, _rgbd_run
from .video_clips import moving_square


def _older_copy(path, write) -> None:
    """Replace ``path`` by other bytes of its size, dated a day before it (``cp -p`` from a backup)."""
    before = path.stat()
    write(path)
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns - 86_400 * 10**9))


def _photo_set(rgb, depth, keys=("a", "b")):
    rng = np.random.default_rng(0)
    for folder in (rgb, depth):
        folder.mkdir()
    for key in keys:
        np.save(depth / f"{key}.npy", rng.random((HEIGHT, WIDTH)).astype(np.float32))
        Image.fromarray(rng.integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)).save(rgb / f"{key}.png")
        os.utime(rgb / f"{key}.png", ns=(0, (depth / f"{key}.npy").stat().st_mtime_ns + 10**9))  # the photo is the newest


@pytest.mark.slow  # three runs of hookviz in this process
def test_a_depth_file_replaced_by_an_older_copy_of_its_size_redoes_the_sample(tmp_path):
    rgb, depth, out = tmp_path / "rgb", tmp_path / "depth", tmp_path / "out"
    _photo_set(rgb, depth)
    assert _rgbd_run(rgb, depth, out, layer=("fusion",)).exit_code == 0
    _older_copy(depth / "a.npy", lambda p: np.save(p, np.full((HEIGHT, WIDTH), 0.5, np.float32)))
    again = _rgbd_run(rgb, depth, out, "--skip-existing", layer=("fusion",))
    assert "1 skipped" in again.stderr and "a.png" in again.stdout and "b.png" not in again.stdout, again.output
    files = json.loads((out / "a" / "report.json").read_text())["sample_identity"]["files"]
    assert [entry["path"].rsplit("/", 2)[-2:] for entry in files] == [["rgb", "a.png"], ["depth", "a.npy"]]
    assert files[1]["mtime_ns"] == (depth / "a.npy").stat().st_mtime_ns


def _stored_png(path, pixels) -> None:
    """A PNG whose size depends on its shape only (stored, not compressed)."""
    Image.fromarray(pixels).save(path, compress_level=0)


@pytest.mark.slow  # three runs of hookviz in this process
def test_a_frame_replaced_by_an_older_copy_of_its_size_redoes_the_clip(tmp_path):
    clip, out = tmp_path / "jump", tmp_path / "out"
    clip.mkdir()
    for index in range(4):
        _stored_png(clip / f"f{index + 1}.png", moving_square(index))

    def run(*args):
        return hookviz_run(
            clip, "--resize", 24, "--crop", 24, "--frames", 4, *args, model="tests.video_clips:video_net", weights=None, out=out
        )

    assert run().exit_code == 0
    assert run("--skip-existing").stderr.count("1 skipped") == 1
    _older_copy(clip / "f2.png", lambda p: _stored_png(p, 255 - moving_square(1)))
    again = run("--skip-existing")
    assert again.exit_code == 0 and "1 of 1 clips done" in again.stderr and "skipped" not in again.stderr, again.output
    report = json.loads((out / "jump" / "report.json").read_text())
    assert len(report["sample_identity"]["files"]) == 4 and report["sample_identity"]["files"][1]["path"].endswith("jump/f2.png")


def test_the_identity_of_several_files_keeps_each_one_and_reads_back(tmp_path):
    from hookviz.inputs.identity import Match, SampleIdentity, match_files

    files = [tmp_path / "a.png", tmp_path / "a.npy"]
    files[0].write_bytes(b"photo")
    files[1].write_bytes(b"depth-1")
    os.utime(files[0], ns=(0, files[1].stat().st_mtime_ns + 10**9))  # the photo is the newest
    recorded = SampleIdentity.of_files(files)
    assert SampleIdentity.from_json(json.loads(json.dumps(recorded.to_json()))) == recorded
    assert [entry["size"] for entry in recorded.to_json()["files"]] == [5, 7] and match_files(recorded, files) == Match.SAME
    _older_copy(files[1], lambda p: p.write_bytes(b"depth-2"))
    assert match_files(recorded, files) == Match.CHANGED
    assert "files" not in SampleIdentity.of_files(files[:1]).to_json()  # a photo's stays as it was
