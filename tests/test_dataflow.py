"""Data flow: the channel order of each 4-D tensor, followed through the ops of a pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from hookviz.anatomy.dataflow import ChannelOrders
from hookviz.hooks import HookSet

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
