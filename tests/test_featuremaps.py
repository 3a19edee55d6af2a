from __future__ import annotations

import numpy as np
import torch

from hookviz.anatomy.featuremaps import as_feature_map, patch_grid


def test_patch_grid_follows_the_input_aspect():
    assert patch_grid(196, (224, 224)) == (14, 14)
    assert patch_grid(16 * 12, (256, 192)) == (16, 12)
    assert patch_grid(197, (224, 224)) is None


def test_layouts():
    assert as_feature_map(torch.zeros(2, 2048, 7, 7), (224, 224)).shape == (2, 2048, 7, 7)
    assert as_feature_map(torch.zeros(2, 3, 224, 224), (224, 224)).shape == (2, 3, 224, 224)
    assert as_feature_map(torch.zeros(2, 7, 7, 768), (224, 224)).shape == (2, 768, 7, 7)
    assert as_feature_map(np.zeros((1, 197, 768)), (224, 224)).shape == (1, 768, 14, 14)
    assert as_feature_map(torch.zeros(2, 1000), (224, 224)) is None


def test_class_token_is_dropped_and_values_land_on_the_grid():
    tokens = torch.arange(197 * 2, dtype=torch.float32).reshape(1, 197, 2)
    grid = as_feature_map(tokens, (224, 224))
    assert grid[0, 0, 0, 0] == tokens[0, 1, 0]  # the first patch, not the class token
    assert grid[0, 1, 0, 1] == tokens[0, 2, 1]
    assert grid[0, 0, 1, 0] == tokens[0, 15, 0]


# ----------------------------------------------------------------------------- declared layouts

from hookviz.anatomy.featuremaps import DeclaredLayout, Layout, layout_of  # noqa: E402

REG4 = DeclaredLayout(prefix=4, patch=(16, 16), strides=(16,), origin="timm: num_prefix_tokens=4")
DISTILLED = DeclaredLayout(prefix=2, patch=(16, 16), strides=(16,))


def test_register_tokens_are_dropped_as_declared_where_counting_fails():
    tokens = torch.arange(260 * 3, dtype=torch.float32).reshape(1, 260, 3)  # 4 registers + 16x16 patches
    assert layout_of(tokens.shape, (256, 256)) is None  # 260 or 259 tokens: no grid fits the count
    assert layout_of(tokens.shape, (256, 256), REG4) == Layout("tokens", 4, (16, 16), basis="declared")
    grid = as_feature_map(tokens, (256, 256), REG4)
    assert grid.shape == (1, 3, 16, 16)
    assert torch.equal(grid[0, :, 0, 0], tokens[0, 4])  # the first patch, not a register
    assert torch.equal(grid[0, :, 1, 0], tokens[0, 4 + 16])


def test_distillation_token_is_dropped_too():
    assert layout_of((1, 198, 192), (224, 224)) is None
    assert layout_of((1, 198, 192), (224, 224), DISTILLED) == Layout("tokens", 2, (14, 14), basis="declared")
    # The patch embedding's own output holds the patch tokens alone.
    assert layout_of((1, 196, 192), (224, 224), DISTILLED) == Layout("tokens", 0, (14, 14), basis="declared")


def test_a_class_token_model_gets_the_same_layout_declared_or_guessed():
    vit = DeclaredLayout(prefix=1, patch=(16, 16))
    guessed, declared = layout_of((1, 197, 8), (224, 224)), layout_of((1, 197, 8), (224, 224), vit)
    assert (guessed.kind, guessed.prefix, guessed.grid) == (declared.kind, declared.prefix, declared.grid)
    assert guessed.to_json()["basis"] == "guessed" and declared.to_json()["basis"] == "declared"


def test_the_patch_grid_follows_the_input_and_rounds_up_when_the_model_pads():
    dynamic = DeclaredLayout(prefix=1, patch=(16, 16))
    assert dynamic.patch_grid((96, 64)) == (6, 4)
    assert layout_of((1, 25, 8), (96, 64), dynamic) == Layout("tokens", 1, (6, 4), basis="declared")
    padded = DeclaredLayout(prefix=1, patch=(16, 16), pad=True)
    assert padded.patch_grid((200, 200)) == (13, 13)
    assert layout_of((1, 170, 8), (200, 200), padded).grid == (13, 13)


def test_strides_tell_channels_last_from_channels_first():
    convnext = DeclaredLayout(strides=(4, 8, 16, 32))
    assert layout_of((1, 2, 2, 320), (64, 64), convnext) == Layout("nhwc", basis="declared")
    assert layout_of((1, 320, 2, 2), (64, 64), convnext) == Layout("nchw", basis="declared")
    # 16 channels on a 16x16 map: both readings fit the strides. The ops that made it decide,
    # else a declared format; with neither, the map is ambiguous, never guessed.
    assert layout_of((1, 16, 16, 16), (64, 64), convnext) == Layout("ambiguous", basis="undecided")
    assert layout_of((1, 16, 16, 16), (64, 64), convnext, flow="nhwc") == Layout("nhwc", basis="data flow")
    swin = DeclaredLayout(strides=(4, 8, 16, 32), channels_last=True)
    assert layout_of((1, 16, 16, 16), (64, 64), swin) == Layout("nhwc", basis="declared")
    # Swin's patch embedding is a convolution: its data flow outranks the model-wide format.
    assert layout_of((1, 16, 16, 16), (64, 64), swin, flow="nchw") == Layout("nchw", basis="data flow")


def test_what_the_declaration_does_not_cover_is_guessed():
    swin = DeclaredLayout(patch=(4, 4), strides=(4, 8, 16, 32), channels_last=True)
    windows = layout_of((16, 49, 96), (224, 224), swin)  # window attention: 16 windows of 7x7
    assert windows == Layout("tokens", 0, (7, 7)) and not windows.declared
    assert layout_of((1, 3, 224, 224), (224, 224), swin) == Layout("nchw")  # the image itself
    assert layout_of((1, 1000), (224, 224), swin) is None


# ----------------------------------------------------------------------------- channels last without a declaration


def test_a_map_whose_side_equals_its_channels_is_ambiguous_unless_its_data_flow_says():
    # ConvNeXt's first block at 384 pixels: 96 channels on a 96x96 map, either way round.
    assert layout_of((1, 96, 96, 96), (384, 384)) == Layout("ambiguous", basis="undecided")
    assert layout_of((1, 64, 56, 64), (224, 224)).kind == "ambiguous"  # W == C: 64x56 or 56x64 alike
    assert layout_of((1, 96, 96, 96), (384, 384), flow="nhwc") == Layout("nhwc", basis="data flow")
    assert as_feature_map(torch.zeros(1, 96, 96, 96), (384, 384)) is None
    nhwc = torch.arange(3 * 2 * 2, dtype=torch.float32).reshape(1, 3, 2, 2)  # a 3x2 map of 2 channels
    assert torch.equal(as_feature_map(nhwc, (48, 32), flow="nhwc"), nhwc.permute(0, 3, 1, 2))
    transposed = torch.randn(1, 8, 8, 8)  # x.transpose(1, 3): width, height, channels
    assert torch.equal(as_feature_map(transposed, (32, 32), flow="nwhc"), transposed.permute(0, 3, 2, 1))


def test_without_data_flow_the_better_fitting_order_is_guessed():
    assert layout_of((1, 64, 56, 56), (224, 224)) == Layout("nchw")
    assert layout_of((1, 56, 56, 64), (224, 224)) == Layout("nhwc")
    # Height equal to channels on a 3:4 photo: only channels-last gives a 3:4 map.
    assert layout_of((1, 96, 128, 96), (384, 512)) == Layout("nhwc")
    assert layout_of((1, 2048, 1, 1), (224, 224)) == Layout("nchw")
