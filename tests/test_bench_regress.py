"""bench/regress.py finds the release to compare with: its tag, else the commit the repository records."""

from __future__ import annotations

import re
import subprocess

from bench import regress


def _newest_version() -> str:
    text = (regress.ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return re.search(r"^## \[(\d+\.\d+\.\d+)\]", text, flags=re.MULTILINE).group(1)


def test_every_release_the_changelog_names_last_has_a_recorded_commit():
    # a release without its commit in bench/releases.txt leaves a copy without tags nothing to compare with
    assert _newest_version() in regress.recorded_releases()


def test_without_the_tag_the_recorded_commit_is_taken(monkeypatch):
    real = regress._git

    def no_tags(*args, check=True):
        if args[:1] == ("rev-parse",) and args[-1].startswith("v"):
            return subprocess.CompletedProcess(args, 1, "", "")
        return real(*args, check=check)

    monkeypatch.setattr(regress, "_git", no_tags)
    version, commit = regress.last_release()
    assert version == _newest_version()
    assert commit == regress.recorded_releases()[version]
    assert re.fullmatch(r"[0-9a-f]{40}", commit)


def test_the_recorded_commit_is_the_one_that_released_it():
    version = _newest_version()
    commit = regress.recorded_releases()[version]
    found = subprocess.run(["git", "-C", str(regress.ROOT), "cat-file", "-t", commit], capture_output=True, text=True)
    if found.returncode != 0:  # a copy without history (a packaged source tree): nothing to check against
        return
    changelog = subprocess.run(
        ["git", "-C", str(regress.ROOT), "show", f"{commit}:CHANGELOG.md"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(rf"^## \[{re.escape(version)}\]", changelog, flags=re.MULTILINE)
    assert (
        f'version = "{version}"'
        in subprocess.run(
            ["git", "-C", str(regress.ROOT), "show", f"{commit}:pyproject.toml"], capture_output=True, text=True, check=True
        ).stdout
    )


def test_a_recorded_release_reads_past_comments(tmp_path, monkeypatch):
    listed = tmp_path / "releases.txt"
    listed.write_text("# VERSION COMMIT\n\n1.2.3 abc123  # the tag was lost\n", encoding="utf-8")
    monkeypatch.setattr(regress, "RELEASES", listed)
    assert regress.recorded_releases() == {"1.2.3": "abc123"}


def test_both_sides_run_with_bytecode_caches_unless_asked_as_is(monkeypatch, tmp_path):
    # PYTHONDONTWRITEBYTECODE=1 made every run compile hookviz from source (7% of the default run's CPU)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cached = regress.bytecode(tmp_path, as_is=False)
    assert "PYTHONDONTWRITEBYTECODE" not in cached and cached["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")
    assert regress.bytecode(tmp_path, as_is=True)["PYTHONDONTWRITEBYTECODE"] == "1"


def test_each_side_runs_its_own_code_only_outside_a_checkout(tmp_path):
    # `python -m` puts the current folder before PYTHONPATH: run from the repository, the old side ran the new code
    import os

    import pytest

    old = tmp_path / "old"
    (old / "hookviz").mkdir(parents=True)
    (old / "hookviz" / "__init__.py").write_text("", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    sides, env = {"new": regress.ROOT, "old": old}, dict(os.environ)
    regress.check_sides(sides, work, env)
    with pytest.raises(SystemExit, match=r"^the old side imports hookviz from .*, not from .*: nothing compared$"):
        regress.check_sides(sides, regress.ROOT, env)
