"""bench/loops.py runs both sides of a comparison and prints their ratio (it once failed at its
first command, when bench/regress.py's ``measure`` took a working folder and loops.py gave none)."""

from __future__ import annotations

import sys

from bench import loops


def test_a_comparison_runs_both_sides_in_turn_and_prints_the_ratio(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(loops.TARGETS, "tiny", 1.0)
    env = loops.environment(tmp_path, as_is=False)
    loop = [sys.executable, "-c", "import pathlib, sys; pathlib.Path(sys.argv[1]).mkdir()", "{out}"]
    loops.compare("tiny", "a folder made, against hookviz run --help", loop, ["run", "--help"], tmp_path, 1, env)
    printed = capsys.readouterr().out
    assert "tiny: a folder made" in printed
    assert "loop/hookviz, median of 1 pairs" in printed
    assert (tmp_path / "out-tiny-loop").is_dir()  # the loop's {out} was filled in
