"""A picture kind from outside hookviz, registered as a plug-in registers one (through
``hookviz.render.kinds.register_kind``): the output's mean, in words. Importing this
module registers it; tests/test_render.py draws it through ``hookviz run --pictures toy``."""

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key


def build(explanation, layer):
    from hookviz.render.figures import Sheet

    if layer.maps.get("output") is None:
        return None
    sheet = Sheet(3.0, 1.2)
    text = sheet.figure.text(0.5, 0.4, "", ha="center", va="center", fontsize=10)

    def update(explanation, layer):
        text.set_text(f"{layer.name}: mean {float(layer.maps['output'].mean()):.4g}")
        sheet.title(explanation.image.source.label)

    update(explanation, layer)
    return sheet.figure, update, [text, sheet.heading]


def reuse_key(explanation, layer, options):
    return usual_reuse_key(explanation, layer, () if layer.maps.get("output") is not None else None)


KIND = register_kind(
    PictureKind(
        "toy",
        group="toy",
        label="toy picture",
        help="the output's mean, in words",
        build=build,
        reuse_key=reuse_key,
    )
)
