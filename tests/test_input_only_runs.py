"""A run of methods that map the input alone (issue 42 item 2): no layer is recorded unless one
is named, and the run makes only the passes those methods need."""

from __future__ import annotations

import json

import numpy as np
import torch

import hookviz
from tests.cli_helpers import hookviz_run
from tests.conftest import tiny_net


def test_an_input_method_alone_records_no_layer_and_its_files_are_the_named_layers_runs(photo, tmp_path):
    alone = hookviz_run(photo, "--cam", "saliency", out=tmp_path / "alone")
    named = hookviz_run(photo, "--cam", "saliency", layer="features.3", out=tmp_path / "named")
    assert alone.exit_code == 0 and named.exit_code == 0, alone.output + named.output
    assert "no --layer given: no layer recorded, as saliency maps the input" in alone.output
    files = sorted(path.name for path in (tmp_path / "alone" / "photo").iterdir())
    assert files == ["fingerprint.npz", "input.jpg", "pixel_maps.png", "report.json"]
    report = json.loads((tmp_path / "alone" / "photo" / "report.json").read_text())
    kept = json.loads((tmp_path / "named" / "photo" / "report.json").read_text())
    assert report["layers"] == [] and len(kept["layers"]) == 1
    assert "· no layer ·" in (tmp_path / "alone" / "index.html").read_text()  # the page's heading, not "layers ·"
    assert report["pixel_maps"] == kept["pixel_maps"] and report["top5"] == kept["top5"]
    for name in ("pixel_maps.png", "input.jpg"):  # the map is the same with or without a layer beside it
        assert (tmp_path / "alone" / "photo" / name).read_bytes() == (tmp_path / "named" / "photo" / name).read_bytes()


def test_an_input_method_alone_makes_one_pass_with_a_graph_where_a_layer_beside_it_made_two(photo):
    model = tiny_net()
    graphs: list[bool] = []
    hook = model.register_forward_pre_hook(lambda _module, _args: graphs.append(torch.is_grad_enabled()))
    try:
        alone = hookviz.explain(model, str(photo), cam="saliency")
        passes = list(graphs)
        graphs.clear()
        named = hookviz.explain(model, str(photo), cam="saliency", layers=["features.3"])
    finally:
        hook.remove()
    assert alone.layers == () and passes.count(True) == 1  # saliency's own; the prediction's pass keeps no graph
    assert graphs.count(True) == 2  # the recorded layer's pass, and saliency's
    assert np.array_equal(alone.pixel_maps["saliency"].map, named.pixel_maps["saliency"].map)


def test_a_method_that_takes_a_layers_cam_still_gets_the_default_layer(photo):
    found = hookviz.explain(tiny_net(), str(photo), cam="guided-gradcam")
    assert len(found.layers) == 1 and found.layer_choice is not None and "input" not in found.layer_choice
    assert found.pixel_maps["guided-gradcam"].map is not None
