"""``<layer>.summary.png``: the layer's four tensors summed over channels, in a 2x2 grid
(input, output, grad_input, grad_output) as the usual hook snippets plot them, with the
photo beside it and a title naming model, layer, shape and target."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["build", "reuse_key", "KIND"]


def reuse_key(explanation, layer, options: dict):
    """Each tensor's map, its dimensions and shape: a vector is drawn as lines, a map as an image."""
    return usual_reuse_key(explanation, layer, tuple(None if v is None else (v.ndim, v.shape) for v in layer.maps.values()))


def build(explanation, layer):
    from hookviz.render.figures import MapPanel, Sheet, layer_text, photo_inches, presented, shape_text

    width, height = photo_inches(explanation.image.shown, longest=3.9)
    left = 0.25 + max(width, 2.4) + 0.6  # room for the photo's title
    sheet = Sheet(left + 7.8, 7.5)
    photo_ax = sheet.axes(0.25 + (max(width, 2.4) - width) / 2, 4.0 - height / 2, width, height)
    photo = photo_ax.imshow(explanation.image.shown, interpolation="bilinear")
    photo_ax.set_axis_off()
    photo_ax.set_title("model input (after preprocessing)", fontsize=9)
    side = 2.45
    cells = {
        "input": (left, 1.2),
        "output": (left + 4.05, 1.2),
        "grad_input": (left, 4.55),
        "grad_output": (left + 4.05, 4.55),
    }
    panels = {}
    for label, (left, top) in cells.items():
        signed = label.startswith("grad")
        ax = sheet.axes(left, top, side, side)
        ax.set_anchor("N")  # a wide map hangs from its cell's top: its title stays above the colourbar's
        panels[label] = MapPanel(
            sheet.figure,
            ax,
            sheet.axes(left + side + 0.12, top, 0.13, side),
            signed,
            "no gradient reached this tensor" if signed else "not recorded",
        )

    def update(explanation, layer):
        shown = presented(explanation)
        photo.set_data(explanation.image.shown)
        for label, panel in panels.items():
            values = layer.maps[label]
            shape = layer.shapes[label]
            # A recorded tensor without a map: its shape reads channels-first and -last alike.
            unread = f"{shape_text(shape)}: channels first or last?\nnot drawn (see report.json)" if shape is not None else None
            rank = layer.ranks.get(label)
            title = f"{label} {shape_text(shape)}, {how(shape, values, rank)}" if values is not None else label
            panel.update(values, title, unread, rank)
        sheet.title(
            f"{explanation.model} · {layer_text(layer)} · output {shape_text(layer.shapes['output'])}\n"
            f"{shown.headline(explanation)} · {shown.objective_text(explanation)} · {explanation.image.source.label}"
        )

    update(explanation, layer)
    parts = [panel.changing() for panel in panels.values()]
    changing = None if None in parts else [photo, *(a for part in parts for a in part), sheet.heading]
    return sheet.figure, update, changing


def how(shape, values, rank: int | None = None) -> str:
    """How a tensor became the panel's picture, so token grids are not mistaken for images."""
    if values is None:
        return "not recorded"
    if rank in (1, 3):
        return "summed over channels"
    if values.ndim != 2:
        return "per feature"
    if shape is not None and len(shape) == 3:
        rows, cols = values.shape
        prefix = shape[1] - rows * cols  # class, distillation and register tokens
        dropped = "" if prefix < 1 else ", first token dropped" if prefix == 1 else f", first {prefix} tokens dropped"
        return f"summed over channels\ntokens as a {rows}x{cols} grid{dropped}"
    return "summed over channels"


KIND = register_kind(
    PictureKind(
        "summary",
        group="summary",
        label="summary",
        help="input, output and their gradients summed over channels",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(1, 2, 3),
    )
)
