"""``<layer>.cams.png``: with several methods in ``--cam``, each one's map of the target
side by side over the photo, each on its own colour scale (a method without a map says
why in its place). With one method it is ``<layer>.cam.png``, so it is not drawn."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["build", "reuse_key", "KIND"]

#: Panels a row holds before the next row starts.
PANELS_PER_ROW = 4


def _methods(explanation, layer) -> list[str]:
    """The layer methods with a map or a note, in the order asked (a method without a map
    among them keeps its place)."""
    found = dict.fromkeys([*layer.cams, *layer.cam_notes])
    return [name for name in explanation.cam_methods if name in found] + [
        name for name in found if name not in explanation.cam_methods
    ]


def reuse_key(explanation, layer, options: dict):
    """The photo's size and each method's map's (or ``None`` for a method without one);
    ``None`` (not drawn) with fewer than two methods, no target, or no map of any method."""
    from hookviz.render.figures import photo_of

    methods = _methods(explanation, layer)
    if len(methods) < 2 or explanation.target is None or not any(name in layer.cams for name in methods):
        return None  # fewer than two methods, or none mapped this layer (a linear head: each says why in a note)
    shapes = tuple((name, None if name not in layer.cams else layer.cams[name].shape) for name in methods)
    return usual_reuse_key(explanation, layer, (photo_of(explanation).shape, shapes))


def build(explanation, layer):
    from hookviz.render.figures import (
        Overlay,
        Sheet,
        cam_boxes,
        class_specific,
        clip_tiling,
        empty,
        fitted,
        layer_text,
        method_title,
        photo_of,
        window_of,
    )

    if reuse_key(explanation, layer, {}) is None:
        return None
    methods, photo = _methods(explanation, layer), photo_of(explanation)
    drawn = [layer.cams[name] for name in methods if name in layer.cams]
    panel, side = cam_boxes(photo, max(drawn, key=lambda cam: cam.size) if drawn else layer.cam, longest=3.5)
    stride, rise = panel + 1.25, side + 1.0
    columns = min(len(methods), PANELS_PER_ROW)
    rows = -(-len(methods) // columns)
    sheet = Sheet(max(0.2 + columns * stride, 6.0), 0.2 + rows * rise)
    overlays = {}
    for k, name in enumerate(methods):
        left, top = 0.2 + (k % columns) * stride, 1.0 + (k // columns) * rise
        ax, cax = sheet.axes(left, top, panel, side), sheet.axes(left + panel + 0.12, top, 0.13, side)
        if name in layer.cams:
            overlays[name] = Overlay(sheet.figure, ax, cax, photo, layer.cams[name], clip_tiling(explanation))
        else:  # the same for every image of this reuse key: drawn once
            ax.set_title(fitted(name, panel), fontsize=9, parse_math=False)
            empty(ax, cax, fitted(layer.cam_notes[name].replace("; ", ";\n"), panel))

    def update(explanation, layer):
        photo = photo_of(explanation)
        for name, overlay in overlays.items():
            title, agnostic = method_title(explanation, name), not class_specific(name)
            overlay.update(photo, layer.cams[name], title, window_of(explanation), any_class=agnostic)
        sheet.title(f"{explanation.model} · {layer_text(layer)} · each method's CAM of {explanation.target.label}")

    update(explanation, layer)
    return sheet.figure, update, [a for overlay in overlays.values() for a in overlay.changing] + [sheet.heading]


KIND = register_kind(
    PictureKind(
        "cams",
        group="cam",
        label="CAM methods",
        help="with several methods in one run, each one's CAM side by side",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(1, 2, 3),
        over_input=True,
    )
)
