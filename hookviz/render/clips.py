"""What the clip pictures (``frames``, ``time``, ``animation``) share: a clip's frames as the
model saw them, their timestamps, and a CAM brought to every frame on one colour scale.

A clip's CAM (T', H', W') is read at each of the clip's T frames as trilinear resizing
reads it along time (``anatomy.slices.along_depth``), then brought to a frame's size; its
colour scale runs from 0 to the largest value over the whole clip, so a frame that looks
hot is hot against the clip, not against itself.
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_clip", "clip_frames", "frame_times", "time_label", "time_axis", "cam_per_frame", "clip_scale", "coloured"]


def is_clip(explanation) -> bool:
    """Whether the explanation's main input is a clip's (C, T, H, W)."""
    return len(np.shape(explanation.image.tensor)) == 4


def clip_frames(explanation) -> np.ndarray:
    """Every frame of the clip as the model saw it, before normalisation: (T, H, W, 3) uint8."""
    values = np.nan_to_num(np.asarray(explanation.image.tensor, dtype=np.float32))
    channels = values.shape[0]
    preprocessing = explanation.preprocessing
    mean = np.asarray(preprocessing.mean[:channels], dtype=np.float32)[:, None, None, None]
    std = np.asarray(preprocessing.std[:channels], dtype=np.float32)[:, None, None, None]
    frames = (np.clip(values * std + mean, 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 3, 0)
    return np.repeat(frames, 3, axis=3) if channels == 1 else np.ascontiguousarray(frames[..., :3])


def frame_times(explanation) -> tuple[float, ...] | None:
    """The frames' timestamps in seconds (``sample.times``, set by a kind that knows them,
    such as ``video``), or ``None`` when the sample has none, or not one per frame."""
    times = getattr(explanation.image, "times", None)
    count = np.shape(explanation.image.tensor)[1]
    if times is None or len(times) != count:
        return None
    return tuple(float(t) for t in times)


def time_label(times: tuple[float, ...] | None, index: int) -> str:
    """How frame ``index`` is named under it: its time (``1.25 s``), else ``frame 3``."""
    if times is None:
        return f"frame {index}"
    return f"{times[index]:.2f} s"


def time_axis(times: tuple[float, ...] | None, count: int) -> tuple[np.ndarray, str]:
    """The x values of ``count`` frames and the axis' label: seconds, else frame numbers."""
    if times is None:
        return np.arange(count, dtype=np.float64), "frame"
    return np.asarray(times, dtype=np.float64), "time (s)"


def cam_per_frame(cam: np.ndarray, count: int, size: tuple[int, int]) -> np.ndarray:
    """A (T', H', W') CAM at each of ``count`` frames, each brought to ``size`` (h, w):
    (count, h, w)."""
    from hookviz.anatomy.slices import along_depth
    from hookviz.render.figures import upsample

    slices = along_depth(cam, count, tuple(range(count)))
    return np.stack([upsample(piece, size) for piece in slices])


def clip_scale(cam: np.ndarray) -> tuple[float, float]:
    """The one colour scale of every frame: 0 to the clip's largest finite value (1 when
    there is none above 0)."""
    finite = np.asarray(cam)[np.isfinite(cam)]
    top = float(finite.max()) if finite.size else 0.0
    return 0.0, top if top > 0 else 1.0


def coloured(frames: np.ndarray, heat: np.ndarray, scale: tuple[float, float]) -> np.ndarray:
    """The frames (T, H, W, 3) uint8 with the CAM (T, H, W) over them, as the CAM pictures
    blend it (``figures.CAM_CMAP`` at ``figures.CAM_ALPHA``; where it is not finite, the frame alone)."""
    import matplotlib

    from hookviz.render.figures import CAM_ALPHA, CAM_CMAP

    low, high = scale
    finite = np.isfinite(heat)
    level = np.clip((np.where(finite, heat, low) - low) / (high - low), 0, 1)
    colours = matplotlib.colormaps[CAM_CMAP](level)[..., :3] * 255
    alpha = np.where(finite, CAM_ALPHA, 0.0)[..., None]
    return (frames * (1 - alpha) + colours * alpha).round().astype(np.uint8)
