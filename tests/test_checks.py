from __future__ import annotations

from dataclasses import replace

import pytest

from hookviz import explain
from hookviz.errors import UsageError
from hookviz.explaining.checks import parse_checks, run_checks


@pytest.fixture(scope="module")
def explanation():
    from .conftest import SAMPLES, tiny_net

    return explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["features.3"], cam="none")


def test_healthy_run_passes(explanation):
    assert run_checks(explanation, ("nonfinite", "dead", "zero-grad")) == []


def _with(explanation, **stats_changes):
    layer = explanation.layers[0]
    stats = {key: (None if value is None else {**layer.stats[key], **value}) for key, value in stats_changes.items()}
    return replace(explanation, layers=(replace(layer, stats={**layer.stats, **stats}),))


def test_each_check_names_the_layer(explanation):
    broken = _with(explanation, output={"nonfinite": 3}, grad_output=None)
    findings = run_checks(broken, ("nonfinite", "zero-grad"))
    assert {(f.check, f.layer) for f in findings} == {("nonfinite", "features.3"), ("zero-grad", "features.3")}
    assert "3 NaN/Inf values" in findings[0].detail
    dead = _with(explanation, output={"zero_fraction": 1.0})
    assert [f.check for f in run_checks(dead, ("dead",))] == ["dead"]
    half = _with(explanation, output={"zero_fraction": 0.5})
    assert run_checks(half, ("dead",)) == []
    assert [f.check for f in run_checks(half, ("dead",), dead_fraction=0.3)] == ["dead"]
    flat = _with(explanation, grad_output={"zero_fraction": 1.0})
    assert [f.detail for f in run_checks(flat, ("zero-grad",))] == ["grad_output is all zeros"]


def test_stats_come_from_the_tensors(explanation):
    layer = explanation.layers[0]
    assert layer.stats["output"]["zero_fraction"] == float((layer.output == 0).mean())


def test_unknown_check():
    with pytest.raises(UsageError, match="zero-grad"):
        parse_checks("zero_grad")


def test_drift_is_checked_once_per_run_against_a_baseline_not_per_image(explanation):
    assert parse_checks("nonfinite, drift") == ("nonfinite", "drift")
    assert run_checks(explanation, ("drift",)) == []
    with pytest.raises(UsageError, match="choose from nonfinite, dead, zero-grad, drift"):
        parse_checks("drfit")
