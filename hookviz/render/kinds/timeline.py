"""``<layer>.time.png``: how the target's CAM of a clip is spread over time: the map's mass
(its sum over each frame, as the ``frames`` strip shows it) per frame, beside the target's
probability. The probability is the whole clip's, drawn as a flat line and said so: a
probability per frame would take a forward pass per frame, which a clip model is not made
for. Only for a clip's map of three dimensions (T x H x W).
"""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind
from hookviz.render.kinds.frames import reuse_key

__all__ = ["build", "reuse_key", "mass_per_frame", "KIND"]


def mass_per_frame(cam, count: int):
    """The CAM's sum over each of ``count`` frames (the map read at each frame as the
    ``frames`` strip reads it, at the map's own size; NaN and Inf left out)."""
    from hookviz.anatomy.slices import per_frame

    return per_frame(cam, count)[1]


def build(explanation, layer):
    from hookviz.render.clips import frame_times, time_axis
    from hookviz.render.figures import Sheet, fitted
    from hookviz.render.kinds.frames import _heading

    if reuse_key(explanation, layer, {}) is None:
        return None
    count = explanation.image.tensor.shape[1]
    sheet = Sheet(7.2, 4.3)
    ax = sheet.axes(0.9, 0.95, 5.4, 2.8)
    chance = ax.twinx()

    def update(explanation, layer):
        x, xlabel = time_axis(frame_times(explanation), count)
        mass = mass_per_frame(layer.cam, count)
        ax.clear()
        chance.clear()
        ax.plot(x, mass, color="tab:red", marker="o", markersize=3, linewidth=1.4, label="CAM mass per frame")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("CAM mass (sum over the frame)", fontsize=8, color="tab:red")
        ax.set_ylim(bottom=min(0.0, float(mass.min())))
        ax.tick_params(labelsize=7)
        target = explanation.target
        if target is not None:
            chance.axhline(target.probability, color="tab:blue", linewidth=1.4, linestyle="--")
            chance.text(
                0.01,
                0.98,
                f"dashed: P({target.label}) = {target.probability:.3g}, the whole clip's",
                transform=chance.transAxes,
                color="tab:blue",
                fontsize=7,
                va="top",
                parse_math=False,
            )
        chance.yaxis.tick_right()  # clear() put the twin's axis back on the left
        chance.yaxis.set_label_position("right")
        chance.set_ylim(0, 1.02)
        chance.set_ylabel("probability of the target (whole clip)", fontsize=8, color="tab:blue")
        chance.tick_params(labelsize=7)
        share = mass.max() / mass.sum() if mass.sum() > 0 else float("nan")
        sheet.heading.set_text(
            f"{_heading(explanation, layer)}\n"
            + fitted(f"{explanation.cam_method} mass per frame; the peak frame holds {share:.0%} of it", 7.0, 10)
        )

    sheet.title(" ")
    update(explanation, layer)
    sheet.figure.text(
        0.5,
        0.02,
        "the probability is the clip's, not the frame's: one forward pass of the whole clip",
        ha="center",
        fontsize=7,
        color="0.35",
        parse_math=False,
    )
    return sheet.figure, update, None


KIND = register_kind(
    PictureKind(
        "time",
        group="cam",
        label="over time",
        help="a clip's CAM mass per frame beside the target's probability",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(3,),
        over_input=True,
        inputs=(3,),
    )
)
