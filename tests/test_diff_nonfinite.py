"""Issue 37, item 4: ``hookviz diff`` on reports holding NaN or infinities (an older or foreign
writer's; Python's json reads them). Every float field of a real report, in the baseline's and in
the new run's, is made NaN, +inf or -inf in turn, one at a time, and the diff must end as the
help promises (exit 0), print no traceback and write a diff.json that is strict JSON."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from .cli_helpers import hookviz_cli, hookviz_run
from .conftest import SAMPLES

BAD = (float("nan"), float("inf"), float("-inf"))


def float_fields(value, path=()):
    """The path of every float in a JSON document, in order."""
    if isinstance(value, float):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from float_fields(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from float_fields(item, (*path, index))


def poked(document, path, value):
    document = json.loads(json.dumps(document))
    inner = document
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return document


def strict(path: Path) -> dict:
    def refuse(constant):
        raise AssertionError(f"{path} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("nonfinite")
    for name in ("base", "new"):
        small = ("--resize", 32, "--crop", 32, "-q")
        result = hookviz_run(SAMPLES / "cat.png", *small, layer="features.3", out=root / name)
        assert result.exit_code == 0, result.output
    return [root / "base", root / "new"]


@pytest.mark.slow
@pytest.mark.parametrize("side", [0, 1], ids=["base", "new"])
def test_nan_or_inf_in_any_float_field_of_a_report_is_compared(runs, side):
    report = runs[side] / "cat" / "report.json"
    original = report.read_text()
    document = json.loads(original)
    fields = list(float_fields(document))
    assert len(fields) > 30  # the layer's statistics, the target, top-5, preprocessing, times...
    failed = {}
    try:
        for path, value in zip(fields, itertools.cycle(BAD)):
            report.write_text(json.dumps(poked(document, path, value)))  # allow_nan: as such a writer did
            # the new run's report lists the diff pictures as they are drawn: its NaN was written back as not JSON
            result = hookviz_cli("diff", *runs, "--pictures", "diff" if side else "none")
            if result.exit_code != 0 or "Traceback" in result.output or "error" in result.output:
                failed[".".join(map(str, path))] = (value, result.output.strip().splitlines()[-1:])
                continue
            strict(runs[1] / "diff.json")
    finally:
        report.write_text(original)
    assert not failed, failed
