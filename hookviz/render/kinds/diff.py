"""``<layer>.diff.png``: the change of one layer from the baseline, drawn from a comparison
(a ``compare.measures.ImageDiff`` and one of its ``LayerDiff`` s) instead of an explanation: the
channel-summed output before and after on one sequential scale, their difference on a
diverging scale centred on zero, and the CAM before and after on one scale, beside the
figures that measure the change. Redrawn whole for each image.

No ``pictures`` choice turns it on; a run draws it as it compares itself with a baseline
(``--baseline``), and ``hookviz diff`` draws it into the newer run's folders.
"""

from __future__ import annotations

import math

from hookviz.render.kinds import PictureKind, register_kind

__all__ = ["build", "reuse_key", "KIND"]


def _comparable(layer) -> bool:
    return layer.maps is not None or (layer.cam is not None and layer.cam.maps is not None)


def reuse_key(image, layer, options: dict):
    """Every diff picture has one reuse key (it is redrawn whole); ``None`` with nothing to compare."""
    return "diff" if _comparable(layer) else None


def build(image, layer):
    """The figure, or ``None`` when there is neither an output map nor a CAM to compare."""
    from hookviz.render.figures import Sheet

    if not _comparable(layer):
        return None
    sheet = Sheet(11.6, 7.7)

    def update(image, layer):
        import numpy as np

        sheet.figure.clear()
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: a NaN the picture shows as a hole
            _draw(sheet, image, layer)

    update(image, layer)
    return sheet.figure, update, None


def _draw(sheet, image, layer) -> None:
    side, stride = 2.5, 3.85
    slots = [sheet.axes(0.35 + k * stride, 1.25, side, side) for k in range(3)]
    bars = [sheet.axes(0.35 + k * stride + side + 0.1, 1.25, 0.13, side) for k in range(3)]
    lower = [sheet.axes(0.35 + k * stride, 4.75, side, side) for k in range(2)]
    lower_bars = [sheet.axes(0.35 + k * stride + side + 0.1, 4.75, 0.13, side) for k in range(2)]
    _draw_outputs(sheet, layer.maps, slots, bars)
    _draw_cams(sheet, layer.cam, lower, lower_bars)
    sheet.figure.text(
        0.35 + 2 * stride,
        4.75,
        _figures_text(image, layer),
        transform=sheet.inches(),
        va="top",
        ha="left",
        fontsize=9,
        family="monospace",
        parse_math=False,
    )
    sheet.title(f"change from the baseline · {layer.name} [{layer.module_type}]\n{image.image}")


def _draw_outputs(sheet, maps, slots, bars) -> None:
    """The top row: the layer's output before, after (one scale), and their difference."""
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    from hookviz.render.figures import ACTIVATION_CMAP, GRADIENT_CMAP, empty, fmt

    if maps is None:
        for ax, bar in zip(slots, bars):
            empty(ax, bar, "output not comparable\n(shapes differ, or not recorded)")
        return
    where = "the layer's resolution (saved tensors)" if maps.source == "tensors" else "area means of the fingerprint"
    shape = "x".join(map(str, maps.before.shape))
    if maps.before.ndim == 1:
        shape = f"{maps.before.size} values"
    norm = _shared_norm(maps.before, maps.after)
    _panel(sheet.figure, slots[0], bars[0], maps.before, norm, ACTIVATION_CMAP, f"output before\n{shape}, {where}")
    _panel(
        sheet.figure, slots[1], bars[1], maps.after, norm, ACTIVATION_CMAP, "output after\nsame scale as before (it spans both)"
    )
    change = maps.after.astype(np.float64) - maps.before.astype(np.float64)
    limit = float(np.nanmax(np.abs(change))) if np.isfinite(change).any() else 0.0
    diverging = TwoSlopeNorm(vcenter=0.0, vmin=-(limit or 1.0), vmax=limit or 1.0)
    state = "" if limit else " (identical)" if np.isfinite(change).any() else " (no finite value)"
    title = f"after - before\nmax |diff| {fmt(limit)}{state}"
    _panel(sheet.figure, slots[2], bars[2], change, diverging, GRADIENT_CMAP, title)


def _draw_cams(sheet, cam, axes, bars) -> None:
    """The lower row: the CAM before and after, on one scale."""
    import numpy as np
    from matplotlib.colors import Normalize

    from hookviz.render.figures import CAM_CMAP, empty

    if cam is None or cam.maps is None:
        for ax, bar in zip(axes, bars):
            empty(ax, bar, "no CAM to compare")
        return
    cams = cam.maps
    top = max(float(np.nanmax(c)) if np.isfinite(c).any() else 0.0 for c in (cams.before, cams.after))
    norm = Normalize(0.0, top if top > 0 else 1.0)
    shown = "x".join(map(str, cams.before.shape))
    whole = "x".join(map(str, cam.layer_shape or cams.before.shape))
    kind = f"raw {shown}" if shown == whole else f"{shown} area means of the {whole} map"
    _panel(sheet.figure, axes[0], bars[0], cams.before, norm, CAM_CMAP, f"CAM before\n{kind}")
    _panel(sheet.figure, axes[1], bars[1], cams.after, norm, CAM_CMAP, "CAM after\nsame scale as before (it spans both)")


def _figures_text(image, layer) -> str:
    """The figures beside the CAMs: what changed, in numbers."""
    from hookviz.render.figures import fmt

    before, after = image.target
    p_change = "n/a" if image.probability_change is None else f"{image.probability_change:+.3g}"
    lines = [
        f"target before: {before.get('name') or before.get('index')}",
        f"target after:  {after.get('name') or after.get('index')}",
        f"P(target before) change: {p_change}",
        "",
    ]
    for tensor in layer.tensors:
        figures = tensor.tensor or tensor.map
        if figures is not None:
            cosine = "n/a" if not math.isfinite(figures.cosine) else f"{figures.cosine:.6f}"
            lines.append(f"{tensor.name}: rel {fmt(figures.max_rel)}, cos {cosine}")
    if layer.cam is not None:
        corr = "n/a" if layer.cam.corr is None or not math.isfinite(layer.cam.corr) else f"{layer.cam.corr:.4f}"
        shift = "n/a" if layer.cam.peak_shift is None else f"{layer.cam.peak_shift:.1f} px"
        lines += ["", f"CAM correlation: {corr}", f"CAM peak moved:  {shift}"]
    lines += ["", "rel: max |after - before|", "     / max |before|"]
    return "\n".join(lines)


def _shared_norm(before, after):
    import numpy as np
    from matplotlib.colors import Normalize

    values = np.concatenate([np.ravel(before), np.ravel(after)]).astype(np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Normalize(0, 1)
    low, high = float(values.min()), float(values.max())
    return Normalize(low, high) if high > low else Normalize(min(0.0, low), max(0.0, high) or 1.0)


def _panel(figure, ax, cax, values, norm, cmap_name: str, title: str) -> None:
    """One map on a given scale with a colorbar of its true values; a vector as lines."""
    import matplotlib
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    from hookviz.render.figures import NOT_FINITE_COLOUR, ValueBar, flat

    if values.ndim == 3:  # a clip's map: its slices, tiled
        values, slices = flat(values)
        title = f"{title}\n{slices}"
    ax.set_title(title, fontsize=9, parse_math=False)
    if values.ndim == 1:
        colour = "tab:red" if isinstance(norm, TwoSlopeNorm) else "tab:blue"
        ax.vlines(np.arange(values.size), 0, values, colors=colour, linewidth=1.0)
        ax.set_xlim(-0.5, values.size - 0.5)
        ax.set_ylim(norm.vmin, norm.vmax)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_xlabel("feature or position", fontsize=8)
        ax.tick_params(labelsize=7)
        cax.set_axis_off()
        return
    cmap = matplotlib.colormaps[cmap_name]
    ax.imshow(values, cmap=cmap.with_extremes(bad=NOT_FINITE_COLOUR), norm=norm, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    ValueBar(figure, cax, cmap).set_norm(norm)


KIND = register_kind(
    PictureKind(
        "diff",
        group="diff",
        label="change from the baseline",
        help="the change from a baseline run",
        build=build,
        reuse_key=reuse_key,
        compares=True,
        ranks=(1, 2, 3),
    )
)
