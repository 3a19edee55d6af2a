"""``<layer>.sanity.png`` (with ``--sanity``): the layer's CAM as the model's layers are
randomised from the output down (``hookviz.trust``), in a row, each with its rank correlation
with the original, the correlations against the threshold, and the check's verdict; with
several layer methods (``--cam a,b``), one such row per method checked. Redrawn whole for each
image. The input methods' relevance maps, one per image, get a picture of their own
(``input_figure``: ``pixel_maps.sanity.png``), one row per input method."""

from __future__ import annotations

from hookviz.render.kinds import PictureKind, register_kind, usual_reuse_key

__all__ = ["build", "input_figure", "reuse_key", "KIND", "PANELS"]

#: At most this many randomisation steps are drawn (evenly spread, the last always among them).
PANELS = 7


def checked(explanation, layer) -> list[tuple[str, object]]:
    """``(method, Randomisation)`` of each method whose map of ``layer`` was checked, the main one first."""
    trust = layer.trust
    if trust is None:
        return []
    found = [(explanation.cam_method, trust.sanity), *((method, each.sanity) for method, each in trust.methods.items())]
    return [(method, result) for method, result in found if result is not None]


def reuse_key(explanation, layer, options: dict):
    """The methods checked and the number of randomisation steps (the layout); ``None`` for a
    layer not checked."""
    found = checked(explanation, layer)
    shape = (tuple(method for method, _ in found), len(found[0][1].layers)) if found else None
    return usual_reuse_key(explanation, layer, shape)


def _shown_steps(count: int) -> list[int]:
    """Which randomisation steps get a panel: all, or ``PANELS`` evenly spread, the last among them."""
    import numpy as np

    if count <= PANELS:
        return list(range(count))
    return sorted({int(round(v)) for v in np.linspace(0, count - 1, PANELS)})


def build(explanation, layer):
    """Per method checked, the original map, then the map after randomising the layers from the output down."""
    from hookviz.render.kinds.faithfulness import heading

    found = checked(explanation, layer)
    if not found:
        return None
    steps = _shown_steps(len(found[0][1].layers))
    sheet, rows = _sheet(len(found), steps)

    def update(explanation, layer):
        found = checked(explanation, layer)
        _draw_rows(rows, steps, found)
        if len(found) > 1:
            methods = ", ".join(method for method, _ in found)
            caveat = _caveat(found[0][1])  # the map's size and the layers kept: the same for every method
            sheet.title(heading(explanation, layer, f"layers randomised from the output down{caveat}", methods))
            return
        result = found[0][1]
        verdict = "explains the model" if result.explains_model else "barely changes: it shows the input, not the model"
        verdict += _caveat(result)
        sheet.title(heading(explanation, layer, f"layers randomised from the output down; the map {verdict}", found[0][0]))

    update(explanation, layer)
    return sheet.figure, update, None


def input_figure(explanation):
    """``pixel_maps.sanity.png``'s ``Figure``: one row per input method checked, its relevance
    map as the layers are randomised, or ``None`` when none was checked."""
    from hookviz.render.kinds.faithfulness import input_heading

    found = [(method, pixels.trust.sanity) for method, pixels in explanation.pixel_maps.items() if pixels.trust is not None]
    found = [(method, result) for method, result in found if result is not None]
    if not found:
        return None
    steps = _shown_steps(len(found[0][1].layers))
    sheet, rows = _sheet(len(found), steps)
    _draw_rows(rows, steps, found, always_named=True)
    methods = ", ".join(method for method, _ in found)
    caveat = _caveat(found[0][1])
    sheet.title(input_heading(explanation, f"layers randomised from the output down{caveat}", methods))
    return sheet.figure


def _sheet(count: int, steps: list[int]):
    """A sheet of ``count`` rows: the original map and the ``steps`` shown, then the correlations."""
    from hookviz.render.figures import Sheet

    panel, row = 1.5, 1.5 + 0.75
    width = 0.4 + (1 + len(steps)) * (panel + 0.15) + 2.9
    sheet = Sheet(max(width, 8.0), 1.15 + count * row - 0.2)
    rows = [
        (
            [sheet.axes(0.3 + k * (panel + 0.15), 1.15 + r * row, panel, panel) for k in range(1 + len(steps))],
            sheet.axes(0.3 + (1 + len(steps)) * (panel + 0.15) + 0.6, 1.15 + r * row, 2.2, panel),
        )
        for r in range(count)
    ]
    return sheet, rows


def _draw_rows(rows, steps: list[int], found, always_named: bool = False) -> None:
    """Each ``(method, Randomisation)`` of ``found`` in its row, named when there are several
    (or ``always_named``)."""
    named = always_named or len(found) > 1
    for (axes, curve), (method, result) in zip(rows, found):
        _draw_row(axes, steps, result, f"{method}: original" if named else "original")
        verdict = "explains the model" if result.explains_model else "barely changes"
        _draw_correlations(curve, result, f"{method}: {verdict}" if named else None)


def _draw_row(axes, steps: list[int], result, first: str) -> None:
    from hookviz.render.figures import fitted, flat

    titles = [first] + [f"random down to\n{_short(result.layers[s])}, ρ={_rho(result.correlations[s])}" for s in steps]
    for ax, index, title in zip(axes, [0, *(s + 1 for s in steps)], titles):
        ax.clear()
        values = result.maps[index]
        # A signal's map as a strip as tall as the panel; a clip's as its slices, tiled (said under the first).
        shown, slices = flat(values)
        smooth = "nearest" if values.ndim == 3 else "bilinear"
        ax.imshow(shown, cmap="jet", interpolation=smooth, aspect="auto" if values.ndim == 1 else None)
        ax.set_title(title, fontsize=7, parse_math=False)
        if index == 0 and values.ndim == 3:
            ax.set_xlabel(fitted(slices, 1.6, 7), fontsize=7, parse_math=False)
            ax.set_axis_on()
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        ax.set_axis_off()


def _draw_correlations(ax, result, title: str | None = None) -> None:
    import numpy as np

    ax.clear()
    if title:
        ax.set_title(title, fontsize=7, parse_math=False)
    values = [np.nan if c is None else c for c in result.correlations]
    ax.plot(range(1, len(values) + 1), values, color="tab:blue", marker=".")
    # Adebayo et al. judge |ρ|: an inverted map (ρ near -1) still shows what the original did
    ax.axhspan(-result.threshold, result.threshold, color="tab:green", alpha=0.08, label=f"changed: |ρ| ≤ {result.threshold:g}")
    for bound in (-result.threshold, result.threshold):
        ax.axhline(bound, color="tab:red", linewidth=0.8, linestyle="--")
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlim(0.5, len(values) + 0.5)  # every step, even where only one correlation is known
    ax.set_xlabel("layers randomised (output end first)", fontsize=7)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("Spearman ρ with the original", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=6, loc="best")
    ax.grid(alpha=0.3)


def _caveat(result) -> str:
    """`` (what to know)`` of ``result.note``, short enough for a title, or ``""``."""
    import math

    from hookviz.trust.sanity import MIN_VALUES

    said = []
    values = math.prod(result.shape) if result.shape else None
    if values is not None and values < MIN_VALUES:
        said.append(f"a {'x'.join(map(str, result.shape))} map: ρ over {values} values says little")
    if result.kept:
        said.append(f"float buffers of {', '.join(_short(name) for name in result.kept)} left as they were")
    return f" ({'; '.join(said)})" if said else ""


def _short(name: str, width: int = 18) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def _rho(value) -> str:
    return "n/a (constant map)" if value is None else f"{value:.2f}"


KIND = register_kind(
    PictureKind(
        "sanity",
        group="cam",
        label="randomisation check",
        help="with --sanity, each checked CAM as the model's layers are randomised",
        build=build,
        reuse_key=reuse_key,
        default=True,
        ranks=(1, 2, 3),
    )
)
