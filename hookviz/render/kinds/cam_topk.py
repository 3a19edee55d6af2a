"""``<layer>.cam_topk.png``: with ``topk`` > 1, the CAMs of the top K classes side by side,
each on its own colour scale (none for a task whose every CAM is a panel of
``<layer>.cam.png``, which draws them with ``panels``)."""

from __future__ import annotations

import math

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["build", "reuse_key", "panels", "panels_key", "KIND"]

#: Panels a row of CAMs holds before the next row starts (20 detections make four rows, not one).
PANELS_PER_ROW = 5


def panels_key(explanation, layer):
    """The photo's size and each panel's CAM's; ``None`` without panels."""
    from hookviz.render.figures import photo_of

    shape = (photo_of(explanation).shape, tuple(cam.shape for _, cam in layer.topk_cams)) if layer.topk_cams else None
    return usual_reuse_key(explanation, layer, shape)


def reuse_key(explanation, layer, options: dict):
    return None if explanation.cams_as_panels else panels_key(explanation, layer)


def build(explanation, layer):
    return None if explanation.cams_as_panels else panels(explanation, layer)


def panels(explanation, layer):
    """The layer's CAM panels side by side (``LayerResult.topk_cams``), titled as the task
    says: of the top-K classes, or of each detection, its box drawn over it."""
    from hookviz.render.figures import (
        Overlay,
        Sheet,
        cam_boxes,
        cam_label,
        clip_tiling,
        layer_text,
        method_title,
        photo_of,
        presented,
        window_of,
    )

    if not layer.topk_cams:
        return None
    photo = photo_of(explanation)
    most_said = max((cam for _, cam in layer.topk_cams), key=lambda cam: len(cam_label(cam)))  # the longest bar label
    panel, side = cam_boxes(photo, most_said, longest=3.5)
    stride, rise = panel + 1.25, side + 1.0
    columns = min(len(layer.topk_cams), PANELS_PER_ROW)
    rows = math.ceil(len(layer.topk_cams) / columns)
    sheet = Sheet(0.2 + columns * stride, 0.2 + rows * rise)
    overlays, tiles = [], clip_tiling(explanation)
    for k, (_, cam) in enumerate(layer.topk_cams):
        left, top = 0.2 + (k % columns) * stride, 1.0 + (k // columns) * rise
        overlays.append(
            Overlay(
                sheet.figure,
                sheet.axes(left, top, panel, side),
                sheet.axes(left + panel + 0.12, top, 0.13, side),
                photo,
                cam,
                tiles,
            )
        )

    def update(explanation, layer):
        shown, photo = presented(explanation), photo_of(explanation)
        for overlay, (target, cam) in zip(overlays, layer.topk_cams):
            title, box = shown.cam_panel(explanation, target)
            overlay.update(photo, cam, title, window_of(explanation), box)
        what = shown.panels_text(len(layer.topk_cams))
        method = method_title(explanation, explanation.cam_method)
        sheet.title(f"{explanation.model} · {layer_text(layer)} · {method} of {what}")

    update(explanation, layer)
    return sheet.figure, update, [a for overlay in overlays for a in overlay.changing] + [sheet.heading]


KIND = register_kind(
    PictureKind(
        "cam_topk",
        group="cam",
        label="top-K CAMs",
        help="with --topk, the top-K CAMs side by side",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(1, 2, 3),
        over_input=True,
    )
)
