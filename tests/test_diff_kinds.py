"""Issue 37, item 3: ``hookviz diff`` and ``run --baseline`` between a clip run and a photo run
whose samples share a name. Their predictions and statistics are compared; their maps, of
another rank, are not, and one note says so; the exit codes are the help's (0, 2 or 3), and a
run with ``--baseline`` keeps its own files (run.json, index.html)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from hookviz.compare.measures import peak_shift

from .cli_helpers import hookviz_cli, hookviz_run
from .video_clips import encode, moving_square

CLIP_NET = "tests.video_clips:video_net"


def test_peak_shift_between_maps_of_another_rank_is_unknown_not_an_error():
    clip, photo = np.zeros((4, 8, 8)), np.zeros((8, 8))
    clip[1, 2, 3], photo[2, 3] = 1.0, 1.0
    assert peak_shift(clip, photo, (4, 32, 32), (32, 32)) is None
    assert peak_shift(photo, clip, (32, 32), (4, 32, 32)) is None
    assert peak_shift(photo, photo, (32, 32), (32, 32)) == 0.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A clip run and a photo run whose one sample is ``a`` in both, recording ``features.0``."""
    pytest.importorskip("av")
    root = tmp_path_factory.mktemp("kinds")
    (root / "v").mkdir()
    (root / "p").mkdir()
    encode(root / "v" / "a.mp4", frames=4)
    Image.fromarray(moving_square(0)).save(root / "p" / "a.png")
    clip = hookviz_run(root / "v" / "a.mp4", "--frames", 2, "-q", model=CLIP_NET, layer="features.0", out=root / "clip")
    assert clip.exit_code == 0, clip.output
    photo = hookviz_run(root / "p" / "a.png", "-q", layer="features.0", out=root / "photo")
    assert photo.exit_code == 0, photo.output
    return root


NOTE = "another kind of sample in BASE {base} and NEW {new} for {image}: {before} input against {after}"


@pytest.mark.slow
def test_diff_between_a_clip_run_and_a_photo_run_compares_what_it_can(runs):
    for base, new, before, after in (
        ("clip", "photo", "2x224x224 (3-D)", "224x224 (2-D)"),
        ("photo", "clip", "224x224 (2-D)", "2x224x224 (3-D)"),
    ):
        result = hookviz_cli("diff", runs / base, runs / new)
        assert result.exit_code == 0, result.output
        assert "Traceback" not in result.output and "Error" not in result.output
        image = f"{runs / ('p/a.png' if new == 'photo' else 'v/a.mp4')}"
        note = NOTE.format(base=runs / base, new=runs / new, image=image, before=before, after=after)
        lines = [line for line in result.output.splitlines() if "another kind of sample" in line]
        assert len(lines) == 1 and note in lines[0] and "not on maps or CAMs" in lines[0], (note, lines)
        written = json.loads((runs / new / "diff.json").read_text())
        layer = written["images"][0]["layers"][0]
        assert layer["cam"]["corr"] is None and layer["cam"]["peak_shift_pixels"] is None
        assert written["images"][0]["target"]["before"]["probability"] is not None  # the predictions are compared
        figures = {f["figure"] for f in written["drift"]["findings"]}
        assert {"model_input.shape", "input.shape", "output.shape"} <= figures, figures
    checked = hookviz_cli("diff", runs / "clip", runs / "photo", "--fail-on", "drift")
    assert checked.exit_code == 3, checked.output


@pytest.mark.slow
def test_a_photo_run_with_a_clip_run_as_baseline_keeps_its_files(runs, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(runs / "p" / "a.png", "-q", "--baseline", runs / "clip", layer="features.0", out=out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    for name in ("run.json", "index.html", "diff.json", "a/report.json"):
        assert (out / name).is_file(), name
    run = json.loads((out / "run.json").read_text())
    assert run["error"] is None and any("another kind of sample" in note for note in run["notes"]), run["notes"]
    checked = hookviz_run(
        runs / "p" / "a.png",
        "-q",
        "--baseline",
        runs / "clip",
        "--fail-on",
        "drift",
        layer="features.0",
        out=tmp_path / "checked",
    )
    assert checked.exit_code == 3, checked.output
    assert (tmp_path / "checked" / "run.json").is_file() and (tmp_path / "checked" / "index.html").is_file()


def test_a_comparison_that_breaks_still_leaves_the_runs_own_files(tmp_path, monkeypatch):
    """Whatever fails as the run compares itself with its baseline, its run.json and gallery are written first."""
    from hookviz.compare import diffing
    from tests.conftest import SAMPLES

    base = tmp_path / "base"
    assert hookviz_run(SAMPLES / "cat.png", "-q", "--resize", 32, "--pictures", "none", out=base).exit_code == 0

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the comparison")

    monkeypatch.setattr(diffing, "compare_with_baseline", broken)
    out = tmp_path / "new"
    result = hookviz_run(SAMPLES / "cat.png", "-q", "--resize", 32, "--pictures", "none", "--baseline", base, out=out)
    assert result.exit_code == 1
    run = json.loads((out / "run.json").read_text())
    assert run["error"] == "comparing with the baseline: RuntimeError: a bug in the comparison", run["error"]
    assert (out / "index.html").is_file() and (out / "cat" / "report.json").is_file()
