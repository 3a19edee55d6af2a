"""Long work inside one photo says how far it got (``hookviz.workload``): through the
command, as lines in a log (the intervals made small by their ``HOOKVIZ_`` variables); from
the library, to a listener the caller gives, and never printed."""

from __future__ import annotations

import re

import pytest
import torch

import hookviz
from hookviz.workload import listening
from tests.conftest import tiny_net

from .cli_helpers import hookviz_run

TINY = ["--model", "tests.conftest:tiny_net", "--weights", "none", "--layer", "features.3", "--pictures", "none"]


def _run(photo, out, *more):
    return hookviz_run(photo, *TINY, *more, model=None, weights=None, out=out, catch_exceptions=False)


@pytest.fixture
def small_intervals(monkeypatch):
    """Every pass its own (a budget of one byte), every interval and threshold zero."""
    for name in ("PROGRESS_EVERY", "WORK_SHOWN_AFTER", "HEAVY_AFTER"):
        monkeypatch.setenv(f"HOOKVIZ_{name}", "0")
    monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", "1")


@pytest.mark.slow
def test_long_work_inside_a_photo_says_its_method_passes_done_of_total_and_time_left(photo, tmp_path, small_intervals):
    result = _run(photo, tmp_path / "out", "--cam", "scorecam,integrated-gradients", "--steps", "4", "--faithfulness")
    assert result.exit_code == 0, result.output
    sanity = _run(photo, tmp_path / "sanity", "--cam", "scorecam", "--sanity")
    assert sanity.exit_code == 0, sanity.output
    lines = result.stderr.splitlines() + sanity.stderr.splitlines()

    def said(pattern: str) -> list[str]:
        return [line for line in lines if re.fullmatch(pattern, line)]

    left = r", about \d+ s left"
    masked = said(r"hookviz: scorecam at features\.3: (\d+) of (\d+) masked passes" + left)
    assert masked and all(int(done) < int(total) for done, total in (re.findall(r"(\d+) of (\d+)", m)[0] for m in masked))
    assert said(r"hookviz: integrated-gradients: [1-5] of 6 steps" + left)
    assert said(r"hookviz: faithfulness of scorecam at features\.3: \d+ of \d+ altered passes" + left)
    assert said(r"hookviz: sanity check of scorecam at features\.3: \d+ of \d+ randomised passes" + left)
    # heavy work says so first, once a run, per photo
    heavy = said(r"hookviz: scorecam at features\.3: \d+ masked passes a photo, about \d+ s a photo here")
    assert len(heavy) == 2 and lines.index(heavy[0]) < lines.index(masked[0])  # once in each of the two runs
    assert result.stderr.count("masked passes a photo") == 1  # not again for the sanity check's copies
    assert len(said(r"hookviz: integrated-gradients: 6 steps a photo, about \d+ s a photo here")) == 1


def test_the_thresholds_decide_what_is_said(photo, tmp_path, monkeypatch, small_intervals):
    monkeypatch.setenv("HOOKVIZ_HEAVY_AFTER", "1e9")  # shown, but not heavy
    result = _run(photo, tmp_path / "out", "--cam", "scorecam")
    assert result.exit_code == 0, result.output
    assert re.search(r"hookviz: scorecam at features\.3: \d+ of \d+ masked passes, about", result.stderr)
    assert "a photo here" not in result.stderr
    for name in ("HEAVY_AFTER", "WORK_SHOWN_AFTER"):  # the defaults, a minute and a few seconds: tiny work says nothing
        monkeypatch.delenv(f"HOOKVIZ_{name}")
    result = _run(photo, tmp_path / "again", "--cam", "scorecam")
    assert result.exit_code == 0 and "masked passes" not in result.stderr


class Heard:
    def __init__(self):
        self.events: list[tuple[str, str, int, int]] = []

    def began(self, work):
        self.events.append(("began", work.label, work.done, work.total))

    def advanced(self, work):
        self.events.append(("advanced", work.label, work.done, work.total))

    def ended(self, work):
        self.events.append(("ended", work.label, work.done, work.total))


def test_explain_prints_nothing_of_its_work_and_tells_a_listener_the_caller_gives(capfd, monkeypatch):
    monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", "1")
    image = torch.rand(3, 16, 16)
    hookviz.explain(tiny_net(), image, layers=["features.3"], cam="scorecam,integrated-gradients", steps=3)
    assert capfd.readouterr() == ("", "")
    heard = Heard()
    with listening(heard):
        hookviz.explain(tiny_net(), image, layers=["features.3"], cam="scorecam,integrated-gradients", steps=3)
    assert capfd.readouterr() == ("", "")
    labels = [label for kind, label, _, _ in heard.events if kind == "began"]
    assert labels == ["scorecam at features.3", "integrated-gradients"]
    steps = [(done, total) for kind, label, done, total in heard.events if label == "integrated-gradients" and kind != "began"]
    # the two ends' scores (the completeness error), then a pass of one row per step, then its end
    assert steps == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5), (5, 5), (5, 5)]


@pytest.mark.slow
def test_smoothed_integrated_gradients_count_noisy_copies_not_each_copys_steps_again(photo, tmp_path, small_intervals):
    """Each noisy copy's integrated gradients used to begin its steps anew on the progress line
    ("2 of 6 steps" once per copy): the line counts the copies, in order, to the last."""
    more = ("--cam", "integrated-gradients", "--steps", "4", "--smooth", "smoothgrad", "--smooth-samples", "3")
    result = _run(photo, tmp_path / "out", *more)
    assert result.exit_code == 0, result.output
    steps = re.findall(r"hookviz: integrated-gradients: (\d+) of 6 steps", result.stderr)
    copies = re.findall(r"hookviz: smoothgrad of integrated-gradients: (\d+) of 3 noisy copies, about \d+ s left", result.stderr)
    assert steps and len(steps) == len(set(steps)), result.stderr  # the image's own steps, once, counting up
    assert [int(done) for done in copies] == [1, 2], result.stderr
