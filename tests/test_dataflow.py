"""Data flow: the channel order of each 4-D tensor, followed through the ops of a pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from hookviz.anatomy.dataflow import ChannelOrders
from hookviz.hooks import HookSet

from .cli_helpers import hookviz_cli
from .conftest import tiny_convnext


def _kinds(model, image) -> dict[str, str | None]:
    """Each module's output order, as ``ChannelOrders`` saw it."""
    kinds = {}
    with HookSet() as hooks, ChannelOrders(model) as orders:
        for path, module in model.named_modules():
            if path:
                hooks.add(module.register_forward_hook(lambda _m, _i, out, path=path: kinds.update({path: orders.kind(out)})))
        model(image)
    return kinds


def test_permutes_mark_the_channels_last_part_of_a_convnext_block():
    kinds = _kinds(tiny_convnext().eval(), torch.randn(1, 3, 32, 32))
    # Every map is 1x8x8x8 (1x8x8x16 after the first Linear): only the ops tell the order.
    assert [kinds["stem"], kinds["block.0"]] == ["nchw", "nchw"]  # convolutions
    assert [kinds[f"block.{i}"] for i in range(1, 6)] == ["nhwc"] * 5  # Permute, LayerNorm, Linear, GELU, Linear
    assert kinds["block.6"] == kinds["block"] == "nchw"  # permuted back
    assert kinds["mixer.out"] is None  # tokens reshaped into a map: no op says which axis is which


def test_a_layer_norm_over_a_map_of_unknown_order_marks_its_last_axis_channels():
    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(4)

        def forward(self, x):
            tokens = x.flatten(2).transpose(1, 2)  # (1, 16, 4)
            grid = tokens.reshape(1, 4, 4, 4)
            return self.norm(grid) + grid  # the sum keeps what its known input says

    model = nn.Sequential(nn.Conv2d(3, 4, 1), Mixer())
    kinds = _kinds(model, torch.randn(1, 3, 4, 4))
    assert kinds == {"0": "nchw", "1.norm": "nhwc", "1": "nhwc"}


def test_any_axis_move_is_followed():
    class Moves(nn.Module):
        def forward(self, x):
            return x.transpose(1, 3), torch.movedim(x, 1, -1), x.mT, x.permute(1, 0, 2, 3)

    model = Moves()
    with ChannelOrders(model) as orders:
        found = [orders.kind(t) for t in model(torch.randn(1, 3, 5, 7))]
    assert found == ["nwhc", "nhwc", "ncwh", None]  # a moved batch axis is no map of one image


def test_the_model_is_left_as_it_was_even_when_it_fails():
    model = tiny_convnext().eval()
    image = torch.randn(1, 3, 32, 32)
    expected = model(image)
    with ChannelOrders(model) as orders:
        assert torch.equal(model(image), expected)
    assert not model._forward_pre_hooks and orders.kind(expected) is None
    with pytest.raises(RuntimeError), ChannelOrders(model):
        model(torch.randn(1, 4, 32, 32))  # the stem takes 3 channels
    assert not model._forward_pre_hooks
    assert not torch.overrides._get_current_function_mode_stack()  # no mode left behind either


class RowSequence(nn.Module):
    """A photo's rows averaged into a sequence, then two Conv1d: their outputs are (N, C, L),
    whose 1x6x16 fits a 3x2 grid of tokens with 16 channels as well."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.conv2 = nn.Conv1d(4, 6, 3, stride=2, padding=1)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        s = self.act(self.conv2(self.act(self.conv(x.mean(2)))))
        return self.fc(s.mean(2))


def row_sequence() -> nn.Module:
    torch.manual_seed(0)
    return RowSequence()


def test_a_conv1d_and_conv3d_output_is_marked_channels_first_of_its_rank():
    kinds = _kinds(row_sequence().eval(), torch.randn(1, 3, 32, 32))
    assert kinds["conv"] == kinds["act"] == kinds["conv2"] == "ncl" and kinds["fc"] is None
    volume = nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(2))
    kinds = _kinds(volume, torch.randn(1, 3, 2, 8, 8))
    assert kinds["0"] == kinds["1"] == "ncdhw" and kinds["2"] is None  # flattened: (N, C, DHW) is not known


def test_a_conv1d_output_is_not_read_as_tokens_on_a_grid(tmp_path):
    """Its 1x6x16 was drawn as a CAM on a 3x2 grid of 6 'tokens' over the photo: silently wrong.
    It is a map of one spatial dimension (16 positions), whose CAM has no place over a photo."""
    import json

    from .conftest import SAMPLES

    out = tmp_path / "out"
    args = ["run", str(SAMPLES / "cat.png"), "--model", "tests.test_dataflow:row_sequence", "--weights", "none"]
    result = hookviz_cli(*args, "--resize", "32", "--layer", "conv2", "--out", out)
    assert result.exit_code == 0, result.output
    layer = json.loads((out / "cat" / "report.json").read_text())["layers"][0]
    assert layer["layout"]["kind"] == "ncl" and layer["cam"]["shape"] == [16], layer
    assert layer["pictures"]["cam"] is None and layer["pictures"]["summary"] == "conv2.summary.png"
    assert "cam picture not drawn: a 1-D map has no place over a 2-D input" in layer["notes"]
