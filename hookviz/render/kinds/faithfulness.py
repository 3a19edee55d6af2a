"""``<layer>.faithfulness.png`` (with ``--faithfulness``): the deletion and insertion curves of
the layer's CAM, their areas in the legend, beside ROAD's most- and least-relevant-first
curves (``hookviz.trust``). Redrawn whole for each image: a few lines."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, anatomy, register_kind

__all__ = ["build", "reuse_key", "KIND"]


def reuse_key(explanation, layer, options: dict):
    """Any image whose CAM was measured; ``None`` for a layer whose CAM was not."""
    measured = layer.trust is not None and layer.trust.deletion is not None
    return anatomy(explanation, layer, "faithfulness" if measured else None)


def heading(explanation, layer, what: str) -> str:
    """The title of a trust picture: model, layer, method, what it shows, and the target."""
    from hookviz.render.figures import layer_text, task_of

    return f"{explanation.model} · {layer_text(layer)} · {explanation.cam_method}: {what}\n{task_of(explanation).headline(explanation)}"


def build(explanation, layer):
    """Deletion and insertion (left), ROAD (right)."""
    from hookviz.render.figures import Sheet

    if layer.trust is None or layer.trust.deletion is None:
        return None
    sheet = Sheet(10.0, 4.4)
    curves, road = sheet.axes(0.8, 0.95, 3.9, 2.9), sheet.axes(5.7, 0.95, 3.9, 2.9)

    def update(explanation, layer):
        _draw_deletion(curves, layer.trust.deletion)
        _draw_road(road, layer.trust.road)
        sheet.title(heading(explanation, layer, "how far to trust the map (faithfulness)"))

    update(explanation, layer)
    return sheet.figure, update, None


def _draw_deletion(ax, measured) -> None:
    ax.clear()
    ax.plot(
        measured.fractions,
        measured.deletion,
        color="tab:red",
        marker=".",
        label=f"deletion, area {measured.deletion_auc:.3f} (lower: better)",
    )
    ax.plot(
        measured.fractions,
        measured.insertion,
        color="tab:green",
        marker=".",
        label=f"insertion, area {measured.insertion_auc:.3f} (higher: better)",
    )
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("fraction of pixels deleted / inserted, highest-ranked first", fontsize=8)
    ax.set_ylabel("target class's probability", fontsize=8)
    ax.set_title("deletion and insertion (RISE, torch-cam)", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)


def _draw_road(ax, measured) -> None:
    ax.clear()
    imputed = [1 - p / 100 for p in measured.percentiles]
    ax.plot(
        imputed,
        measured.most_relevant_first,
        color="tab:red",
        marker=".",
        label=f"most relevant first, mean {measured.most_relevant_first_mean:+.3f} (lower: better)",
    )
    ax.plot(
        imputed,
        measured.least_relevant_first,
        color="tab:green",
        marker=".",
        label=f"least relevant first, mean {measured.least_relevant_first_mean:+.3f} (higher: better)",
    )
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of pixels imputed (noisy linear imputation)", fontsize=8)
    ax.set_ylabel("change of the target class's probability", fontsize=8)
    ax.set_title(f"ROAD (pytorch-grad-cam): combined {measured.combined:+.3f} (higher: better)", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3)


KIND = register_kind(
    PictureKind(
        "faithfulness",
        group="cam",
        label="faithfulness",
        help="with --faithfulness, the CAM's deletion, insertion and ROAD curves",
        build=build,
        reuse_key=reuse_key,
        default=True,
    )
)
