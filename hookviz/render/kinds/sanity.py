"""``<layer>.sanity.png`` (with ``--sanity``): the layer's CAM as the model's layers are
randomised from the output down (``hookviz.trust``), in a row, each with its rank correlation
with the original, the correlations against the threshold, and the check's verdict. Redrawn
whole for each image."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, anatomy, register_kind

__all__ = ["build", "reuse_key", "KIND", "PANELS"]

#: At most this many randomisation steps are drawn (evenly spread, the last always among them).
PANELS = 7


def reuse_key(explanation, layer, options: dict):
    """The number of randomisation steps (the layout); ``None`` for a layer not checked."""
    checked = layer.trust is not None and layer.trust.sanity is not None
    return anatomy(explanation, layer, len(layer.trust.sanity.layers) if checked else None)


def _shown_steps(count: int) -> list[int]:
    """Which randomisation steps get a panel: all, or ``PANELS`` evenly spread, the last among them."""
    import numpy as np

    if count <= PANELS:
        return list(range(count))
    return sorted({int(round(v)) for v in np.linspace(0, count - 1, PANELS)})


def build(explanation, layer):
    """The original map, then the map after randomising the layers from the output down."""
    from hookviz.render.figures import Sheet
    from hookviz.render.kinds.faithfulness import heading

    if layer.trust is None or layer.trust.sanity is None:
        return None
    result = layer.trust.sanity
    steps = _shown_steps(len(result.layers))
    panel = 1.5
    width = 0.4 + (1 + len(steps)) * (panel + 0.15) + 2.9
    sheet = Sheet(max(width, 8.0), 1.15 + panel + 0.55)
    axes = [sheet.axes(0.3 + k * (panel + 0.15), 1.15, panel, panel) for k in range(1 + len(steps))]
    curve = sheet.axes(0.3 + (1 + len(steps)) * (panel + 0.15) + 0.6, 1.15, 2.2, panel)

    def update(explanation, layer):
        result = layer.trust.sanity
        titles = ["original"] + [f"random down to\n{_short(result.layers[s])}, ρ={_rho(result.correlations[s])}" for s in steps]
        for ax, index, title in zip(axes, [0, *(s + 1 for s in steps)], titles):
            ax.clear()
            ax.imshow(result.maps[index], cmap="jet", interpolation="bilinear")
            ax.set_title(title, fontsize=7, parse_math=False)
            ax.set_axis_off()
        _draw_correlations(curve, result)
        verdict = "explains the model" if result.explains_model else "barely changes: it shows the input, not the model"
        sheet.title(heading(explanation, layer, f"layers randomised from the output down; the map {verdict}"))

    update(explanation, layer)
    return sheet.figure, update, None


def _draw_correlations(ax, result) -> None:
    import numpy as np

    ax.clear()
    values = [np.nan if c is None else c for c in result.correlations]
    ax.plot(range(1, len(values) + 1), values, color="tab:blue", marker=".")
    ax.axhline(result.threshold, color="tab:red", linewidth=0.8, linestyle="--", label=f"threshold {result.threshold:g}")
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel("layers randomised (output end first)", fontsize=7)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("Spearman ρ with the original", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=6, loc="lower left")
    ax.grid(alpha=0.3)


def _short(name: str, width: int = 18) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def _rho(value) -> str:
    return "n/a (constant map)" if value is None else f"{value:.2f}"


KIND = register_kind(
    PictureKind(
        "sanity",
        group="cam",
        label="randomisation check",
        help="with --sanity, the CAM as the model's layers are randomised",
        build=build,
        reuse_key=reuse_key,
        default=True,
    )
)
