"""What ``--faithfulness`` says when its curves cannot rank the maps: a saturated probability
(its deletion curve stays at 1 until every pixel is gone), and maps whose areas tie; and that a
real model's curves, which do rank them, are still ranked (EfficientNet-Lite0's own weights)."""

from __future__ import annotations

import json

import pytest
import torch

import hookviz

from .cli_helpers import hookviz_cli
from .conftest import TinyNet
from .test_trust import run_cli


class _Saturated(TinyNet):
    """TinyNet whose class 0 leads by 60 logits whatever the photo: its softmax probability is
    1.0 in float32 before and after any pixel is deleted; the maps are still TinyNet's."""

    def forward(self, x):
        return super().forward(x) + torch.tensor([60.0, 0.0, 0.0, 0.0, 0.0])


def saturated_net() -> torch.nn.Module:
    """Factory used as ``--model tests.test_faithfulness:saturated_net``."""
    torch.manual_seed(0)
    return _Saturated()


class _Indifferent(TinyNet):
    """TinyNet's logits scaled down until float32 loses them next to a constant: its
    probabilities are flat (about 0.2 each) and never move, so every map's curves are one."""

    def forward(self, x):
        return super().forward(x) * 1e-9 + torch.tensor([0.5, 0.0, 0.0, 0.0, 0.0])


def indifferent_net() -> torch.nn.Module:
    """Factory used as ``--model tests.test_faithfulness:indifferent_net``."""
    torch.manual_seed(0)
    return _Indifferent()


def test_a_saturated_probability_is_said_and_names_no_winner(tmp_path):
    result = run_cli(tmp_path, "--model", "tests.test_faithfulness:saturated_net", "--cam", "gradcam,layercam", "--faithfulness")
    assert result.exit_code == 0, result.output
    trust = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["layers"][0]["trust"]
    for measured in (trust, trust["methods"]["layercam"]):
        curves = measured["faithfulness"]["deletion_insertion"]
        assert min(curves["deletion"][:-1]) >= 0.999 and curves["saturated"] is True
    (summary,) = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]["summary"]
    assert "the target's probability is saturated" in summary and "no map is ranked" in summary
    assert "fastest" not in summary and "fastest" not in result.stderr
    notes = [line for line in result.stderr.splitlines() if "saturated" in line and line.startswith("hookviz: note: ")]
    assert any("features.3 (gradcam, layercam): faithfulness" in line for line in notes), result.stderr


def test_the_figure_says_a_saturated_probability_and_its_tie():
    methods = ("gradcam", "layercam")
    result = hookviz.explain(
        saturated_net(), torch.rand(3, 24, 24), layers=["features.3"], cam=",".join(methods), faithfulness=True
    )
    trust = result["features.3"].trust
    areas = [trust.deletion.deletion_auc, trust.methods["layercam"].deletion.deletion_auc]
    assert areas[0] == areas[1]
    deletion = result.figure("features.3", "faithfulness").axes[0]
    assert [text.get_text() for text in deletion.get_legend().get_texts()] == [
        f"gradcam, area {areas[0]:.3f}, ties layercam, saturated",
        f"layercam, area {areas[1]:.3f}, ties gradcam, saturated",
    ]
    assert any("saturated" in text.get_text() and "no information" in text.get_text() for text in deletion.texts)
    alone = hookviz.explain(saturated_net(), torch.rand(3, 24, 24), layers=["features.3"], faithfulness=True)
    curves = alone.figure("features.3", "faithfulness").axes[0]
    assert any("saturated" in text.get_text() for text in curves.texts)


def test_maps_whose_areas_tie_name_no_winner(tmp_path):
    result = run_cli(
        tmp_path, "--model", "tests.test_faithfulness:indifferent_net", "--cam", "gradcam,layercam", "--faithfulness"
    )
    assert result.exit_code == 0, result.output
    trust = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]
    assert [entry["saturated"] for entry in trust["maps"]] == [0, 0]
    (summary,) = trust["summary"]
    assert summary.startswith("faithfulness: on this photo, ") and " tie (mean deletion area " in summary
    named = summary.split(" tie (")[0]
    assert "gradcam at features.3" in named and "layercam at features.3" in named
    assert "fastest" not in summary


@pytest.mark.slow
def test_efficientnet_lite0_on_coffee_is_ranked_without_a_saturation_note(tmp_path, coffee):
    """Real weights (espresso at about 0.96): the curves fall, nothing is saturated, the run
    names the map that deletes the class fastest, and the legend tells the areas apart."""

    out = tmp_path / "out"
    args = ["run", str(coffee), "--model", "efficientnet_lite0", "--weights", "DEFAULT", "--cam", "gradcam,layercam"]
    result = hookviz_cli(*args, "--faithfulness", "--workers", "1", "--pictures", "none", "--out", out)
    assert result.exit_code == 0, result.output
    trust = json.loads((out / "coffee" / "report.json").read_text())["layers"][0]["trust"]
    curves = trust["faithfulness"]["deletion_insertion"]
    assert 0.9 < curves["deletion"][0] < 0.99 and curves["deletion"][-2] < 0.5 and curves["saturated"] is False
    assert "saturated" not in result.stderr
    maps = json.loads((out / "run.json").read_text())["trust"]["maps"]
    assert [entry["saturated"] for entry in maps] == [0, 0] and maps[0]["deletion_auc"] < maps[1]["deletion_auc"]
    (summary,) = json.loads((out / "run.json").read_text())["trust"]["summary"]
    assert summary.startswith(f"faithfulness: on this photo, {maps[0]['method']} at ") and "deletes the class fastest" in summary


def test_a_resumed_run_ranks_the_images_it_skipped_as_a_fresh_run_does(tmp_path):
    """run.json's ranking and sanity counts were of the newly done images alone: a resumed run
    ranked one photo of two (layercam's area 0.2627, where the fresh run's mean was 0.2611)."""

    from .conftest import SAMPLES

    def invoke(args):
        return hookviz_cli(*args)

    cat, coffee = str(SAMPLES / "cat.png"), str(SAMPLES / "coffee.png")
    options = ["--model", "tests.conftest:tiny_net", "--weights", "none", "--resize", "48", "--layer", "features.3"]
    options += ["--cam", "gradcam,layercam", "--faithfulness", "--sanity", "--pictures", "none"]
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    assert invoke(["run", cat, coffee, *options, "--out", str(fresh)]).exit_code == 0
    assert invoke(["run", cat, *options, "--out", str(resumed)]).exit_code == 0
    again = invoke(["run", cat, coffee, *options, "--skip-existing", "--out", str(resumed)])
    assert again.exit_code == 0, again.output
    ranked = [json.loads((folder / "run.json").read_text())["trust"] for folder in (fresh, resumed)]
    statuses = [image["status"] for image in json.loads((resumed / "run.json").read_text())["images"]]
    assert sorted(statuses) == ["done", "skipped"]
    for theirs, ours in zip(ranked[0]["maps"], ranked[1]["maps"], strict=True):
        assert {k: v for k, v in ours.items() if k != "sanity"} == pytest.approx(
            {k: v for k, v in theirs.items() if k != "sanity"}
        )
        assert ours["sanity"] == pytest.approx(theirs["sanity"]) and ours["images"] == ours["sanity"]["images"] == 2
    assert ranked[1]["summary"] == ranked[0]["summary"]
