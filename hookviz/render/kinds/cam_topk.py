"""``<layer>.cam_topk.png``: with ``topk`` > 1, the CAMs of the top K classes side by side,
each on its own colour scale."""

from __future__ import annotations

import math

from . import PictureKind, anatomy, register_kind

__all__ = ["build", "reuse_key", "panels", "panels_key", "KIND"]

#: Panels a row of CAMs holds before the next row starts (20 detections make four rows, not one).
PANELS_PER_ROW = 5


def panels_key(explanation, layer):
    """The photo's size and each panel's CAM's; ``None`` without panels."""
    from ..figures import photo_of

    shape = (photo_of(explanation).shape, tuple(cam.shape for _, cam in layer.topk_cams)) if layer.topk_cams else None
    return anatomy(explanation, layer, shape)


def reuse_key(explanation, layer, options: dict):
    if explanation.task == "detect":
        return None
    return panels_key(explanation, layer)


def build(explanation, layer):
    return panels(explanation, layer)


def panels(explanation, layer, detections: bool = False):
    """CAMs side by side: of the top-K classes, or (``detections``) of each detection, its
    box drawn over it."""
    from ..figures import Overlay, Sheet, layer_text, photo_inches, photo_of, window_of

    if not layer.topk_cams or (explanation.task == "detect") != detections:
        return None
    photo = photo_of(explanation)
    panel, side = photo_inches(photo, longest=3.5)
    stride, rise = panel + 1.25, side + 1.0
    columns = min(len(layer.topk_cams), PANELS_PER_ROW)
    rows = math.ceil(len(layer.topk_cams) / columns)
    sheet = Sheet(0.2 + columns * stride, 0.2 + rows * rise)
    overlays = []
    for k, (_, cam) in enumerate(layer.topk_cams):
        left, top = 0.2 + (k % columns) * stride, 1.0 + (k // columns) * rise
        overlays.append(Overlay(sheet.figure, sheet.axes(left, top, panel, side),
                                sheet.axes(left + panel + 0.12, top, 0.13, side), photo, cam))

    def update(explanation, layer):
        photo = photo_of(explanation)
        for overlay, (focus, cam) in zip(overlays, layer.topk_cams):
            if detections:
                rank = explanation.prediction.detections.index(focus) + 1
                overlay.update(photo, cam, f"{rank}. {focus.name or 'class'} ({focus.index})\nscore {focus.score:.3f}",
                               window_of(explanation), focus.box)
            else:
                overlay.update(photo, cam, f"{focus.label}\np={focus.probability:.3f}", window_of(explanation))
        count = len(layer.topk_cams)
        what = f"{count} detection{'s' if count != 1 else ''}" if detections else \
            f"the top {count} class{'es' if count != 1 else ''}"
        sheet.title(f"{explanation.model} · {layer_text(layer)} · {explanation.cam_method} of {what}")

    update(explanation, layer)
    return sheet.figure, update, [a for overlay in overlays for a in overlay.changing] + [sheet.heading]


KIND = register_kind(PictureKind(
    "cam_topk", group="cam", label="top-K CAMs", help="with --topk, the top-K CAMs side by side",
    build=build, reuse_key=reuse_key, default=True,
))
