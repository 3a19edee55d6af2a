"""Videos made for the tests with PyAV's own encoder (never downloaded), and a tiny Conv3d
classifier whose module declares the ``video`` sample kind, for ``hookviz run --model
tests.video_clips:video_net``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

WIDTH, HEIGHT = 32, 24


def moving_square(index: int, width: int = WIDTH, height: int = HEIGHT, colour=(250, 200, 50)) -> np.ndarray:
    """Frame ``index`` of a clip: a square moving right over grey, and the index itself in the
    top-left block's grey (``index * 8``), so that a test can tell which frame a decoder returned."""
    pixels = np.full((height, width, 3), 40, np.uint8)
    side = max(4, height // 3)
    left = (index * 2) % max(1, width - side)
    pixels[height // 3 : height // 3 + side, left : left + side] = colour
    pixels[:8, :8] = (index * 8) % 256
    return pixels


def encode(path: Path, frames: int = 30, fps: int = 30, codec: str = "mpeg4", gop: int = 10, **options) -> Path:
    """A video of ``frames`` moving-square frames at ``path``; ``options``: ``width``, ``height``,
    ``pix_fmt``, ``times`` (each frame's timestamp in seconds: a variable frame rate)."""
    from fractions import Fraction

    import av

    width, height = options.get("width", WIDTH), options.get("height", HEIGHT)
    times = options.get("times")
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, options.get("pix_fmt", "yuv420p")
        stream.codec_context.gop_size = gop
        stream.codec_context.bit_rate = 4_000_000  # nearly lossless at this size: a frame's grey block tells its index
        if times is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(moving_square(index, width, height), format="rgb24")
            if times is not None:
                frame.pts, frame.time_base = round(times[index] * 1000), Fraction(1, 1000)
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


class Conv3dNet(nn.Module):
    """Two 3-D convolutions over a clip, pooled, into five class logits: the tests' clip model,
    of no sample kind (a clip given as a tensor), its subclasses of theirs."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv3d(6, 8, 3, stride=(1, 2, 2), padding=1), nn.ReLU()
        )
        self.head = nn.Linear(8, 5)

    def forward(self, clip):
        return self.head(self.features(clip).mean(dim=(2, 3, 4)))


class VideoNet(Conv3dNet):
    """``Conv3dNet`` over the ``video`` kind's clips (``frames``: the clip length it declares)."""

    hookviz_sample_kind = "video"

    def __init__(self, frames: int | None = None):
        super().__init__()
        if frames is not None:
            self.hookviz_clip_frames = frames


def video_net() -> nn.Module:
    torch.manual_seed(0)
    return VideoNet()


def video_net_of_6() -> nn.Module:
    """The same net, declaring 6 frames per clip as its own."""
    torch.manual_seed(0)
    return VideoNet(frames=6)


def video_net_of_6_frames() -> nn.Module:
    """``VideoNet`` that declares clips of six frames."""
    torch.manual_seed(0)
    return VideoNet(frames=6)
