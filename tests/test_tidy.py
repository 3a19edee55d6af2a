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


def _resolves(target: object, attributes: list[str]) -> bool:
    for name in attributes:
        fields = {*getattr(target, "__dataclass_fields__", {}), *getattr(target, "__annotations__", {})}
        if not hasattr(target, name) and name not in fields:
            return False
        target = getattr(target, name, None)
    return True


def test_docstrings_name_only_what_exists():
    """A ``package.module.name`` in a docstring or comment (``store.folders.plan_folders``,
    ``tasks.base.Task``, ``hookviz.errors.UsageError``) names something that module holds:
    modules moved and attributes were renamed, and the docstrings that named them sent a reader
    nowhere. (A bare ``module.name`` is left alone: ``options.out`` is as often a variable's.)"""
    import importlib
    import pkgutil
    import re

    import hookviz

    modules = {info.name: importlib.import_module(info.name) for info in pkgutil.walk_packages(hookviz.__path__, "hookviz.")}
    spelt = {tail: module for name, module in modules.items() for tail in (name, name.removeprefix("hookviz.")) if "." in tail}
    stale = []
    for path in sorted((ROOT / "hookviz").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for dotted in re.findall(r"``([a-z_]+(?:\.\w+)+)(?:\(\))?``", line):
                parts = dotted.split(".")
                heads = [k for k in range(len(parts), 1, -1) if ".".join(parts[:k]) in spelt]
                if heads and not _resolves(spelt[".".join(parts[: heads[0]])], parts[heads[0] :]):
                    stale.append(f"{path.relative_to(ROOT)}:{number}: {dotted}")
    assert stale == [], "\n".join(stale)
