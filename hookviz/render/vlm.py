"""Pictures of a vision-language model's answer (``hookviz.vlm.explain.VlmExplanation``): the
strip, the answer's tokens left to right, each with its map over the photo below it, a row per
method and layer; and a picture per token, the photo beside each method's map of it."""

from __future__ import annotations

import numpy as np

__all__ = ["on_photo", "strip_png", "token_png"]


def on_photo(photo: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (rows, cols), made non-negative (absolute) and scaled to its maximum, resized to
    the photo and blended over it as a jet heat map, (H, W, 3) in [0, 1]."""
    import torch
    import torch.nn.functional as F
    from matplotlib import colormaps

    heat = np.abs(np.nan_to_num(values.astype(np.float32)))
    top = float(heat.max())
    heat = heat / top if top > 0 else heat
    size = photo.shape[:2]
    resized = F.interpolate(torch.from_numpy(heat)[None, None], size=size, mode="bilinear", align_corners=False)[0, 0].numpy()
    coloured = colormaps["jet"](np.clip(resized, 0, 1))[..., :3]
    return 0.5 * photo + 0.5 * coloured


def _row_label(maps) -> str:
    layer = maps.layer.rsplit(".", 2)
    return f"{maps.method}\n{'.'.join(layer[-2:]) if len(layer) > 2 else maps.layer}"


def _answer_line(explanation) -> str:
    chosen = {k for target in explanation.targets for k in target.tokens}
    special = set(explanation.conversation.special) - chosen  # left out, as the answer's text leaves them out
    words = [
        f"[{t.strip()}]" if k in chosen else t.strip() for k, t in enumerate(explanation.conversation.tokens) if k not in special
    ]
    return f"{explanation.conversation.prompt!r} -> " + " ".join(words)


def strip_png(explanation) -> bytes:
    """The strip: a column per target (its words, its probability), a row per map."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from hookviz.render.figures import fitted, png_bytes

    columns, rows = len(explanation.targets), len(explanation.maps)
    figure = Figure(figsize=(1.2 + 1.5 * columns, 0.7 + 1.7 * max(rows, 1)), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(max(rows, 1), columns, squeeze=False)
    for r, maps in enumerate(explanation.maps):
        for c, target in enumerate(explanation.targets):
            ax = axes[r][c]
            ax.imshow(on_photo(explanation.photo, maps.maps[c].numpy()))
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                p = float(explanation.probabilities[list(target.tokens)].prod())
                ax.set_title(f"{target.label.strip()}\np={p:.3f}", fontsize=9)
            if c == 0:
                ax.set_ylabel(_row_label(maps), fontsize=7)
    figure.suptitle(fitted(_answer_line(explanation), 1.2 + 1.5 * columns), fontsize=9)
    figure.tight_layout()
    return png_bytes(figure)


def token_png(explanation, index: int) -> bytes:
    """Target ``index``'s picture: the photo, then each method's map of it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from hookviz.render.figures import png_bytes

    target = explanation.targets[index]
    panels = 1 + len(explanation.maps)
    figure = Figure(figsize=(2.2 * panels, 2.7), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, panels, squeeze=False)[0]
    axes[0].imshow(explanation.photo)
    axes[0].set_title("photo", fontsize=9)
    for ax, maps in zip(axes[1:], explanation.maps):
        ax.imshow(on_photo(explanation.photo, maps.maps[index].numpy()))
        ax.set_title(_row_label(maps).replace("\n", " @ "), fontsize=7)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    p = float(explanation.probabilities[list(target.tokens)].prod())
    score = float(explanation.scores[list(target.tokens)].sum())
    figure.suptitle(f"token {target.key[5:] if target.key.startswith('token') else target.key} {target.label.strip()!r}: p={p:.3f}, "
                    f"{explanation.objective}={score:.3f}", fontsize=9)  # fmt: skip
    figure.tight_layout()
    return png_bytes(figure)
