"""``<layer>.animation.webp``: a clip's frames with the target's CAM over each, as an animated
WebP that plays at the clip's pace (from its timestamps; 8 frames a second without them),
each frame's time under it, on one colour scale across the clip (as the ``frames`` strip).
``Explanation.figure`` gives its first frame as a still. Only for a clip's map of three
dimensions (T x H x W).
"""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind
from hookviz.render.kinds.frames import reuse_key

__all__ = ["build", "reuse_key", "encode", "animation_frames", "durations", "KIND"]

#: The shortest side an animation's frame is drawn at, in pixels (a 112-pixel input is doubled).
SHORT_SIDE = 224
#: Each frame's time without timestamps, in milliseconds.
DEFAULT_MS = 125


def animation_frames(explanation, layer) -> list:
    """Each frame of the animation, a PIL image: the frame with the CAM over it, brought to
    ``SHORT_SIDE``, its time and the colour scale written under it."""
    from PIL import Image, ImageDraw, ImageFont

    from hookviz.render.clips import cam_per_frame, clip_frames, clip_scale, coloured, frame_times, time_label

    frames = clip_frames(explanation)
    count, height, width = frames.shape[:3]
    scale = clip_scale(layer.cam)
    shown = coloured(frames, cam_per_frame(layer.cam, count, (height, width)), scale)
    factor = max(1.0, SHORT_SIDE / min(height, width))
    size = (round(width * factor), round(height * factor))
    font = ImageFont.load_default(size=13)
    times = frame_times(explanation)
    pictures = []
    for index in range(count):
        canvas = Image.new("RGB", (size[0], size[1] + 20), "white")
        canvas.paste(Image.fromarray(shown[index]).resize(size, Image.BILINEAR), (0, 0))
        text = f"{time_label(times, index)} ({index + 1}/{count}) · CAM 0 to {scale[1]:.3g}"
        ImageDraw.Draw(canvas).text((4, size[1] + 3), text, fill="black", font=font)
        pictures.append(canvas)
    return pictures


def durations(times, count: int) -> list[int]:
    """Each frame's time on screen in milliseconds: until the next frame's timestamp (the
    last as long as the one before), at least 20 ms; ``DEFAULT_MS`` each without timestamps."""
    if times is None or count < 2:
        return [DEFAULT_MS] * count
    gaps = [max(20, round((later - earlier) * 1000)) for earlier, later in zip(times, times[1:])]
    return [*gaps, gaps[-1]]


def encode(explanation, layer) -> bytes | None:
    """The animated WebP's bytes (one animation frame per clip frame), or ``None`` where it
    does not apply."""
    import io

    from hookviz.render.clips import frame_times

    if reuse_key(explanation, layer, {}) is None:
        return None
    pictures = animation_frames(explanation, layer)
    buffer = io.BytesIO()
    pictures[0].save(
        buffer,
        format="WEBP",
        save_all=True,
        append_images=pictures[1:],
        duration=durations(frame_times(explanation), len(pictures)),
        loop=0,
        quality=80,
        method=4,
    )
    return buffer.getvalue()


def build(explanation, layer):
    import numpy as np

    from hookviz.render.figures import DPI, Sheet

    if reuse_key(explanation, layer, {}) is None:
        return None
    first = np.asarray(animation_frames(explanation, layer)[0])
    sheet = Sheet(first.shape[1] / DPI + 0.4, first.shape[0] / DPI + 0.7)
    ax = sheet.axes(0.2, 0.55, first.shape[1] / DPI, first.shape[0] / DPI)
    image = ax.imshow(first, interpolation="nearest")
    ax.set_axis_off()
    sheet.title(" ")

    def update(explanation, layer):
        image.set_data(np.asarray(animation_frames(explanation, layer)[0]))
        sheet.heading.set_text(f"{layer.name}: the animation's first frame\n(the WebP plays all)")

    update(explanation, layer)
    return sheet.figure, update, None


KIND = register_kind(
    PictureKind(
        "animation",
        group="cam",
        label="animation",
        help="a clip's CAM over its frames, animated (WebP)",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(3,),
        over_input=True,
        inputs=(3,),
        suffix="webp",
        encode=encode,
    )
)
