"""Batched passes keep to one memory budget (``hookviz.budget``): a tiny budget splits them
into more passes and changes no result."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz
from hookviz import UsageError
from hookviz.budget import CAP, RowCost, device_budget, measuring, rows_within
from tests.conftest import tiny_net

from .cli_helpers import hookviz_cli


class Passes:
    """The batch size of each forward pass of ``model``, through a hook of the test's own."""

    def __init__(self, model):
        self.sizes: list[int] = []
        self.model = model

    def __enter__(self):
        self.handle = self.model.register_forward_hook(lambda _m, args, _o: self.sizes.append(len(args[0])))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _explained(monkeypatch, budget: str | None, image, **options):
    if budget is None:
        monkeypatch.delenv("HOOKVIZ_MEMORY_BUDGET", raising=False)
    else:
        monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", budget)
    model = tiny_net().eval()
    with Passes(model) as passes:
        result = hookviz.explain(model, image, layers=["features.3"], **options)
    return result, passes.sizes


def test_integrated_gradients_in_passes_within_a_tiny_budget_equal_one_pass_and_captums(monkeypatch):
    from captum.attr import IntegratedGradients

    image = torch.rand(3, 24, 24, generator=torch.Generator().manual_seed(1))
    whole, whole_passes = _explained(monkeypatch, None, image, cam="integrated-gradients", steps=8)
    chunked, chunked_passes = _explained(monkeypatch, "1", image, cam="integrated-gradients", steps=8)
    # the dry pass, the explained pass, the input and its baseline scored (completeness), then every step at once
    assert whole_passes == [1, 1, 2, 8]
    assert chunked_passes == [1, 1, 1, 1] + [1] * 8  # a budget of one byte: a row a pass
    mine, theirs_whole = chunked.pixel_maps["integrated-gradients"].map, whole.pixel_maps["integrated-gradients"].map
    scale = float(np.abs(theirs_whole).max())
    assert scale > 0
    np.testing.assert_allclose(mine, theirs_whole, rtol=0, atol=1e-6 * scale)
    captum = IntegratedGradients(tiny_net().eval()).attribute(
        image[None], target=whole.target.index, n_steps=8, method="gausslegendre", internal_batch_size=3
    )
    np.testing.assert_allclose(mine, captum[0].detach().numpy(), rtol=0, atol=1e-5 * scale)


@pytest.mark.slow
def test_rescoring_faithfulness_and_sanity_passes_keep_to_a_tiny_budget_with_equal_results(monkeypatch):
    image = torch.rand(3, 20, 20, generator=torch.Generator().manual_seed(2))
    options = dict(cam="scorecam,ablationcam", faithfulness=True, sanity=True)
    whole, whole_passes = _explained(monkeypatch, None, image, **options)
    chunked, chunked_passes = _explained(monkeypatch, "1", image, **options)
    assert max(whole_passes) > 1 and set(chunked_passes) == {1}  # the tail passes of ablation too
    assert len(chunked_passes) > len(whole_passes)
    a, b = whole["features.3"], chunked["features.3"]
    for method in ("scorecam", "ablationcam"):
        np.testing.assert_allclose(b.cams[method], a.cams[method], rtol=1e-6, atol=1e-7)
    ours, theirs = b.trust.to_json(), a.trust.to_json()
    for key in ("deletion_auc", "insertion_auc"):
        assert ours["faithfulness"]["deletion_insertion"][key] == pytest.approx(
            theirs["faithfulness"]["deletion_insertion"][key], abs=1e-6
        )
    assert ours["faithfulness"]["road"]["combined"] == pytest.approx(theirs["faithfulness"]["road"]["combined"], abs=1e-6)
    assert ours["sanity"]["correlations"] == pytest.approx(theirs["sanity"]["correlations"], abs=1e-6)


def test_the_budget_follows_the_device_and_the_variable(monkeypatch):
    monkeypatch.delenv("HOOKVIZ_MEMORY_BUDGET", raising=False)
    assert 0 < device_budget("cpu") <= CAP
    for given, expected in (("64M", 64 << 20), ("2g", 2 << 30), ("1000", 1000), ("512KB", 512 << 10)):
        monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", given)
        assert device_budget("cpu") == expected
    assert rows_within(100, 1000, 32) == 10 and rows_within(10**9, 1000, 32) == 1 and rows_within(1, 10**9, 32) == 32
    monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", "2G")
    assert RowCost(gradient=400, inference=100).rows("cpu", 32, gradients=True) == 32  # 2 GB holds them all
    assert RowCost(gradient=2 << 29, inference=100).rows("cpu", 32, gradients=True) == 2
    assert RowCost(gradient=2 << 29, inference=2 << 30).rows("cpu", 32, gradients=False) == 1


def test_a_rows_cost_is_measured_on_a_pass_and_its_hooks_are_removed():
    model = tiny_net().eval()
    with torch.no_grad(), measuring(model, rows=2, input_row_bytes=3 * 8 * 8 * 4) as measure:
        model(torch.rand(2, 3, 8, 8))
    # one row's outputs: conv 4x8x8, bn 4x8x8, conv 6x4x4, relu twice 6x4x4, pool 6, fc 5 (float32); the
    # in-place ReLU's output is the batch norm's memory
    outputs = 4 * (2 * 4 * 64 + 3 * 6 * 16 + 6 + 5)
    assert measure.cost.gradient == outputs + 2 * 4 * 4 * 64
    assert measure.cost.inference == 2 * 4 * (4 * 64 + 4 * 64)  # the batch norm's input and output, the widest call
    assert all(not m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("given", ["inf", "0", "-5", "1T", "abc", "nan", "1e400K"])
def test_a_budget_variable_that_names_no_size_is_refused_in_one_line_before_the_model_loads(given, photo, tmp_path, monkeypatch):
    """``inf`` failed every image as if the model were at fault (OverflowError); ``0`` and ``-5``
    silently ran one row a pass, ``abc`` and ``1T`` silently took the device's budget."""

    monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", given)
    out = tmp_path / "out"
    args = ["run", str(photo), "--model", "tests.conftest:no_such_factory", "--cam", "integrated-gradients", "--out", str(out)]
    result = hookviz_cli(*args)
    assert result.exit_code == 2 and not out.exists(), result.output
    assert result.stderr.strip().splitlines() == [
        f"hookviz: error: HOOKVIZ_MEMORY_BUDGET={given!r}: a memory budget is a positive number of bytes, or one with "
        "K, M or G (HOOKVIZ_MEMORY_BUDGET=512M); unset it for the device's own"
    ]
    with pytest.raises(UsageError, match="HOOKVIZ_MEMORY_BUDGET"):
        hookviz.explain(tiny_net(), str(photo), cam="integrated-gradients")
