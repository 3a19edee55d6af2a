"""The checks that keep the code tidy, configured in pyproject.toml: ruff's lint and format,
and mypy on the package (which reads the typed stub, hookviz/__init__.pyi, as the package's
public surface, so a name it declares that its module lacks fails here)."""

from __future__ import annotations

import ast
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
    ``tasks.computation.Task``, ``hookviz.errors.UsageError``) names something that module holds:
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


def _self_attributes(function: ast.AST) -> set[str]:
    """The attributes a method assigns on ``self`` (``self.a = ``, ``self.a, self.b = ``,
    ``self.a += ``, ``object.__setattr__(self, "a", ...)``), in nested functions too."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__setattr__":
            on_self = len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"
            names |= {node.args[1].value} if on_self and isinstance(node.args[1], ast.Constant) else set()
            continue
        else:
            continue
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                    names.add(part.attr)
    return names


def _sizes():
    """(``path:name``, lines) of every function, and (``path:name``, attributes) of every class of the package."""
    functions, classes = [], []
    for path in sorted((ROOT / "hookviz").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((f"{where}:{node.name}", node.end_lineno - node.lineno + 1))
            elif isinstance(node, ast.ClassDef):
                fields = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                methods = [s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
                classes.append((f"{where}:{node.name}", len(fields.union(*map(_self_attributes, methods)))))
    return functions, classes


def test_no_function_is_over_60_lines_and_no_class_over_25_attributes():
    """A function counts from its ``def`` to its last line (its signature is part of what a
    reader takes in); a class's attributes are its annotated fields (a dataclass's) and every
    attribute its methods assign on ``self``. ``Run`` had 38 and tracked its phase in a string."""
    functions, classes = _sizes()
    long = [f"{name}: {lines} lines" for name, lines in functions if lines > 60]
    large = [f"{name}: {count} attributes" for name, count in classes if count > 25]
    assert long + large == []
