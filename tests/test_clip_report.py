"""A clip's report (issue 28): each layer map of a clip keeps, per frame of the clip, its peak
and its share of the map's mass, in ``report.json`` (valid against its schema) and read back;
a model with a temporal stride of 2 has its map read at each frame by trilinear resizing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hookviz
from hookviz.store.records import read_report

from .test_records import _validator

LAYER = "features.2"


class StridedClipNet(nn.Module):
    """Two 3-D convolutions, the second halving time and space, pooled into five class logits."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv3d(6, 8, 3, stride=2, padding=1), nn.ReLU()
        )
        self.head = nn.Linear(8, 5)

    def forward(self, clip):
        return self.head(self.features(clip).mean(dim=(2, 3, 4)))


def _hand(cam: np.ndarray, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's peak and share of the map, the map brought to ``frames`` time slices by torch's
    trilinear resizing (align_corners=False) at its own height and width."""
    tensor = torch.as_tensor(cam, dtype=torch.float64)[None, None]
    at_frames = F.interpolate(tensor, size=(frames, *cam.shape[1:]), mode="trilinear", align_corners=False)[0, 0]
    mass = at_frames.sum(dim=(1, 2))
    return at_frames.amax(dim=(1, 2)).numpy(), (mass / mass.sum()).numpy()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    net = StridedClipNet().eval()
    explanation = hookviz.explain(net, torch.rand(3, 8, 24, 32), layers=[LAYER], cam="gradcam,eigencam")
    out = tmp_path_factory.mktemp("clip")
    explanation.save(out, pictures="none")
    return explanation, json.loads((out / "report.json").read_text(encoding="utf-8")), read_report(out / "report.json")


def test_each_frame_keeps_the_maps_peak_and_share_as_a_hand_computation(saved):
    explanation, document, report = saved
    _validator("report").validate(document)
    cam = explanation[LAYER].cam
    assert cam.shape == (4, 12, 16) and cam.sum() > 0  # the temporal stride of 2: 4 slices for 8 frames
    peaks, shares = _hand(cam, 8)
    written = document["layers"][0]["cam"]["frames"]
    assert len(written) == 8
    np.testing.assert_allclose([f["peak"] for f in written], peaks, rtol=1e-6)
    np.testing.assert_allclose([f["share"] for f in written], shares, rtol=1e-6)
    assert sum(f["share"] for f in written) == pytest.approx(1.0)
    read = report.layers_by_name[LAYER]
    assert [(f.peak, f.share) for f in read.cam.frames] == [(f["peak"], f["share"]) for f in written]
    assert "frames" not in read.cam.stats


def test_every_layer_method_keeps_its_own_frames(saved):
    explanation, document, report = saved
    for method in ("gradcam", "eigencam"):
        peaks, shares = _hand(explanation[LAYER].cams[method], 8)
        written = report.layers_by_name[LAYER].cams[method].frames
        np.testing.assert_allclose([f.peak for f in written], peaks, rtol=1e-6)
        np.testing.assert_allclose([f.share for f in written], shares, rtol=1e-6)
        assert "frames" not in report.layers_by_name[LAYER].cams[method].stats


def test_a_photos_map_has_no_frames(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).eval()
    explanation = hookviz.explain(net, torch.rand(3, 16, 16), layers=["1"])
    explanation.save(tmp_path, pictures="none")
    document = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert "frames" not in document["layers"][0]["cam"]
    assert read_report(tmp_path / "report.json").layers[0].cam.frames == ()
