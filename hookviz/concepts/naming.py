"""Names for channels from a vocabulary, as CLIP-Dissect (Oikarinen and Weng, 2023) gives them:
each concept's soft weighted pointwise mutual information (SoftWPMI) with a channel's best
examples, by a CLIP model's image-text similarity.

For channel ``e`` with its best examples ranked ``k = 0 .. K-1`` and concept ``d``:

- ``P(d | x) = softmax_d(a * cos(image(x), text(d)))`` over the vocabulary (``a = 10``);
- each example is in the channel's concept set with a probability falling with its rank,
  ``p_k = p_start - k / K * (p_start - p_end)`` (0.998 to 0.97);
- ``log P(d | e) = sum_k log(1 + p_k * (P(d | x_k) - 1) + min_prob)``;
- ``log P(d) = logsumexp_e log P(d | e) - log(channels)``, the mean over the layer's channels;
- ``SoftWPMI(d, e) = log P(d | e) - lam * log P(d)`` (``lam = 1``).

A channel is named by the concept of the highest score; the runner-up is the second. The CLIP
model is open_clip's (``--label-with open_clip:ARCH[/TAG]``), its weights read from the Hugging
Face cache: nothing is downloaded where the network is off, and the one-line error then says
where to put them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hookviz.errors import UsageError, WeightsError, arg

__all__ = [
    "ChannelName",
    "SoftWpmi",
    "soft_wpmi",
    "channel_names",
    "read_vocabulary",
    "ClipConcepts",
    "clip_concepts",
    "label_atlas",
]


@dataclass(frozen=True)
class SoftWpmi:
    """CLIP-Dissect's constants (its ``soft_wpmi`` defaults)."""

    a: float = 10.0
    lam: float = 1.0
    p_start: float = 0.998
    p_end: float = 0.97
    min_prob: float = 1e-7


@dataclass(frozen=True)
class ChannelName:
    """A channel's name: the concept of the highest SoftWPMI, and the runner-up (``None`` for a
    vocabulary of one word)."""

    concept: str
    score: float
    runner_up: str | None
    runner_up_score: float | None

    def asdict(self) -> dict:
        """As atlas.json keeps it (``label``)."""
        return {
            "concept": self.concept,
            "score": self.score,
            "runner_up": self.runner_up,
            "runner_up_score": self.runner_up_score,
        }


def soft_wpmi(similarities: np.ndarray, constants: SoftWpmi = SoftWpmi()) -> np.ndarray:
    """SoftWPMI of each concept with each channel (see the module's docstring).

    Args:
        similarities: (channels, K, concepts): the cosine similarity of each channel's k-th best
            example (best first) with each concept's text.

    Returns:
        (channels, concepts), float64.
    """
    sims = np.asarray(similarities, dtype=np.float64)
    scaled = constants.a * sims
    scaled -= scaled.max(axis=-1, keepdims=True)
    probability = np.exp(scaled) / np.exp(scaled).sum(axis=-1, keepdims=True)  # P(d | x), over the vocabulary
    count = sims.shape[1]
    ranks = np.arange(count, dtype=np.float64) / count
    inside = (constants.p_start - ranks * (constants.p_start - constants.p_end))[None, :, None]
    given = np.log(1 + inside * (probability - 1) + constants.min_prob).sum(axis=1)  # log P(d | e)
    peak = given.max(axis=0, keepdims=True)
    prior = peak + np.log(np.exp(given - peak).sum(axis=0, keepdims=True)) - np.log(given.shape[0])  # log P(d)
    return given - constants.lam * prior


def channel_names(scores: np.ndarray, vocabulary: Sequence[str]) -> list[ChannelName]:
    """Each channel's best concept and runner-up from its row of ``soft_wpmi``'s scores."""
    names = []
    for row in np.asarray(scores, dtype=np.float64):
        order = np.argsort(-row, kind="stable")
        second = order[1] if len(order) > 1 else None
        names.append(
            ChannelName(
                vocabulary[order[0]],
                float(row[order[0]]),
                None if second is None else vocabulary[second],
                None if second is None else float(row[second]),
            )
        )
    return names


def read_vocabulary(path: str | Path) -> tuple[str, ...]:
    """The concepts of ``path``: one a line, blank lines and ``#`` comments skipped, each once.

    Raises:
        UsageError: the file cannot be read, or names fewer than two concepts.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"{arg('vocabulary', str(path))}: cannot read it ({getattr(exc, 'strerror', None) or exc}); give a text file of one concept a line"
        ) from None
    words = tuple(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")))
    if len(words) < 2:
        raise UsageError(f"{arg('vocabulary', str(path))}: it names {len(words)} concept(s); give at least two, one a line")
    return words


@dataclass(frozen=True)
class ClipConcepts:
    """A CLIP model's image tower and its vocabulary's text features, normalised.

    Attributes:
        embed: (N, 3, H, W) preprocessed images -> (N, D) normalised image features.
        text: (concepts, D) normalised text features.
        prepare: a PIL image -> its (3, H, W) tensor as the model expects it.
        vocabulary: the concepts, in ``text``'s order.
        weights: what was loaded, in words.
    """

    embed: Callable
    text: Any
    prepare: Callable
    vocabulary: tuple[str, ...]
    weights: str

    def similarities(self, crops: Sequence[Sequence], batch: int = 32) -> np.ndarray:
        """(channels, K, concepts): each channel's examples' (PIL images, best first) cosine
        similarity with each concept; every channel gives the same number of examples."""
        import torch

        flat = [image for examples in crops for image in examples]
        counts = {len(examples) for examples in crops}
        if len(counts) != 1:
            raise UsageError("every channel needs the same number of examples to be named; the atlas holds fewer for some")
        features = []
        with torch.no_grad():
            for start in range(0, len(flat), batch):
                tensors = torch.stack([self.prepare(image) for image in flat[start : start + batch]])
                features.append(self.embed(tensors))
        sims = (torch.cat(features) @ self.text.T).double().cpu().numpy()
        return sims.reshape(len(crops), counts.pop(), len(self.vocabulary))


def clip_concepts(spec: str, vocabulary: Sequence[str], *, weights: str = "DEFAULT", seed: int = 0) -> ClipConcepts:
    """open_clip's model ``spec`` (``open_clip:ARCH[/TAG]``) with the vocabulary's text encoded.

    Args:
        weights: ``DEFAULT`` (the tag's, from the Hugging Face cache), ``none`` (seeded random,
            for tests) or a state_dict file.

    Raises:
        UsageError: a spec that is no open_clip model.
        WeightsError: in one line saying where to put the weights, when they are not cached.
    """
    if not spec.startswith("open_clip:"):
        raise UsageError(
            f"{arg('label_with', spec)}: names come from an open_clip model; give open_clip:ARCH (as open_clip:ViT-B-32)"
        )
    import torch.nn.functional as F

    from hookviz.inputs.images import load_image, prepare
    from hookviz.models.loading import load_model

    try:
        loaded = load_model(spec, weights=weights, seed=seed, prompts=tuple(vocabulary))
    except WeightsError as exc:  # said of --weights, which the labeller is not given: its name, and no --weights advice
        said = str(exc).replace(arg("weights", "DEFAULT"), arg("label_with", spec), 1)
        raise WeightsError(said.split(f", or pass {arg('weights', 'PATH')}")[0]) from None
    wrapper: Any = loaded.module
    processing = loaded.preprocessing

    def embed(images):
        return F.normalize(wrapper.visual(images), dim=-1)

    def prepared(image):
        return prepare(load_image(image), processing).tensor

    return ClipConcepts(embed, wrapper.text_features, prepared, tuple(vocabulary), loaded.weights)


def label_atlas(document: dict, folder: Path, concepts: ClipConcepts, constants: SoftWpmi = SoftWpmi()) -> dict:
    """``document`` (an atlas.json, ``hookviz/atlas/1``) with each channel's ``label``: its name
    from the crops of its top examples (``folder`` holds them), by ``soft_wpmi`` over each layer's
    channels. Channels with fewer examples than the layer's most (a dataset smaller than ``--top``)
    are named from their first ones, each layer with as many examples as every channel has.

    Returns:
        A new document; ``document`` is left as it was.
    """
    from PIL import Image

    layers = []
    for layer in document.get("layers", []):
        items = list(layer.get("items", []))
        count = min((len(item.get("top", [])) for item in items), default=0)
        if not items or count == 0:
            layers.append(layer)
            continue
        crops = []
        for item in items:
            images = []
            for top in item["top"][:count]:
                with Image.open(folder / top["crop"]) as crop:
                    images.append(crop.convert("RGB"))
            crops.append(images)
        names = channel_names(soft_wpmi(concepts.similarities(crops), constants), concepts.vocabulary)
        labelled = [{**item, "label": name.asdict()} for item, name in zip(items, names)]
        layers.append({**layer, "items": labelled})
    return {**document, "layers": layers}
