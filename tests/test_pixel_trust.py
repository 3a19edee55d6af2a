"""The trust measures of the input methods' maps (``hookviz.trust.pixel_trust``): each map
reduced to |sum over channels| as quantus reduces it, its deletion curve equal to quantus's
own ``PixelFlipping`` on the same map and model, its randomisation check's last step equal to
scipy's Spearman correlation with the map of a wholly random copy made by hand, a run of
only input methods measured through the command (report.json, the schema, run.json's
ranking, the pictures), and a map that cannot be measured named in a note."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hookviz
from hookviz.trust.pixel_trust import INPUT_LAYER, relevance
from tests.conftest import tiny_net
from tests.test_trust import run_cli

ROOT = Path(__file__).resolve().parent.parent


def test_relevance_is_the_absolute_value_of_the_sum_over_channels():
    a = np.random.default_rng(0).normal(size=(3, 5, 7)).astype(np.float32)
    assert np.allclose(relevance(a), np.abs(a[0] + a[1] + a[2]), atol=1e-6)
    assert relevance(a).shape == (5, 7) and relevance(a).dtype == np.float32


@pytest.mark.parametrize("method", ["guided-backprop", "integrated-gradients"])
def test_deletion_of_an_input_map_equals_quantus_pixel_flipping(method):
    """quantus's ``PixelFlipping`` (baseline 0, ``features_in_step`` = torch-cam's step over
    the 3 channels of a position) on the run's own relevance map gives the deletion curve's
    points after the first, and its area is the trapezoid over them. 12x12: quantus wants
    the positions (144) a multiple of its step (3 x 8), and torch-cam's step is ceil(144 / 20) = 8."""
    quantus = pytest.importorskip("quantus")
    model, image = tiny_net().eval(), torch.rand(3, 12, 12, generator=torch.Generator().manual_seed(3))
    result = hookviz.explain(model, image, layers=["features.3"], cam=method, faithfulness=True)
    measured = result.pixel_maps[method].trust.deletion
    a = relevance(result.pixel_maps[method].map)
    positions, step = a.size, -(-a.size // 20)
    x = result.image.tensor[None].numpy()
    metric = quantus.PixelFlipping(
        features_in_step=3 * step, perturb_baseline=0.0, disable_warnings=True, display_progressbar=False
    )
    flipped = metric(
        model=model, x_batch=x, y_batch=np.array([result.target.index]), a_batch=a[None, None], device="cpu", softmax=True
    )
    assert np.allclose(measured.deletion[1:], flipped[0], atol=1e-5)
    with torch.no_grad():
        first = torch.softmax(model(torch.from_numpy(x)), 1)[0, result.target.index].item()
    counts = [*range(0, positions, step), positions]
    assert np.isclose(measured.deletion_auc, np.trapezoid([first, *flipped[0]], np.array(counts) / positions), atol=1e-5)


def test_the_randomisation_check_of_an_input_map_ends_at_a_wholly_random_copy():
    """The last step's correlation is scipy's Spearman between the relevance map and the map
    by a copy whose every layer was re-initialised, output end first, under the check's seed."""
    from scipy.stats import spearmanr

    from hookviz.trust.sanity import parametrised_modules

    model, image = tiny_net().eval(), torch.rand(3, 24, 24, generator=torch.Generator().manual_seed(4))
    result = hookviz.explain(model, image, layers=["features.3"], cam="guided-backprop", sanity=True)
    checked = result.pixel_maps["guided-backprop"].trust.sanity
    random = copy.deepcopy(model)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        for _, module in reversed(parametrised_modules(random)):
            module.reset_parameters()
    again = hookviz.explain(random, image, layers=["features.3"], cam="guided-backprop", target=str(result.target.index))
    expected = spearmanr(
        relevance(result.pixel_maps["guided-backprop"].map).ravel(), relevance(again.pixel_maps["guided-backprop"].map).ravel()
    )
    assert checked.layers == ("fc", "features.3", "features.1", "features.0")
    assert np.isclose(checked.final, expected.statistic, atol=1e-6)
    assert np.allclose(checked.maps[0], relevance(result.pixel_maps["guided-backprop"].map))


def test_a_run_of_only_input_methods_is_measured_through_the_command(tmp_path):
    """No refusal: report.json keeps each input map's trust (valid against the schema),
    run.json ranks them at the input, and each image gets the input maps' trust pictures."""
    import jsonschema

    result = run_cli(tmp_path, "--faithfulness", "--sanity", "--cam", "guided-backprop,integrated-gradients", "--pictures", "cam")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "cat"
    report = json.loads((folder / "report.json").read_text())
    schema = json.loads((ROOT / "hookviz" / "schemas" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(report)
    for method in ("guided-backprop", "integrated-gradients"):
        trust = report["pixel_maps"][method]["trust"]
        assert 0 <= trust["faithfulness"]["deletion_insertion"]["deletion_auc"] <= 1
        assert trust["sanity"]["final_correlation"] is None or -1 <= trust["sanity"]["final_correlation"] <= 1
    assert {"pixel_maps.faithfulness.png", "pixel_maps.sanity.png"} <= set(report["files"])
    assert (folder / "pixel_maps.faithfulness.png").stat().st_size > 0
    ranked = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]
    layers = {(entry["method"], entry["layer"]) for entry in ranked["maps"]}
    assert layers == {("guided-backprop", INPUT_LAYER), ("integrated-gradients", INPUT_LAYER)}
    assert all(entry["resolution"] == "input" for entry in ranked["maps"])
    assert "at the input" in ranked["summary"][0]


def test_the_tally_reads_input_maps_back_from_report_json(tmp_path):
    """``--skip-existing``'s path: the report's input maps count as a fresh run counts them."""
    from hookviz.store.report_records import read_report
    from hookviz.trust.tally import TrustTally

    assert run_cli(tmp_path, "--faithfulness", "--cam", "gradcam,guided-backprop", "--pictures", "none").exit_code == 0
    tally = TrustTally()
    tally.add_report(read_report(tmp_path / "out" / "cat" / "report.json"))
    fresh = json.loads((tmp_path / "out" / "run.json").read_text())["trust"]
    assert tally.to_json() == fresh


def test_an_input_map_that_cannot_be_measured_gets_a_note():
    """guided Grad-CAM needs a layer's map; at ``fc`` there is none, so it is named, not left out."""
    result = hookviz.explain(
        tiny_net(), torch.rand(3, 24, 24), layers=["fc"], cam="guided-gradcam,guided-backprop", faithfulness=True
    )
    assert result.pixel_maps["guided-backprop"].trust.deletion is not None
    assert result.pixel_maps["guided-gradcam"].trust is None
    assert any(note.startswith(f"{INPUT_LAYER} (guided-gradcam): not measured: no map") for note in result.notes), result.notes


def test_input_maps_beside_a_layer_method_are_measured_too():
    result = hookviz.explain(tiny_net(), torch.rand(3, 24, 24), layers=["features.3"], cam="gradcam,guided-backprop", sanity=True)
    assert result["features.3"].trust.sanity is not None
    assert result.pixel_maps["guided-backprop"].trust.sanity is not None


def test_the_input_trust_pictures_draw_every_input_method():
    from hookviz.render.kinds import faithfulness, sanity

    image = torch.rand(3, 24, 24)
    methods = ("guided-backprop", "integrated-gradients")
    result = hookviz.explain(tiny_net(), image, layers=["features.3"], cam=",".join(methods), faithfulness=True, sanity=True)
    curves = faithfulness.input_figure(result)
    deletion = curves.axes[0]
    assert [line.get_label().split(",")[0] for line in deletion.get_lines()] == list(methods)
    for line, method in zip(deletion.get_lines(), methods):
        assert np.allclose(line.get_ydata(), result.pixel_maps[method].trust.deletion.deletion)
    rows = sanity.input_figure(result)
    titles = [ax.get_title() for ax in rows.axes]
    assert [t for t in titles if t.endswith(": original")] == [f"{method}: original" for method in methods]
