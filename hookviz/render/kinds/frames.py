"""``<layer>.frames.png``: a clip's frames, every one of them, each with the target's CAM over
it, in rows of at most ``COLUMNS``, its time (or number) under it, on one colour scale
across the clip with one colour bar. Only for a clip's map of three dimensions (T x H x W).
"""

from __future__ import annotations

import math

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["COLUMNS", "build", "reuse_key", "layout", "KIND"]

#: Frames per row: 32 frames are four rows of eight, each still ~1.2 in wide.
COLUMNS = 8


def layout(count: int) -> tuple[int, int, float]:
    """(columns, rows, frame width in inches) of a strip of ``count`` frames: few frames are
    drawn larger, and no frame narrower than 1.2 in."""
    columns = min(count, COLUMNS)
    return columns, math.ceil(count / columns), max(1.2, min(2.2, 9.6 / columns))


def reuse_key(explanation, layer, options: dict):
    """The clip's shape and the CAM's; ``None`` without a CAM or a clip."""
    from hookviz.render.clips import frame_times, is_clip

    if layer.cam is None or layer.cam.ndim != 3 or not is_clip(explanation):
        return None
    times = frame_times(explanation) is not None
    return usual_reuse_key(explanation, layer, (tuple(explanation.image.tensor.shape), layer.cam.shape, times))


def _heading(explanation, layer) -> str:
    from hookviz.render.figures import layer_text, presented, shape_text

    return (
        f"{explanation.model} · {layer_text(layer)} · output {shape_text(layer.shapes['output'])}\n"
        f"{presented(explanation).headline(explanation)}"
    )


def build(explanation, layer):
    from matplotlib.colors import Normalize

    from hookviz.render.clips import cam_per_frame, clip_frames, clip_scale, frame_times, time_label
    from hookviz.render.figures import CAM_ALPHA, CAM_CMAP, CHAR_INCHES, Sheet, ValueBar, cam_label

    if reuse_key(explanation, layer, {}) is None:
        return None
    frames = clip_frames(explanation)
    count, height, width = frames.shape[:3]
    columns, rows, tile = layout(count)
    tall = tile * height / width
    top, under, gap = 0.9, 0.22, 0.08
    content = columns * tile + (columns - 1) * gap
    across = max(content + 1.3, len(_heading(explanation, layer).splitlines()[0]) * CHAR_INCHES + 0.4)
    left = (across - content - 1.1) / 2
    bar_height = max(rows * (tall + under) - under, 1.6)
    sheet = Sheet(across, top + max(rows * (tall + under), bar_height) + 0.15)
    norm = Normalize(0.0, 1.0)
    photos, heats, labels = [], [], []
    for index in range(count):
        row, column = divmod(index, columns)
        ax = sheet.axes(left + column * (tile + gap), top + row * (tall + under), tile, tall)
        photos.append(ax.imshow(frames[index], interpolation="bilinear"))
        heats.append(ax.imshow(frames[index, :, :, 0] * 0.0, cmap=CAM_CMAP, alpha=CAM_ALPHA, norm=norm, interpolation="bilinear"))
        ax.set_axis_off()
        labels.append(ax.text(0.5, -0.02, "", transform=ax.transAxes, ha="center", va="top", fontsize=8, parse_math=False))
    bar = ValueBar(sheet.figure, sheet.axes(left + content + 0.15, top, 0.14, bar_height), CAM_CMAP, cam_label(layer.cam))
    sheet.title(" ")

    def update(explanation, layer):
        frames = clip_frames(explanation)
        times = frame_times(explanation)
        low, high = clip_scale(layer.cam)
        norm.vmin, norm.vmax = low, high
        heat = cam_per_frame(layer.cam, count, (height, width))
        for index in range(count):
            photos[index].set_data(frames[index])
            heats[index].set_data(heat[index])
            heats[index].set_norm(norm)
            labels[index].set_text(time_label(times, index))
        bar.set_norm(norm)
        what = f"{explanation.cam_method} for {explanation.target.label}" if explanation.target is not None else "CAM"
        sheet.heading.set_text(
            f"{_heading(explanation, layer)}\n{what} over each of the {count} frames, "
            f"one colour scale across the clip (0 to {high:.3g})"
        )

    update(explanation, layer)
    return sheet.figure, update, None


KIND = register_kind(
    PictureKind(
        "frames",
        group="cam",
        label="frames",
        help="a clip's frames with the CAM over each, on one colour scale, timed",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(3,),
        over_input=True,
        inputs=(3,),
    )
)
