"""``<layer>.faithfulness.png`` (with ``--faithfulness``): the deletion and insertion curves of
the layer's CAM, their areas in the legend, beside ROAD's most- and least-relevant-first
curves (``hookviz.trust``). With several layer methods (``--cam a,b``) each measured method's
curves, one colour per method: deletion, insertion and ROAD side by side. Redrawn whole for
each image: a few lines.

The input methods' maps (``--cam guided-backprop,...``) are one per image, not per layer:
``input_figure`` draws theirs alike, once per image (``pixel_maps.faithfulness.png``)."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["build", "input_figure", "reuse_key", "KIND"]


def measured(explanation, layer) -> list[tuple[str, object]]:
    """``(method, LayerTrust)`` of each method whose map of ``layer`` was measured, the main one first."""
    trust = layer.trust
    if trust is None:
        return []
    found = [(explanation.cam_method, trust), *trust.methods.items()]
    return [(method, each) for method, each in found if each.deletion is not None and each.road is not None]


def reuse_key(explanation, layer, options: dict):
    """Any image whose maps were measured by the same methods; ``None`` for a layer whose CAM was not."""
    methods = tuple(method for method, _ in measured(explanation, layer))
    return usual_reuse_key(explanation, layer, ("faithfulness", methods) if methods else None)


def heading(explanation, layer, what: str, methods: str | None = None) -> str:
    """The title of a trust picture: model, layer, method (or ``methods``), what it shows, and the target."""
    from hookviz.render.figures import layer_text, presented

    method = methods or explanation.cam_method
    return f"{explanation.model} · {layer_text(layer)} · {method}: {what}\n{presented(explanation).headline(explanation)}"


def build(explanation, layer):
    """Deletion and insertion (left), ROAD (right); with several methods, deletion, insertion
    and ROAD, each with every method's curves."""
    from hookviz.render.figures import Sheet

    found = measured(explanation, layer)
    if not found:
        return None
    if len(found) > 1:
        return _build_several(explanation, layer, len(found))
    sheet = Sheet(10.0, 4.4)
    curves, road = sheet.axes(0.8, 0.95, 3.9, 2.9), sheet.axes(5.7, 0.95, 3.9, 2.9)

    def update(explanation, layer):
        ((method, trust),) = measured(explanation, layer)  # the main method's, or the one other whose map was finite
        _draw_deletion(curves, trust.deletion)
        _draw_road(road, trust.road)
        sheet.title(heading(explanation, layer, "how far to trust the map (faithfulness)", method))

    update(explanation, layer)
    return sheet.figure, update, None


def _build_several(explanation, layer, count: int):
    sheet, draw = _several(count)

    def update(explanation, layer):
        found = measured(explanation, layer)
        methods = ", ".join(method for method, _ in found)
        draw(found, heading(explanation, layer, "how far to trust the maps (faithfulness)", methods))

    update(explanation, layer)
    return sheet.figure, update, None


def _several(count: int):
    """A sheet for ``count`` methods' curves, and ``draw(found, title)`` that draws them:
    deletion, insertion and ROAD side by side, each with every method's curves."""
    from hookviz.render.figures import Sheet

    # the legends sit below the panels: one line per method
    legend = 0.2 * count + 0.3
    sheet = Sheet(14.4, 4.4 + legend)
    axes = [sheet.axes(0.8 + k * 4.7, 0.95, 3.8, 2.9) for k in range(3)]

    def draw(found, title: str) -> None:
        _draw_each(axes[0], found, "deletion")
        _draw_each(axes[1], found, "insertion")
        _draw_each_road(axes[2], found)
        sheet.title(title)

    return sheet, draw


def input_measured(explanation) -> list[tuple[str, object]]:
    """``(method, LayerTrust)`` of each input method whose relevance map was measured, in the run's order."""
    found = [(method, pixels.trust) for method, pixels in explanation.pixel_maps.items() if pixels.trust is not None]
    return [(method, each) for method, each in found if each.deletion is not None and each.road is not None]


def input_heading(explanation, what: str, methods: str) -> str:
    """The title of an input trust picture: model, the maps of the input and how they were
    reduced, methods, what it shows, and the target."""
    from hookviz.render.figures import presented
    from hookviz.trust.pixel_trust import REDUCTION

    return (
        f"{explanation.model} · maps of the input · {methods}: {what}\n"
        f"each map measured as {REDUCTION} · {explanation.image.source.label} · {presented(explanation).headline(explanation)}"
    )


def input_figure(explanation):
    """``pixel_maps.faithfulness.png``'s ``Figure``: each input method's deletion, insertion and
    ROAD curves (one colour per method), or ``None`` when none was measured."""
    found = input_measured(explanation)
    if not found:
        return None
    sheet, draw = _several(len(found))
    methods = ", ".join(method for method, _ in found)
    draw(found, input_heading(explanation, "how far to trust the maps (faithfulness)", methods))
    return sheet.figure


def _colour(k: int, count: int = 10):
    """Method ``k``'s colour: tab10's, or tab20's for more than 10 methods (none repeats up to 20)."""
    from matplotlib import colormaps

    return colormaps["tab10"](k % 10) if count <= 10 else colormaps["tab20"](k % 20)


def _draw_each(ax, found, curve: str) -> None:
    """One method's ``curve`` (``deletion`` or ``insertion``) per line, its area in the legend
    with as many decimals as tell the areas apart, or the methods it ties with."""
    ax.clear()
    areas = [trust.deletion.deletion_auc if curve == "deletion" else trust.deletion.insertion_auc for _, trust in found]
    labels = _labels([method for method, _ in found], areas, "area {:.{}f}")
    for k, ((_, trust), label) in enumerate(zip(found, labels)):
        if curve == "deletion" and trust.deletion.saturated:
            label += ", saturated"
        ax.plot(trust.deletion.fractions, getattr(trust.deletion, curve), color=_colour(k, len(found)), marker=".", label=label)
    better = "lower" if curve == "deletion" else "higher"
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"fraction of pixels {'deleted' if curve == 'deletion' else 'inserted'}, highest-ranked first", fontsize=8)
    ax.set_ylabel("target class's probability", fontsize=8)
    ax.set_title(f"{curve} (RISE, torch-cam): area {better} is better", fontsize=9)
    if curve == "deletion" and all(trust.deletion.saturated for _, trust in found):
        _say_saturated(ax, "these curves carry")
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17), frameon=False)
    ax.grid(alpha=0.3)


def _labels(methods: list[str], values: list[float], number: str) -> list[str]:
    """``method, <number>`` for each method, with the fewest decimals (3 at least) that tell
    its value from the others', and the methods it ties with (``hookviz.trust.deletion.TIE``)."""
    from hookviz.trust.deletion import TIE, distinct_digits

    digits = distinct_digits(values, least=_significant(values))
    labels = []
    for method, value in zip(methods, values):
        tied = [other for other, each in zip(methods, values) if other != method and abs(each - value) <= TIE]
        label = f"{method}, {number.format(value, digits)}"
        labels.append(f"{label}, ties {', '.join(tied)}" if tied else label)
    return labels


def _significant(values: list[float], figures: int = 3) -> int:
    """The decimals that show the largest of ``values`` with ``figures`` significant figures
    (3 at least, 7 at most): a random model's probabilities of 0.002 print as 0.00242, not 0.002."""
    import math

    largest = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if largest == 0:
        return 3
    return min(7, max(3, figures - 1 - math.floor(math.log10(largest))))


def _say_saturated(ax, curves: str = "this curve carries") -> None:
    """A saturated probability's curves say nothing of the maps: say so across the panel."""
    from hookviz.trust.deletion import SATURATED

    ax.text(
        0.5,
        0.45,
        f"the probability is saturated:\nit stays at or above {SATURATED} until\nevery pixel is deleted, so {curves}\n"
        "no information about the map",
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=8,
        color="tab:red",
        bbox={"facecolor": "white", "edgecolor": "tab:red", "alpha": 0.9},
    )


def _draw_each_road(ax, found) -> None:
    """Each method's most- (solid) and least-relevant-first (dashed) curves, its combined score in the legend."""
    ax.clear()
    labels = _labels([method for method, _ in found], [trust.road.combined for _, trust in found], "combined {:+.{}f}")
    for k, ((_, trust), label) in enumerate(zip(found, labels)):
        measured = trust.road
        imputed = [1 - p / 100 for p in measured.percentiles]
        colour = _colour(k, len(found))
        ax.plot(imputed, measured.most_relevant_first, color=colour, marker=".", label=label)
        ax.plot(imputed, measured.least_relevant_first, color=colour, marker=".", linestyle="--")
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of pixels imputed (noisy linear imputation)", fontsize=8)
    ax.set_ylabel("change of the target class's probability", fontsize=8)
    ax.set_title("ROAD (pytorch-grad-cam): most relevant first solid,\nleast dashed; combined higher is better", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17), frameon=False)
    ax.grid(alpha=0.3)


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
    if measured.saturated:
        _say_saturated(ax)
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
        help="with --faithfulness, each measured CAM's deletion, insertion and ROAD curves",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(1, 2, 3),  # curves only: the map's rank does not matter
    )
)
