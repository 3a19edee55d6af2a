from __future__ import annotations

import numpy as np
import torch

from hookviz.featuremaps import as_feature_map, patch_grid


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
