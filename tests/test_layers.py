from __future__ import annotations

import pytest
import torchvision

from hookviz.anatomy.layers import default_layer, resolve_layers, resolve_path, trace
from hookviz.errors import UnknownLayerError


@pytest.fixture(scope="module")
def resnet50():
    return torchvision.models.resnet50(weights=None).eval()


def test_negative_index_resolves_to_canonical_name(resnet50):
    spec = resolve_path(resnet50, "layer3.-1")
    assert (spec.path, spec.module_type, spec.call) == ("layer3.5", "Bottleneck", None)
    assert resolve_path(resnet50, "layer3.5.relu:1").call == 1
    assert resolve_path(resnet50, "layer1.0.downsample.-2").path == "layer1.0.downsample.0"


def test_unknown_path_is_one_line_with_suggestions(resnet50):
    with pytest.raises(UnknownLayerError) as error:
        resolve_path(resnet50, "layer3.9")
    message = str(error.value)
    assert "\n" not in message and "layer3" in message and "hookviz.list_layers(model)" in message
    assert message.startswith("layers='layer3.9': ")  # named as a Python caller wrote it
    with pytest.raises(UnknownLayerError, match="layer4"):
        resolve_path(resnet50, "layr4")


def test_glob_and_type_select_several(resnet50):
    specs = resolve_layers(resnet50, ["layer*.0.conv2"])
    assert [s.path for s in specs] == [f"layer{i}.0.conv2" for i in range(1, 5)]
    convs = resolve_layers(resnet50, types=["Conv2d"])
    assert len(convs) == 53 and all(s.module_type == "Conv2d" for s in convs)
    with pytest.raises(UnknownLayerError, match="Conv2d"):
        resolve_layers(resnet50, types=["Conv2D"])


def test_default_layer_is_the_last_spatial_map(resnet50, lite0):
    spec, reason = default_layer(resnet50)
    assert spec.path == "layer4" and "spatial feature map" in reason
    spec, _ = default_layer(lite0.module)
    assert (spec.path, spec.call) == ("_swish", 1)


def test_trace_lists_shapes_params_and_calls(resnet50):
    rows = {r.path: r for r in trace(resnet50)}
    assert rows["layer3.5"].output_shapes == ((1, 1024, 14, 14),)
    assert rows["layer3.5.relu"].calls == 3
    assert rows["fc"].parameters == 2048 * 1000 + 1000


def test_a_crop_too_small_for_any_map_names_the_crop_not_the_model(photo, tmp_path):
    from typer.testing import CliRunner

    from hookviz.cli import app

    out = tmp_path / "out"
    command = ["run", "--model", "tests.conftest:tiny_net", "--weights", "none", "--crop", "1", str(photo), "--out", str(out)]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: every feature map is a single pixel at a 1x1 input, too small to show where; "
        "pass a larger --crop or --resize, or --layer"
    )
    assert not out.exists()
