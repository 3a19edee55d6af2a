from __future__ import annotations

import pytest
import torchvision
from torch import nn

from hookviz.anatomy.layers import default_layer, resolve_layers, resolve_path, trace
from hookviz.errors import UnknownLayerError

from .cli_helpers import hookviz_cli


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
    out = tmp_path / "out"
    command = ["run", "--model", "tests.conftest:tiny_net", "--weights", "none", "--crop", "1", str(photo), "--out", str(out)]
    result = hookviz_cli(*command)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: every feature map is a single pixel at a 1x1 input, too small to show where; "
        "pass a larger --crop or --resize, or --layer"
    )
    assert not out.exists()


class _Shrinking(nn.Module):
    """One activation module called on a large map, then on a smaller one with more channels."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.down = nn.Conv2d(16, 128, 3, stride=4, padding=1)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.down(self.act(self.stem(x)))).mean(dim=(2, 3))


def shrinking_net() -> nn.Module:
    return _Shrinking()


def test_layers_lists_a_modules_shapes_in_call_order():
    """They were sorted as text: 128x8x8 came first though the first call made 16x32x32."""

    command = ["layers", "--model", "tests.test_layers:shrinking_net", "--weights", "none", "--filter", "act", "--crop", "32"]
    result = hookviz_cli(*command)
    assert result.exit_code == 0, result.output
    row = result.stdout.strip().splitlines()[-1].split()
    assert row[:4] == ["act", "ReLU", "1x16x32x32,", "1x128x8x8"] and row[-1] == "2", result.stdout
