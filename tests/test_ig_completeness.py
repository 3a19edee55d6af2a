"""Integrated gradients' completeness error (report.json's ``pixel_maps.integrated-gradients.figures``)
against captum's convergence delta, and ``--steps auto``'s choice of steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookviz
from hookviz.errors import UsageError
from hookviz.methods.integrated_gradients import AUTO_LADDER, AUTO_TOLERANCE, IGOptions


class Bent(nn.Module):
    """A convolution, then ``sin(sharpness * .)``: the larger ``sharpness``, the more the score
    bends along the path from the baseline (0 bends nothing: a linear model)."""

    def __init__(self, sharpness: float):
        super().__init__()
        torch.manual_seed(21)
        self.sharpness = sharpness
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        y = self.stem(x)
        bent = torch.sin(self.sharpness * y) / self.sharpness if self.sharpness else y
        return self.head(bent.mean(dim=(2, 3)))


def _image(seed: int = 5):
    return torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(seed))


def _figures(model, image, **options) -> tuple[dict, object]:
    result = hookviz.explain(model, image, layers=["stem"], cam="integrated-gradients", **options)
    return result.pixel_maps["integrated-gradients"].figures, result


@pytest.mark.parametrize("steps", [2, 8])
def test_the_completeness_error_is_captums_convergence_delta(steps):
    from captum.attr import IntegratedGradients

    model, image = Bent(30.0).eval(), _image()
    found, result = _figures(model, image, steps=steps)
    with torch.no_grad():
        change = (model(image[None]) - model(torch.zeros(1, 3, 16, 16)))[0, result.target.index].item()
    _, delta = IntegratedGradients(model).attribute(
        image[None], target=result.target.index, n_steps=steps, method="gausslegendre", return_convergence_delta=True
    )
    assert found["steps"] == found["steps_tried"] == steps
    assert found["score_change"] == pytest.approx(change, rel=1e-5)
    assert abs(delta.item()) > 1e-3 * abs(change)  # so few steps miss something: the figure is no rounding noise
    assert abs(found["completeness_error"] - delta.item()) <= 1e-4 * abs(change)
    assert found["map_sum"] == pytest.approx(result.pixel_maps["integrated-gradients"].map.sum(), rel=1e-5)
    assert found["relative_error"] == pytest.approx(abs(delta.item()) / abs(change), rel=1e-3)


def test_steps_auto_takes_few_steps_on_a_straight_path_and_more_on_a_bent_one():
    straight, _ = _figures(Bent(0.0).eval(), _image(), steps="auto")
    assert straight["steps"] == AUTO_LADDER[0] and straight["relative_error"] < 1e-5
    bent, result = _figures(Bent(30.0).eval(), _image(), steps="auto")
    assert bent["steps"] > 2 * AUTO_LADDER[0]
    assert bent["relative_error"] < AUTO_TOLERANCE
    assert bent["steps_tried"] == sum(s for s in AUTO_LADDER if s <= bent["steps"])  # each rung climbed, in turn
    fewer = AUTO_LADDER[AUTO_LADDER.index(int(bent["steps"])) - 1]
    below, _ = _figures(Bent(30.0).eval(), _image(), steps=fewer)
    assert below["relative_error"] >= AUTO_TOLERANCE  # the rung below did not suffice: the fewest that do
    assert result.asked["settings"] == {"integrated-gradients": {"steps": "auto", "ig_baseline": "zero"}}


def test_steps_takes_a_number_its_text_or_auto_and_refuses_other_words():
    assert IGOptions(steps="16").steps == 16 and IGOptions(steps=" Auto ").steps == "auto"
    with pytest.raises(UsageError, match="integrated gradients takes 1 to 1024 steps .*, or auto"):
        IGOptions(steps="many")


@pytest.mark.slow
def test_steps_auto_through_the_command_writes_the_chosen_steps_and_error_into_a_valid_report(photo, tmp_path):
    import json
    from pathlib import Path

    import jsonschema

    from .cli_helpers import hookviz_run

    out = tmp_path / "out"
    result = hookviz_run(
        photo, "--resize", "32", "--crop", "32", "--cam", "integrated-gradients", "--steps", "auto", "--pictures", "none",
        layer="features.3", out=out, catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "photo" / "report.json").read_text())
    schema = json.loads((Path(__file__).parents[1] / "hookviz" / "schemas" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(report)
    found = report["pixel_maps"]["integrated-gradients"]["figures"]
    assert found["steps"] in AUTO_LADDER and found["relative_error"] < AUTO_TOLERANCE
    assert abs(found["map_sum"] - found["score_change"]) == pytest.approx(abs(found["completeness_error"]), rel=1e-6, abs=1e-9)
    assert report["asked"]["target"]["settings"]["integrated-gradients"]["steps"] == "auto"
    refused = hookviz_run(photo, "--cam", "integrated-gradients", "--steps", "many", layer="features.3", out=out)
    assert refused.exit_code != 0 and "--steps many: integrated gradients takes 1 to 1024 steps" in refused.output


@pytest.mark.parametrize(
    ("given", "read", "refused"),
    [
        (" zero , meta = mean", ("zero", {"meta": "mean"}), None),
        ("blur,meta=mean", ("blur", {"meta": "mean"}), None),
        ("zero,blur", None, "two baselines for every input; give one"),
        ("meta=mean,meta=zero", None, "two baselines for input 'meta'; give one"),
        ("zero,=mean", None, "choose zero, blur, mean, or NAME=zero|blur|mean per input"),
    ],
)
def test_baselines_are_read_through_spaces_and_given_once_each(given, read, refused):
    if refused is None:
        assert IGOptions(ig_baseline=given).baselines() == read
        return
    with pytest.raises(UsageError) as caught:
        IGOptions(ig_baseline=given)
    assert str(caught.value) == f"ig_baseline={given!r}: {refused}"
