"""The trust measures' pictures, each keeping the builder contract of ``hookviz.pictures``:

* ``<layer>.faithfulness.png``: the deletion and insertion curves (their areas in the
  legend) beside ROAD's most- and least-relevant-first curves.
* ``<layer>.sanity.png``: the map as the model's layers are randomised from the output down,
  in a row, each with its rank correlation with the original, and the check's verdict.

Both are redrawn whole for each image (``changing`` is ``None``): a few lines and panels.
"""

from __future__ import annotations

import numpy as np

__all__ = ["faithfulness_parts", "sanity_parts", "reuse_key", "SANITY_PANELS"]

#: At most this many randomisation steps are drawn (evenly spread, the last always among them).
SANITY_PANELS = 7


def reuse_key(kind: str, layer):
    """What a figure of ``kind`` must share to be reused (``rendering.anatomy``), or ``None``
    when the layer has nothing of it to draw."""
    trust = layer.trust
    if trust is None:
        return None
    if kind == "faithfulness":
        return ("faithfulness",) if trust.deletion is not None else None
    return ("sanity", len(trust.sanity.layers)) if trust.sanity is not None else None


def _heading(explanation, layer, what: str) -> str:
    from ..rendering import _layer_text, _target_text

    return f"{explanation.model} · {_layer_text(layer)} · {explanation.cam_method}: {what}\n{_target_text(explanation)}"


def faithfulness_parts(explanation, layer):
    """Deletion and insertion (left), ROAD (right), for the layer's CAM of this image."""
    from ..rendering import _Sheet

    if layer.trust is None or layer.trust.deletion is None:
        return None
    sheet = _Sheet(10.0, 4.4)
    curves, road = sheet.axes(0.8, 0.95, 3.9, 2.9), sheet.axes(5.7, 0.95, 3.9, 2.9)

    def update(explanation, layer):
        _draw_deletion(curves, layer.trust.deletion, layer.trust.score)
        _draw_road(road, layer.trust.road)
        sheet.title(_heading(explanation, layer, "how far to trust the map (faithfulness)"))

    update(explanation, layer)
    return sheet.figure, update, None


def _draw_deletion(ax, measured, score: str | None) -> None:
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


def _shown_steps(count: int) -> list[int]:
    """Which randomisation steps get a panel: all, or ``SANITY_PANELS`` evenly spread, the last among them."""
    if count <= SANITY_PANELS:
        return list(range(count))
    return sorted({int(round(v)) for v in np.linspace(0, count - 1, SANITY_PANELS)})


def sanity_parts(explanation, layer):
    """The original map, then the map after randomising the layers from the output down."""
    from ..rendering import _Sheet

    if layer.trust is None or layer.trust.sanity is None:
        return None
    result = layer.trust.sanity
    steps = _shown_steps(len(result.layers))
    panel = 1.5
    width = 0.4 + (1 + len(steps)) * (panel + 0.15) + 2.9
    sheet = _Sheet(max(width, 8.0), 1.15 + panel + 0.55)
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
        sheet.title(_heading(explanation, layer, f"layers randomised from the output down; the map {verdict}"))

    update(explanation, layer)
    return sheet.figure, update, None


def _draw_correlations(ax, result) -> None:
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
