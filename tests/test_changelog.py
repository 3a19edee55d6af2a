"""A version people can refer to: one number in the package, the project file, the command
and the changelog's newest release."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest

import hookviz

from .cli_helpers import hookviz_cli

ROOT = Path(__file__).resolve().parent.parent
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def test_the_command_prints_the_package_version():
    result = hookviz_cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"hookviz {hookviz.__version__}"


def test_the_project_file_has_the_package_version():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["version"] == hookviz.__version__


def test_the_changelog_lists_each_release_newest_first_ending_with_this_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text and "Keep a Changelog" in text
    releases = RELEASE.findall(text)
    assert releases[0][0] == hookviz.__version__
    versions = [tuple(map(int, version.split("."))) for version, _ in releases]
    dates = [date.fromisoformat(day) for _, day in releases]
    assert versions == sorted(versions, reverse=True) and dates == sorted(dates, reverse=True)
    for section in RELEASE.split(text)[3::3]:
        headings = re.findall(r"^### (\w+)$", section, re.M)
        assert headings and set(headings) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
