"""The checks that keep the code tidy, configured in pyproject.toml: ruff's lint and format,
and mypy on the package (which reads the typed stub, hookviz/__init__.pyi, as the package's
public surface, so a name it declares that its module lacks fails here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT


def _check(*command: str, timeout: int = 600) -> None:
    pytest.importorskip(command[0])
    completed = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]


def test_ruff_finds_nothing_to_say():
    _check("ruff", "check", "hookviz", "tests")


def test_the_code_is_as_ruff_formats_it():
    _check("ruff", "format", "--check", "hookviz", "tests")


@pytest.mark.slow
def test_mypy_passes_on_the_package_and_its_typed_stub():
    _check("mypy", "hookviz")
