"""The model, samples and layers of an atlas, loaded and checked once, and the one way its
forward passes run (``forward``): the collection and the crops share it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from hookviz.atlas.dataset import Dataset
from hookviz.atlas.request import AtlasRequest
from hookviz.errors import UsageError, arg

__all__ = ["AtlasPlan", "plan_atlas", "TRUE", "PREDICTED"]

#: Where the classes come from: the folders (ImageFolder), or the model's predictions.
TRUE, PREDICTED = "true", "predicted"


@dataclass(frozen=True)
class AtlasPlan:
    """``model``: the ``LoadedModel``; ``kind``/``settings``: its sample kind and settings;
    ``specs``: the layers' ``LayerSpec``s; ``ids``: the samples this process takes (places
    in ``dataset.paths``); ``classes``: ``TRUE``, ``PREDICTED`` or ``None``; ``concepts``: the
    ``ClipConcepts`` that name the channels (``--label-with``), or ``None``."""

    request: AtlasRequest
    model: Any = field(repr=False)
    kind: Any = field(repr=False)
    settings: Any
    specs: tuple
    dataset: Dataset = field(repr=False)
    ids: tuple[int, ...] = field(repr=False)
    classes: str | None = None
    concepts: Any = field(default=None, repr=False)

    @property
    def rankings(self) -> tuple[str, ...]:
        return self.request.rankings

    @property
    def gradient(self) -> bool:
        """Whether the collection's pass keeps gradients: relevance by gradient x activation
        (LRP's relevance comes from a pass of its own)."""
        return self.request.relevance is not None and self.request.relevance_rule != "lrp"

    def recipe(self) -> dict:
        """The request's recipe, with the sources and a digest of the samples found in them."""
        digest = hashlib.sha256("\n".join(map(str, self.dataset.paths)).encode("utf-8", "surrogateescape")).hexdigest()
        return {**self.request.recipe(), "sources": list(self.request.sources), "samples": digest}

    def loader(self, ids, limit: int):
        """A started ``ImageLoader`` of the samples ``ids``, in that order, prepared for the model."""
        from hookviz.inputs.loader import ImageLoader
        from hookviz.options import DEFAULT_MAX_PIXELS

        paths = [self.dataset.paths[i] for i in ids]
        loader = ImageLoader(paths, DEFAULT_MAX_PIXELS, limit, kind=self.kind, settings=self.settings)
        loader.set_preprocessing(self.model.preprocessing)
        return loader.start()

    def forward(self, samples):
        """The model's output on ``samples`` (prepared ``Sample``s), one batch."""
        from hookviz.modelstate import model_dtype
        from hookviz.samples import SampleBatch

        module = self.model.module
        args, keywords = (
            SampleBatch(samples, None, module, self.request.device, None)
            .inputs()
            .arguments(self.request.device, model_dtype(module))
        )
        return module(*args, **keywords)

    def predicted(self, output) -> list[str | None]:
        """Each row's predicted class, as the model's categories name it."""
        import torch

        logits = output if torch.is_tensor(output) else next((t for t in output if torch.is_tensor(t)), None)
        categories = self.model.categories
        if logits is None or logits.dim() != 2 or not categories or logits.shape[1] != len(categories):
            return [None] * (0 if logits is None else logits.shape[0])
        return [str(categories[i]) for i in logits.argmax(dim=1).tolist()]


def plan_atlas(request: AtlasRequest, notes: list[str]) -> AtlasPlan:
    """Load the model, find the samples and resolve the layers.

    Raises:
        UsageError: an unknown model or layer, sources that name no sample.
    """
    from hookviz.anatomy.layers import resolve_layers
    from hookviz.atlas.concepts import prepare_concepts
    from hookviz.atlas.dataset import find_dataset
    from hookviz.models.loading import load_model
    from hookviz.runs.cluster import shard_of
    from hookviz.samples import get_sample_kind, kind_settings, settings_for_model

    model = load_model(request.model, request.weights, request.seed)
    if request.device != "cpu":
        model.module.to(request.device)  # type: ignore[attr-defined]
    kind = get_sample_kind(model.sample_kind)
    settings = settings_for_model(kind, kind_settings(kind, request.sample_options, model.name), model)
    dataset = find_dataset(kind, settings, request.sources, [request.out], notes)
    specs = tuple(resolve_layers(model.module, list(request.layers)))
    ids = tuple(shard_of(range(len(dataset.paths)), request.shard))
    if not ids:
        raise UsageError(
            f"{arg('shard', f'{request.shard[0]}/{request.shard[1]}' if request.shard else '')}: this slice holds no sample"
        )
    classes = TRUE if dataset.has_classes else PREDICTED if model.categories else None
    concepts = prepare_concepts(request, model.sample_kind)
    return AtlasPlan(request, model, kind, settings, specs, dataset, ids, classes, concepts)
