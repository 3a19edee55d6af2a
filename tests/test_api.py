"""The public API: what ``import hookviz`` offers, lazily, and what type checkers see of it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import hookviz

STUB = Path(hookviz.__file__).with_suffix(".pyi")


def test_the_typed_stub_declares_every_public_name_from_where_it_is_loaded():
    declared = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.asname == alias.name  # re-exported, so checkers treat it as public
                declared[alias.name] = node.module
    lazy = {name: module for name, (module, _) in hookviz._LAZY.items()}
    assert declared == lazy
    assert set(hookviz.__all__) == {"__version__", *lazy}


def test_every_public_name_loads_on_first_use():
    for name, (module, attribute) in hookviz._LAZY.items():
        assert getattr(hookviz, name) is getattr(importlib.import_module(f"hookviz.{module}"), attribute)
