"""A clip's pictures (issue 28): the ``frames`` strip, the ``time`` plot and the animated
WebP, drawn for clips of 4, 16 and 32 frames; one colour scale across the clip; skipped,
with a note, for a map of another rank, and silently for a photo; the gallery's row of a
clip leads with its animation."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import hookviz
from hookviz.render.kinds import picture_kind

from .explorer_helpers import browser, explorer_samples
from .test_frames import _clips, _run
from .test_gallery import _loaded_images
from .video_clips import Conv3dNet

LAYER = "features.2"


@pytest.fixture(scope="module")
def clips():
    torch.manual_seed(0)
    net = Conv3dNet().eval()  # frames_plugin's model, given tensors: importing the plug-in would register its kind
    return {count: hookviz.explain(net, torch.rand(3, count, 24, 32), layers=[LAYER]) for count in (4, 16, 32)}


def _per_frame(cam: np.ndarray, count: int) -> np.ndarray:
    """The CAM read at each of ``count`` frames as torch's trilinear resizing reads it (the reference)."""
    tensor = torch.as_tensor(cam, dtype=torch.float64)[None, None]
    return F.interpolate(tensor, size=(count, *cam.shape[1:]), mode="trilinear", align_corners=False)[0, 0].numpy()


@pytest.mark.parametrize("count", [4, 16, 32])
def test_the_strip_has_every_frame_labelled_on_one_colour_scale(clips, count):
    explanation = clips[count]
    cam = explanation[LAYER].cam
    figure = explanation.figure(LAYER, "frames")
    panels = [ax for ax in figure.axes if len(ax.images) == 2]  # a frame and its CAM
    assert len(panels) == count
    labels = [text.get_text() for ax in panels for text in ax.texts]
    assert labels == [f"frame {i}" for i in range(count)]
    scales = {(ax.images[1].norm.vmin, ax.images[1].norm.vmax) for ax in panels}
    assert len(scales) == 1 and next(iter(scales)) == (0.0, pytest.approx(float(cam.max())))
    columns = len({round(ax.get_position().x0, 4) for ax in panels})
    assert columns == min(count, 8) and min(ax.get_position().width * figure.get_figwidth() for ax in panels) >= 1.2 - 1e-9
    assert f"each of the {count} frames" in figure._suptitle.get_text()
    heats = np.stack([ax.images[1].get_array() for ax in panels])
    reference = np.stack(
        [np.asarray(Image.fromarray(p.astype(np.float32), "F").resize((32, 24), Image.BILINEAR)) for p in _per_frame(cam, count)]
    )
    np.testing.assert_allclose(heats, reference, rtol=1e-4, atol=1e-12)


@pytest.mark.parametrize("count", [4, 16, 32])
def test_the_time_plot_is_the_mass_per_frame_beside_the_clips_probability(clips, count):
    explanation = clips[count]
    figure = explanation.figure(LAYER, "time")
    mass_axes, probability_axes = figure.axes[:2]
    x, y = mass_axes.lines[0].get_data()
    np.testing.assert_array_equal(x, np.arange(count))
    np.testing.assert_allclose(y, _per_frame(explanation[LAYER].cam, count).sum(axis=(1, 2)), rtol=1e-9)
    assert probability_axes.lines[0].get_ydata()[0] == pytest.approx(explanation.target.probability)
    assert "the whole clip's" in probability_axes.texts[0].get_text() and mass_axes.get_xlabel() == "frame"


@pytest.mark.slow  # over 1.4 s of CPU, measured
@pytest.mark.parametrize("count", [4, 16, 32])
def test_the_animation_has_one_webp_frame_per_clip_frame(clips, count, tmp_path):
    explanation = clips[count]
    written = {path.name for path in explanation.save(tmp_path)}
    assert {f"{LAYER}.frames.png", f"{LAYER}.time.png", f"{LAYER}.animation.webp"} <= written
    with Image.open(tmp_path / f"{LAYER}.animation.webp") as animation:
        assert animation.format == "WEBP" and animation.n_frames == count and min(animation.size) >= 224
        first = np.asarray(animation.convert("RGB"))
        animation.seek(count - 1)
        last = np.asarray(animation.convert("RGB"))
    assert np.abs(first.astype(int) - last).mean() > 1  # the frames differ: it moves


def test_timestamps_come_from_the_sample_else_frame_numbers(clips):
    from hookviz.render.clips import frame_times, time_axis, time_label
    from hookviz.render.kinds.animation import DEFAULT_MS, durations

    explanation = clips[4]
    assert frame_times(explanation) is None and time_label(None, 3) == "frame 3"
    timed = SimpleNamespace(image=SimpleNamespace(tensor=explanation.image.tensor, times=(0.0, 0.5, 1.0, 1.25)))
    assert frame_times(timed) == (0.0, 0.5, 1.0, 1.25) and time_label(frame_times(timed), 3) == "1.25 s"
    assert time_axis(frame_times(timed), 4)[1] == "time (s)"
    assert durations(frame_times(timed), 4) == [500, 500, 250, 250] and durations(None, 3) == [DEFAULT_MS] * 3
    wrong = SimpleNamespace(image=SimpleNamespace(tensor=explanation.image.tensor, times=(0.0, 0.5)))
    assert frame_times(wrong) is None  # not one per frame: frame numbers, never a wrong time


def test_a_timed_clip_prints_its_times_under_its_frames(clips):
    from hookviz.render.kinds.frames import build

    explanation = clips[4]
    timed = SimpleNamespace(
        **{**vars(explanation), "image": SimpleNamespace(**vars(explanation.image), times=(0.0, 0.4, 0.8, 1.2))}
    )
    figure = build(timed, explanation[LAYER])[0]
    assert [t.get_text() for ax in figure.axes for t in ax.texts if len(ax.images) == 2] == [
        "0.00 s",
        "0.40 s",
        "0.80 s",
        "1.20 s",
    ]
    assert picture_kind("time").build(timed, explanation[LAYER])[0].axes[0].get_xlabel() == "time (s)"


def test_clip_pictures_skip_other_ranks_with_a_note_and_photos_silently(clips):
    photo = hookviz.explain(
        torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3)
        ),
        torch.rand(3, 24, 24),
        layers=["0"],
    )
    for name in ("frames", "time", "animation"):
        kind = picture_kind(name)
        assert kind.unfit(photo.layers[0], photo) is None and not kind.draws(photo.layers[0], photo)
        assert kind.figure(photo, photo.layers[0]) is None
        note = kind.unfit(photo.layers[0], clips[4])  # a 2-D map of a clip's model
        assert note == f"{name} picture not drawn: it draws maps of 3 spatial dimensions, and this map has 2"


@pytest.mark.slow  # a run of a fresh interpreter, and headless Chromium
@browser
def test_a_clips_gallery_row_plays_its_animation(tmp_path):
    clips, out = _clips(tmp_path / "clips", frames=16), tmp_path / "out"
    _run(clips, out, "--clip-frames", "16")
    samples = explorer_samples(out)
    assert sorted(samples) == ["jump", "walk"]  # one row per clip, each with its animation
    for name in ("walk", "jump"):
        assert samples[name]["clip"] == "features.3.animation.webp"
        with Image.open(io.BytesIO((out / name / "features.3.animation.webp").read_bytes())) as animation:
            assert animation.n_frames == 16
    routes = ("#/", "#/sample/walk", "#/sample/jump")
    images = _loaded_images(out / "index.html", tmp_path / "profile", tmp_path / "gallery.png", routes)
    animations = [width for src, complete, width in images if src.endswith(".webp")]
    assert len(animations) == 2 and min(animations) > 0  # the list's thumbnail and the sample's page
    assert [src for src, complete, width in images if not complete or width == 0] == []
