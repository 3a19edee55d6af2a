"""A prediction explained by its channels: the N channels of a layer that contributed most to
the target's score on one photo, each with its share of the score, its map on this photo and
its best examples elsewhere, from an atlas (``hookviz atlas``). zennit-crp calls this a
"glocal" explanation: local (this photo) and global (what the channel does across a dataset).

A channel's contribution is ``hookviz.concepts.relevance``'s (gradient x activation summed over
positions, or LRP); its share is that contribution over the target's score, so that a reader
reads "channel 412 gave 31% of the tabby logit". Gradient x activation before a layer that
is followed by global pooling and a linear head splits the logit exactly, less the head's
bias; ``accounted`` says what share the layer's channels hold together.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hookviz.errors import UsageError, arg

__all__ = ["AtlasExample", "ChannelShare", "TopChannels", "top_channels", "with_top_channels", "draw_top_channels"]


@dataclass(frozen=True)
class AtlasExample:
    """One of a channel's best dataset examples, as the atlas keeps it."""

    source: str
    score: float
    crop: Path | None


@dataclass(frozen=True)
class ChannelShare:
    """One channel of a prediction.

    Attributes:
        channel: its index in the layer.
        contribution: its relevance for the target, summed over positions (in the score's units).
        share: ``contribution / score``.
        activation: (grid): the channel's map on this photo.
        examples: its best examples from the atlas, best first (``()`` without one).
        label: its name from the atlas (``--label-with``), when it has one.
    """

    channel: int
    contribution: float
    share: float
    activation: np.ndarray
    examples: tuple[AtlasExample, ...] = ()
    label: str | None = None

    def record(self) -> dict:
        """As report.json keeps it."""
        found: dict = {"channel": self.channel, "contribution": self.contribution, "share": _finite(self.share)}
        found["examples"] = [{"source": e.source, "score": _finite(e.score)} for e in self.examples]
        if self.label is not None:
            found["label"] = self.label
        return found


@dataclass(frozen=True)
class TopChannels:
    """The channels a prediction rested on.

    Attributes:
        layer: the layer's path.
        target: the class explained (its index), and ``target_name`` its name when known.
        score: the target's score (its logit).
        rule: how contributions were computed (``hookviz.concepts.relevance.RELEVANCE_RULES``).
        channels: the top channels, largest contribution first.
        accounted: the layer's channels' contributions together, over the score.
        atlas: the atlas folder the examples come from, or ``None``.
        channel_count: how many channels the layer has.
    """

    layer: str
    target: int
    target_name: str | None
    score: float
    rule: str
    channels: tuple[ChannelShare, ...]
    accounted: float
    atlas: Path | None = None
    channel_count: int = 0

    def figure(self, photo: np.ndarray, title: str = ""):
        """Its picture (``draw_top_channels``) over ``photo``, (H, W, 3) uint8."""
        return draw_top_channels(self, photo, title)

    def record(self) -> dict:
        """As report.json keeps it (``top_channels``)."""
        return {
            "layer": self.layer,
            "target": self.target_name if self.target_name is not None else self.target,
            "score": self.score,
            "rule": self.rule,
            "accounted": _finite(self.accounted),
            "atlas": None if self.atlas is None else str(self.atlas),
            "channels": [channel.record() for channel in self.channels],
        }


def top_channels(
    model,
    layer: str,
    image,
    target: str | int = "predicted",
    count: int = 5,
    *,
    rule: str = "gradient-x-activation",
    categories: Sequence[str] = (),
    atlas: str | Path | None = None,
    examples: int = 5,
) -> TopChannels:
    """The ``count`` channels of ``layer`` that contributed most to ``target``'s score on ``image``.

    Args:
        image: (1, C, H, W) or (C, H, W), preprocessed.
        target: ``predicted``, a class name or index.
        atlas: an atlas folder (``hookviz atlas --out``) of this layer, whose examples each channel shows.
        examples: how many of each channel's atlas examples to keep.

    Raises:
        UsageError: a count below 1, a class the model lacks, an atlas that does not hold the layer.
    """
    from hookviz.concepts.relevance import channel_relevance

    if count < 1:
        raise UsageError(f"{arg('top_channels', count)}: give 1 or more channels")
    batch = image if image.dim() == 4 else image[None]
    found = channel_relevance(model, layer, batch[:1], target, rule=rule, categories=categories, keep_maps=True)
    contributions, score = found.contributions[0], float(found.scores[0])
    assert found.outputs is not None  # kept: keep_maps
    order = np.argsort(-contributions, kind="stable")[:count]
    folder = None if atlas is None else Path(atlas)
    items = _atlas_items(folder, layer) if folder is not None else None
    channels = tuple(
        ChannelShare(
            int(c), float(contributions[c]), _share(contributions[c], score), found.outputs[0, c],
            _examples(items, int(c), examples, folder) if items is not None and folder is not None else (),
            _label(items, int(c)),
        )
        for c in order
    )  # fmt: skip
    index = int(found.classes[0])
    name = categories[index] if index < len(categories) else None
    accounted = _share(contributions.sum(), score)
    return TopChannels(layer, index, name, score, rule, channels, accounted, folder, len(contributions))


def with_top_channels(explanation, inputs, model, pictures):
    """``explanation`` with each layer's ``--top-channels`` N channels that gave most to its
    target, with the atlas's examples (one more pass over ``inputs``, the photo as the model
    takes it). A layer whose output is no map of channels, or a photo with no class to
    explain, gets none.

    Args:
        model: the ``LoadedModel`` that made the explanation.
        pictures: the run's ``PictureOptions`` (``top_channels``, ``relevance_rule``, ``atlas``).
    """
    from hookviz.tasks import get_task

    target = explanation.target
    # a channel's share is of one class's score among others: the task says whether its targets are such
    if target is None or not get_task(explanation.task).contrasts:
        return explanation
    layers = []
    for layer in explanation.layers:
        found = None
        if layer.layout is not None and layer.layout.kind == "nchw":  # a photo's map, channels first
            found = top_channels(
                model.module, layer.name, inputs, target.index, pictures.top_channels,
                rule=pictures.relevance_rule, categories=model.categories or (), atlas=pictures.atlas,
            )  # fmt: skip
        layers.append(replace(layer, top_channels=found))
    return replace(explanation, layers=tuple(layers))


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def _share(value, score: float) -> float:
    return float(value / score) if score != 0 else float("nan")


def _atlas_items(folder: Path, layer: str) -> list[dict]:
    """The layer's channels as the atlas's ``atlas.json`` lists them (its contract: ``hookviz/atlas/1``)."""
    path = folder / "atlas.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{arg('atlas', str(folder))}: no readable atlas.json there ({exc}); make one with hookviz atlas --out"
        ) from None
    layers = {entry.get("name"): entry for entry in document.get("layers", [])}
    if layer not in layers:
        held = ", ".join(map(str, layers)) or "none"
        raise UsageError(
            f"{arg('atlas', str(folder))}: it holds no layer {layer} (it holds {held}); make it with --layer {layer}"
        )
    return list(layers[layer].get("items", []))


def _examples(items: list[dict], channel: int, count: int, folder: Path) -> tuple[AtlasExample, ...]:
    item = next((entry for entry in items if entry.get("index") == channel), None)
    if item is None:
        return ()
    return tuple(
        AtlasExample(
            str(top.get("source")), float(top.get("score", float("nan"))), folder / top["crop"] if top.get("crop") else None
        )
        for top in item.get("top", [])[:count]
    )


def _label(items: list[dict] | None, channel: int) -> str | None:
    item = next((entry for entry in items or [] if entry.get("index") == channel), None)
    label = (item or {}).get("label")
    return label.get("concept") if isinstance(label, dict) else None


def draw_top_channels(top: TopChannels, photo: np.ndarray, title: str = ""):
    """The picture: one row per channel (its share, its map over the photo, its atlas examples).

    Args:
        photo: (H, W, 3) uint8, the photo as the model saw it.

    Returns:
        A matplotlib ``Figure`` (Agg canvas).
    """
    from hookviz.render.figures import Sheet, fitted, upsample

    shown = max((len(c.examples) for c in top.channels), default=0)
    cell, label_width = 1.3, 1.7
    width = label_width + cell * (1 + max(shown, 2)) + 0.2
    pitch = cell + 0.25  # room for each example's caption above it
    sheet = Sheet(width, 1.1 + pitch * len(top.channels))
    target = top.target_name if top.target_name is not None else f"class {top.target}"
    sheet.title(
        title
        or f"{top.layer}: the {len(top.channels)} channels that gave most to {target} ({top.score:.3g})\n"
        f"by {top.rule}; all {top.channel_count} channels together: {top.accounted:+.1%} of the score"
    )
    size = photo.shape[:2]
    for row, channel in enumerate(top.channels):
        y = 1.0 + row * pitch
        text = f"channel {channel.channel}\n{channel.share:+.1%} of the score\npeak {channel.activation.max():.3g} here"
        if channel.label:
            text += f"\n({channel.label})"
        sheet.figure.text(
            0.1 / sheet.width, 1 - (y + cell / 2) / sheet.height, fitted(text, label_width - 0.1), va="center", fontsize=9
        )
        photo_ax = sheet.axes(label_width, y, cell - 0.1, cell - 0.1)
        photo_ax.imshow(photo)
        photo_ax.imshow(upsample(channel.activation, size), cmap="viridis", alpha=0.55)
        if row == 0:
            photo_ax.set_title("its map on this photo", fontsize=8, pad=14)
            heading = "its best examples in the atlas" if shown else "no atlas given (--atlas DIR)"
            sheet.figure.text(
                (label_width + cell * (1 + max(shown, 1) / 2)) / sheet.width,
                1 - (y - 0.3) / sheet.height,
                heading,
                ha="center",
                va="bottom",
                fontsize=8,
            )
        photo_ax.axis("off")
        for k, example in enumerate(channel.examples):
            ax = sheet.axes(label_width + cell * (k + 1), y, cell - 0.1, cell - 0.1)
            _draw_example(ax, example)
    return sheet.figure


def _draw_example(ax, example: AtlasExample) -> None:
    from PIL import Image

    from hookviz.render.figures import fitted

    ax.axis("off")
    if example.crop is not None and example.crop.is_file():
        with Image.open(example.crop) as crop:
            ax.imshow(np.asarray(crop.convert("RGB")))
    else:
        ax.text(0.5, 0.5, "no crop", ha="center", va="center", fontsize=8, transform=ax.transAxes)
    ax.set_title(fitted(f"{Path(example.source).name} {example.score:.3g}", 1.2, 7), fontsize=7)
