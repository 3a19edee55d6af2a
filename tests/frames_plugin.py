"""A plug-in from outside hookviz that adds a sample kind whose sample is a folder, through
the documented extension points only (``hookviz.samples``, ``hookviz.options.declared``,
``hookviz.inputs.discovery.find_folders``, ``hookviz.inputs.images``, ``hookviz.anatomy.slices``):

    HOOKVIZ_PLUGINS=tests.frames_plugin hookviz run clips/ --model tests.frames_plugin:clip_net \
        --clip-frames 4 ...

One sample, ``frames``, is a clip: a folder of frames ``000.png, 001.png, ...``, of which
``--clip-frames`` are taken, evenly spaced, each preprocessed as a photo; the model's input,
named ``clip``, is their (C, T, H, W) stack, and its overlays are drawn over the frames
tiled as ``anatomy.slices`` tiles a map of three dimensions, so a CAM lies over its frames.
The model, ``ClipNet``, is a small Conv3d classifier that names the kind in its
``hookviz_sample_kind``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

from hookviz.anatomy.slices import tiling
from hookviz.errors import ImageError, arg, display_path
from hookviz.inputs.discovery import find_folders
from hookviz.inputs.images import LoadedSample, load_image, prepare
from hookviz.options.declared import option
from hookviz.samples import Sample, SampleKindBase, register_sample_kind
from tests.video_clips import Conv3dNet

#: A frame's file name: its number and a photo's suffix.
FRAME = re.compile(r"^(\d+)\.(png|jpe?g)$", re.IGNORECASE)


@dataclass(frozen=True)
class ClipOptions:
    """The frames kind's settings: ``--clip-frames`` on the command line, ``clip_frames=`` in ``explain()``."""

    clip_frames: int = option(
        4, help="Frames taken from each clip, evenly spaced (the first and last among them).", low=1, high=64
    )


def frames_of(folder: Path) -> list[Path]:
    """The frames of a clip's folder, in the order of their numbers."""
    if not folder.is_dir():
        return []
    named = [(int(match.group(1)), entry) for entry in folder.iterdir() if (match := FRAME.match(entry.name))]
    return [entry for _, entry in sorted(named)]


def evenly(count: int, taken: int) -> list[int]:
    """``taken`` indices of ``count`` frames, evenly spaced, the first and the last among them."""
    return [int(i) for i in np.linspace(0, count - 1, taken).round()] if taken > 1 else [0]


@register_sample_kind
class Frames(SampleKindBase):
    """A clip: a folder of numbered frames, ``clip_frames`` of them taken evenly spaced."""

    name = "frames"
    words = "a clip: a folder of frames 000.png, 001.png, ..."
    noun = "clip"
    main = "clip"
    options_type = ClipOptions

    def find(self, sources, exclude=(), notes=None) -> list[Path]:
        return find_folders(
            sources, lambda folder: bool(frames_of(folder)), f"sample of kind {self.name!r} ({self.words})", exclude
        )

    def files(self, path: Path) -> list[Path]:
        return frames_of(path)

    def load(self, path: Path, max_pixels: int, settings: ClipOptions):
        frames = frames_of(path)
        if len(frames) < settings.clip_frames:
            raise ImageError(
                f"{display_path(path)}: holds {len(frames)} frames, fewer than {arg('clip_frames', settings.clip_frames)}; "
                "pass a smaller one"
            )
        taken = [load_image(frames[i], max_pixels) for i in evenly(len(frames), settings.clip_frames)]
        sizes = {frame.rgb.size for frame in taken}
        if len(sizes) > 1:
            raise ImageError(f"{display_path(path)}: its frames differ in size ({', '.join(map(str, sorted(sizes)))})")
        return LoadedSample(path, taken[0].rgb, identity=self.identity(path)), taken

    def prepare(self, loaded, preprocessing, max_pixels: int, settings: ClipOptions) -> Sample:
        clip, frames = loaded
        prepared = [prepare(frame, preprocessing, max_pixels) for frame in frames]
        tensor = torch.stack([frame.tensor for frame in prepared], dim=1)  # (C, T, H, W)
        shown_frames = np.stack([frame.shown for frame in prepared])
        tiles = tiling(tuple(shown_frames.shape[:3]))
        shown = np.ascontiguousarray(tiles.flat(shown_frames[list(tiles.indices)], np.uint8(140)))
        source = LoadedSample(clip.path, Image.fromarray(shown), clip.notes, clip.identity)
        return Sample(source, {"clip": tensor}, shown, main="clip")

    def blank(self, preprocessing, settings: ClipOptions) -> tuple:
        return (torch.zeros(1, preprocessing.channels, settings.clip_frames, *preprocessing.trace_size),)


class ClipNet(Conv3dNet):
    """``Conv3dNet`` over this kind's clips."""

    hookviz_sample_kind = "frames"


def clip_net() -> nn.Module:
    torch.manual_seed(0)
    return ClipNet()
