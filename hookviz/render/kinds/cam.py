"""``<layer>.cam.png``: the target's CAM over the photo the model saw, beside the photo
alone; for a task whose every CAM is a panel (``Explanation.cams_as_panels``: a detector's, one per
detection, its box drawn over it), those panels side by side."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["build", "reuse_key", "KIND"]


def reuse_key(explanation, layer, options: dict):
    """The photo's size, the CAM's, and whether the photo is the whole one; ``None`` without a CAM."""
    from hookviz.render.figures import photo_of
    from hookviz.render.kinds.cam_topk import panels_key

    if explanation.cams_as_panels:
        return panels_key(explanation, layer)
    shape = None if layer.cam is None else (photo_of(explanation).shape, layer.cam.shape, explanation.image.whole is None)
    return usual_reuse_key(explanation, layer, shape)


def _heading(explanation, layer) -> str:
    from hookviz.render.figures import layer_text, shape_text

    return f"{explanation.model} · {layer_text(layer)} · output {shape_text(layer.shapes['output'])}"


def build(explanation, layer):
    from hookviz.render.figures import (
        CHAR_INCHES,
        Overlay,
        Sheet,
        cam_boxes,
        class_specific,
        clip_tiling,
        method_title,
        photo_of,
        presented,
        window_of,
    )
    from hookviz.render.kinds.cam_topk import panels

    if explanation.cams_as_panels:
        return panels(explanation, layer)
    if layer.cam is None:
        return None
    photo = photo_of(explanation)
    panel, side = cam_boxes(photo, layer.cam, longest=4.3)
    heading = _heading(explanation, layer)
    content = 2 * panel + 0.3 + 0.3 + 0.9
    width = max(0.2 + content, len(heading) * CHAR_INCHES + 0.4)
    x = (width - content) / 2  # the panels centred under a title wider than they are
    sheet = Sheet(width, 0.95 + side + 0.2)
    left = sheet.axes(x, 0.95, panel, side)
    left.set_anchor("N")
    plain = left.imshow(photo, interpolation="bilinear")
    left.set_axis_off()
    left.set_title("model input" if explanation.image.whole is None else "whole photo (resized, not cropped)", fontsize=9)
    overlay = Overlay(
        sheet.figure,
        sheet.axes(x + panel + 0.3, 0.95, panel, side),
        sheet.axes(x + 2 * panel + 0.45, 0.95, 0.15, side),
        photo,
        layer.cam,
        clip_tiling(explanation),
    )

    def update(explanation, layer):
        photo = photo_of(explanation)
        plain.set_data(photo)
        method = method_title(explanation, explanation.cam_method)
        specific = class_specific(explanation.cam_method)
        target = f" for {explanation.target.label}" if specific else ", any class"
        overlay.update(photo, layer.cam, method + target, window_of(explanation), any_class=not specific)
        sheet.title(f"{_heading(explanation, layer)}\n{presented(explanation).headline(explanation)}")

    update(explanation, layer)
    return sheet.figure, update, [plain, *overlay.changing, sheet.heading]


KIND = register_kind(
    PictureKind(
        "cam",
        group="cam",
        label="CAM",
        help="the CAM over the photo",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(1, 2, 3),
        over_input=True,
    )
)
