from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hookviz.checks import parse_checks, run_checks
from hookviz.errors import UsageError
from hookviz.explaining import explain


@pytest.fixture(scope="module")
def explanation():
    from .conftest import SAMPLES, tiny_net

    return explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["features.3"], cam="none")


def test_healthy_run_passes(explanation):
    assert run_checks(explanation, ("nonfinite", "dead", "zero-grad")) == []


def test_each_check_names_the_layer(explanation):
    layer = explanation.layers[0]
    broken = replace(
        explanation,
        layers=(replace(layer, output=np.where(layer.output > 0, np.nan, 0.0), grad_output=None),),
    )
    findings = run_checks(broken, ("nonfinite", "zero-grad"))
    assert {(f.check, f.layer) for f in findings} == {("nonfinite", "features.3"), ("zero-grad", "features.3")}
    dead = replace(explanation, layers=(replace(layer, output=np.zeros_like(layer.output)),))
    assert [f.check for f in run_checks(dead, ("dead",))] == ["dead"]
    half = replace(explanation, layers=(replace(layer, output=np.where(layer.output > layer.output.mean(), 1.0, 0.0)),))
    assert run_checks(half, ("dead",)) == []
    assert [f.check for f in run_checks(half, ("dead",), dead_fraction=0.3)] == ["dead"]


def test_unknown_check():
    with pytest.raises(UsageError, match="zero-grad"):
        parse_checks("zero_grad")
