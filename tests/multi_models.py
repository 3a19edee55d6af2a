"""Tiny models of several inputs for the multi-input kind's tests and docs (random weights),
each loaded by factory: ``--model tests.multi_models:build_rgbd``.

* ``RGBDNet``: a photo and its depth map (``forward(rgb, depth)``), two branches fused into a
  segmentation's (N, K, H, W) logits (``--task segment``).
* ``MetaNet``: a photo and a row of metadata (``forward(image, meta)``) into three class logits.
* ``SiameseNet``: two views through one shared encoder (``forward(left, right)``) into two logits.
"""

from __future__ import annotations

import torch
import torch.nn as nn

#: Features of ``MetaNet``'s metadata (a CSV's columns after the file name).
META_FEATURES = 3
#: Classes of the RGB-D segmenter.
SEGMENT_CLASSES = 3


def _block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.ReLU())


class RGBDNet(nn.Module):
    """A photo branch and a depth branch, concatenated and fused, into per-pixel logits at the input's size."""

    def __init__(self):
        super().__init__()
        self.rgb = nn.Sequential(_block(3, 6), _block(6, 8, 2))
        self.depth = nn.Sequential(_block(1, 4), _block(4, 8, 2))
        self.fusion = _block(16, 8)
        self.head = nn.Conv2d(8, SEGMENT_CLASSES, 1)

    def forward(self, rgb, depth):
        fused = self.fusion(torch.cat([self.rgb(rgb), self.depth(depth)], dim=1))
        return nn.functional.interpolate(self.head(fused), size=rgb.shape[-2:], mode="bilinear", align_corners=False)


class MetaNet(nn.Module):
    """A photo's pooled features beside a small MLP of the metadata, into three logits."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(_block(3, 6), _block(6, 8, 2))
        self.meta = nn.Sequential(nn.Linear(META_FEATURES, 8), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, image, meta):
        pooled = self.features(image).mean(dim=(2, 3))
        return self.head(torch.cat([pooled, self.meta(meta)], dim=1))


class SiameseNet(nn.Module):
    """One encoder for both views; their features and difference into two logits (same, different)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(_block(3, 6), _block(6, 8, 2))
        self.head = nn.Linear(16, 2)

    def forward(self, left, right):
        a, b = self.encoder(left).mean(dim=(2, 3)), self.encoder(right).mean(dim=(2, 3))
        return self.head(torch.cat([a * b, (a - b).abs()], dim=1))


def _seeded(make):
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        return make().eval()
    finally:
        torch.random.set_rng_state(state)


def build_rgbd() -> nn.Module:
    return _seeded(RGBDNet)


def build_meta() -> nn.Module:
    return _seeded(MetaNet)


def build_siamese() -> nn.Module:
    return _seeded(SiameseNet)
