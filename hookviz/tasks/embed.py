"""Embeddings: the model's output is a vector per image (timm with ``num_classes=0``, a
Hugging Face backbone's pooled output, a factory's feature vector), which has no classes to
explain. It is explained by its similarity to a *concept*: the embedding of a reference photo
(``target_image``), as pytorch-grad-cam's ``SimilarityToConceptTarget`` of its embeddings
tutorial does. The objective of an image is the cosine similarity between its embedding and
the concept's, so on the same model and input its CAM is that tutorial's.

Each reference is its own concept and gets a CAM of its own (a panel of ``<layer>.cam.png``);
a folder of references is one concept, the mean of their embeddings. A reference is a photo
(a path, read and preprocessed as the explained photos are) or, from Python, the concept's
embedding itself (a (D,) or (1, D) tensor).

The references are the task's own options (``EmbedOptions``); giving one makes a model of
no stated task (a factory's, a bare module) or a classifier an embedding model. Their
embeddings are computed once, when the explainer is built (``Embed.bind``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hookviz.errors import HookvizError, TargetError, UsageError, arg, describe
from hookviz.options.declared import option
from hookviz.samples.batch import ModelInputs
from hookviz.tasks.base import ClassScore, ImagePrediction, Plan, stacked, targets_of_cam
from hookviz.tasks.classify import _describe, _select
from hookviz.tasks.computation import TaskBase, register_task

__all__ = ["Embed", "EmbedOptions", "EmbedPrediction", "embedding_of", "headless", "OBJECTIVE"]

#: What report.json says the objective is.
OBJECTIVE = "the cosine similarity of the image's embedding to the concept's (pytorch-grad-cam's SimilarityToConceptTarget)"
#: Where a Hugging Face model output (or a dict) keeps the image's embedding, first found first.
_EMBEDDING_KEYS = ("image_embeds", "pooler_output", "embeddings", "embedding", "features")


@dataclass(frozen=True)
class EmbedOptions:
    """The references an embedding is compared with (``target_image``), one concept each.

    Attributes:
        target_images: photo paths, folders of photos (one concept: their mean embedding) or,
            from Python, (D,) or (1, D) tensors (a concept's embedding) or images ``hookviz.explain`` takes.
        concepts: ``(name, embedding)`` per reference, filled in by ``Embed.bind``.
        references: each reference's ``identity.ReferenceIdentity`` (what report.json keeps,
            what ``--skip-existing`` compares), filled in by ``Embed.bind``.
    """

    target_images: tuple = option(
        (),
        help="Embedding models: explain the cosine similarity to this reference photo (a folder: its photos' mean "
        "embedding); repeat for one CAM each.",
        keyword="target_image",
        repeat=True,
    )
    concepts: tuple = field(default=(), compare=False, repr=False)
    references: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        given = self.target_images
        if given is None:
            given = ()
        elif isinstance(given, (str, Path)) or not isinstance(given, (tuple, list)):
            given = (given,)
        object.__setattr__(self, "target_images", tuple(given))

    def asked(self) -> dict:
        """What report.json keeps of them (what ``--skip-existing`` compares)."""
        return {"target_images": [_name(reference, k) for k, reference in enumerate(self.target_images)]}


@dataclass(frozen=True, kw_only=True)
class EmbedPrediction(ImagePrediction):
    """An embedding model's prediction for one image: its similarity to each concept (``top5``,
    best first; a ``ClassScore`` whose ``logit`` and ``probability`` are the cosine similarity)."""

    def to_json(self) -> dict:
        return {"objective": OBJECTIVE}


def _is_embedding(reference) -> bool:
    """Whether ``reference`` is a concept's embedding: a (D,) or (1, D) tensor (a model's
    output for one photo keeps its batch of one)."""
    import torch

    return isinstance(reference, torch.Tensor) and (reference.dim() == 1 or (reference.dim() == 2 and len(reference) == 1))


def _name(reference, k: int) -> str:
    if _is_embedding(reference):
        return f"concept {k + 1} (an embedding)"
    if isinstance(reference, (str, Path)):
        return str(reference)
    return f"reference {k + 1} ({type(reference).__name__})"


def headless(module) -> bool:
    """Whether ``module`` says it has no classifier head (timm's ``num_classes=0``, whoever built
    it: timm's source, a factory, a caller's module): its output is an embedding, not logits."""
    return getattr(module, "num_classes", None) == 0


def embedding_of(output, key: str | None = None):
    """The (N, D) embeddings in a model's output: a tensor (flattened past the batch: a
    pooled (N, D, 1, 1) map is a vector), or from a dict or ``ModelOutput`` its
    ``image_embeds`` or ``pooler_output``, or the entry ``key`` names.

    Raises:
        UsageError: no such tensor in the output.
    """
    import torch

    chosen = output
    if key is not None:
        chosen = _select(output, key)
    elif isinstance(output, dict):
        chosen = next((output[k] for k in _EMBEDDING_KEYS if output.get(k) is not None), None)
    elif isinstance(output, (tuple, list)):
        chosen = output[0] if output and isinstance(output[0], torch.Tensor) else None
    if not isinstance(chosen, torch.Tensor) or chosen.dim() < 2:
        raise UsageError(
            f"the model returned {_describe(output if chosen is None else chosen)}, not (batch, features) embeddings; "
            f"choose the entry with {arg('output_key', 'KEY')}"
        )
    if not chosen.is_floating_point():
        raise UsageError(
            f"the model returned {_describe(chosen)} of {str(chosen.dtype).removeprefix('torch.')}: no gradient flows "
            f"through it; return the float features before they are rounded, or choose another entry with {arg('output_key', 'KEY')}"
        )
    if chosen.flatten(1).shape[1] < 2:  # the cosine of two single numbers is their signs' product: ±1, flat
        raise UsageError(
            f"the model returned {_describe(chosen)}: an embedding of one value is ±1 similar to any reference, "
            f"with no gradient to explain; return (batch, features) embeddings, or choose another entry with {arg('output_key', 'KEY')}"
        )
    return chosen.flatten(1)


@dataclass
class EmbedPlan(Plan):
    """A plan that keeps the concepts it was made with, for ``Embed.scorer``."""

    task_options: EmbedOptions = field(default_factory=EmbedOptions)


# ----------------------------------------------------------------------------- the concepts


def _reference_photos(reference) -> list:
    """The photos one reference stands for: a folder's images, or the reference itself."""
    from hookviz.inputs.discovery import find_images

    if isinstance(reference, (str, Path)) and Path(reference).is_dir():
        return find_images([str(reference)])  # refuses a folder without images
    return [reference]


def _concept(module, explainer_prepare, reference, device: str, options, name: str):
    """The embedding of one reference: a (D,) or (1, D) tensor as it is, else the mean
    embedding of its photos."""
    import torch

    from hookviz.modelstate import evaluation

    if _is_embedding(reference):
        return _checked_embedding(reference, name)
    if isinstance(reference, torch.Tensor) and reference.dim() != 3:
        raise UsageError(
            f"{arg('target_image', name)}: a tensor of shape {tuple(reference.shape)} is neither an image (C, H, W) "
            "nor a concept's embedding, (D,) or (1, D) with D the model's embedding size; pass one of those"
        )
    try:
        photos = _reference_photos(reference)
    except HookvizError as exc:  # a folder without photos: its words say what to pass
        reason = _reason(exc)
        raise UsageError(f"{arg('target_image', name)}: {reason}{'' if '; ' in reason else _GIVE}") from None
    folder = len(photos) != 1 or photos[0] is not reference
    tensors = [_prepared(explainer_prepare, photo, name, folder) for photo in photos]
    with torch.no_grad(), evaluation(module):
        embeddings = [_embedding(module, tensor, device, options, name) for tensor in tensors]
    return torch.stack(embeddings).float().mean(dim=0)


_GIVE = "; pass a photo or a folder of photos"


def _checked_embedding(reference, name: str):
    """A concept given as its embedding, as a (D,) float tensor; one of zeros (no direction:
    its cosine with anything is 0) or of NaN (every similarity NaN) is refused."""
    import torch

    embedding = reference.detach().float().flatten()
    if not torch.isfinite(embedding).all():
        raise UsageError(
            f"{arg('target_image', name)}: the embedding holds NaN or infinite values, which are no concept; pass finite values"
        )
    if not embedding.any():
        raise UsageError(
            f"{arg('target_image', name)}: the embedding is all zeros, a vector with no direction to compare with; "
            "pass a photo or a nonzero embedding"
        )
    return embedding


def _reason(exc: HookvizError) -> str:
    """An input error's words, without the path it starts with."""
    return str(exc).split(": ", 1)[-1]


def _prepared(prepare, photo, name: str, folder: bool):
    """One reference photo, read and preprocessed; one that cannot be read is named, and within
    a folder (``folder``) so is the file, which the folder's name alone would not find."""
    try:
        return prepare(photo).tensor
    except HookvizError as exc:
        reason = _reason(exc)
        where, give = (f"{photo}: ", "; remove it from the folder or pass another") if folder else ("", _GIVE)
        give = give if folder or "; " not in reason else ""  # the image error says what to do already
        raise UsageError(f"{arg('target_image', name)}: {where}{reason}{give}") from None


def _embedding(module, tensor, device: str, options, name: str):
    """One reference photo's embedding; the model failing on it (foreign code, any error) is
    the first forward pass of the run: it is named in one line, as the dry pass names it."""
    try:
        return embedding_of(stacked(module, ModelInputs({"image": [tensor]}), device), options.output_key)[0]
    except HookvizError:
        raise
    except Exception as exc:
        shape = "x".join(str(side) for side in (1, *tensor.shape))
        raise UsageError(
            f"{arg('target_image', name)}: the model failed a forward pass on it, a {shape} input ({describe(exc)}); "
            f"if the model needs another input size, pass {arg('crop')} (or leave it out)"
        ) from None


def _identity(reference, name: str):
    """What a report keeps of one reference: its photos' identities, or a digest of its values."""
    import numpy as np
    import torch

    from hookviz.inputs.identity import ReferenceIdentity

    if isinstance(reference, (str, Path)):
        try:
            return ReferenceIdentity.of_photos(name, _reference_photos(reference))
        except OSError as exc:
            raise UsageError(f"{arg('target_image', name)}: cannot be read ({exc.strerror}); pass a readable photo") from None
    if isinstance(reference, torch.Tensor):
        return ReferenceIdentity.of_values(name, reference.detach().float().cpu().numpy().tobytes())
    return ReferenceIdentity.of_values(name, np.ascontiguousarray(np.asarray(reference)).tobytes())


def _check_paths(references: Sequence) -> None:
    """Refuse an empty path (``Path("")`` is the current folder: its photos would become the
    concept unasked) and a path given twice (the same concept twice, under one name)."""
    seen: dict = {}
    for reference in references:
        if not isinstance(reference, (str, Path)):
            continue
        if isinstance(reference, str) and not reference.strip():
            raise UsageError(f"{arg('target_image')} {reference!r}: an empty path; pass a photo or a folder of photos")
        where = Path(reference).resolve()
        if where in seen:
            raise UsageError(f"{arg('target_image', reference)}: given twice (also as {seen[where]}), the same concept; drop one")
        seen[where] = str(reference)


# ----------------------------------------------------------------------------- the plan

#: A similarity this close to 1 is float32 rounding of "the same embedding".
_IDENTICAL = 1 - 1e-6


def _identical_notes(scores: Sequence[ClassScore]) -> tuple[str, ...]:
    """The note for each reference whose embedding the photo's equals: the similarity is at its
    maximum there, where its gradient vanishes, so what its CAM draws is rounding noise."""
    return tuple(
        f"{arg('target_image', score.name)}: the photo's embedding equals the reference's (cos={score.logit:.6f}), "
        "where the similarity is at its maximum and its gradient vanishes, so its CAM shows rounding noise; "
        "explain the photo against another reference"
        for score in scores
        if score.logit >= _IDENTICAL
    )


@register_task
class Embed(TaskBase):
    name = "embed"
    words = "embedding similarity"
    priority = 5  # an embedding looks like logits: it is chosen by its source or by a reference, not recognised
    options_type = EmbedOptions
    cams_as_panels = True  # one CAM per reference
    probability = None  # a cosine similarity, to a reference the model embedded itself
    class_targets = False
    target_words = "a similarity to references it embedded"

    def recognises(self, output) -> bool:
        return False

    def chosen_by(self, options: EmbedOptions) -> bool:
        """A reference makes a model of no stated task, or a classifier, an embedding model."""
        return bool(options.target_images)

    def torchvision_preprocessing(self, transform, pretrained: bool):
        from hookviz.tasks.classify import Classify

        return Classify().torchvision_preprocessing(transform, pretrained)

    def check(self, options) -> None:
        if str(options.target).strip().lower() not in ("top1", "top-1", "top"):
            raise TargetError(
                f"{arg('target', options.target)}: an embedding has no classes; "
                f"explain its similarity to a photo with {arg('target_image', 'REF')} instead"
            )
        if options.objective != "logit":
            raise UsageError(
                f"{arg('objective', options.objective)}: an embedding's objective is its cosine similarity "
                f"to {arg('target_image')}; drop {arg('objective')}"
            )
        if options.topk > 1:
            raise UsageError(
                f"{arg('topk', options.topk)}: an embedding model draws one CAM per {arg('target_image')}; drop {arg('topk')}"
            )

    def bind(self, task_options: EmbedOptions, model, prepare, device: str, options) -> EmbedOptions:
        """``task_options`` with each reference's embedding computed by ``model``'s module on ``device``;
        ``prepare`` reads and preprocesses a photo as the explained ones are.

        Raises:
            UsageError: no reference, or one that is not a photo.
        """
        if not task_options.target_images:
            raise UsageError(
                f"{arg('model', model.name)}: its output is an embedding, not class logits; explain its similarity "
                f"to a reference photo with {arg('target_image', 'REF')}"
            )
        _check_paths(task_options.target_images)
        names = [_name(reference, k) for k, reference in enumerate(task_options.target_images)]
        concepts = tuple(
            (name, _concept(model.module, prepare, reference, device, options, name))
            for name, reference in zip(names, task_options.target_images)
        )
        references = tuple(_identity(reference, name) for name, reference in zip(names, task_options.target_images))
        return replace(task_options, concepts=concepts, references=references)

    def _similarities(self, output, options, task_options: EmbedOptions):
        import torch

        embeddings = embedding_of(output, options.output_key)
        columns = []
        for name, concept in task_options.concepts:
            if concept.numel() != embeddings.shape[1]:
                raise UsageError(
                    f"{arg('target_image', name)}: an embedding of {concept.numel()} values, but the model's "
                    f"have {embeddings.shape[1]}; pass a photo, or this model's embedding as a ({embeddings.shape[1]},) "
                    f"or (1, {embeddings.shape[1]}) tensor"
                )
            concept = concept.to(device=embeddings.device, dtype=embeddings.dtype)
            columns.append(torch.nn.functional.cosine_similarity(embeddings, concept[None], dim=1))
        return torch.stack(columns, dim=1)  # (N, concepts)

    def plan(self, output, options, categories: Sequence[str] | None, count: int, task_options=None) -> Plan:
        similarities = self._similarities(output, options, task_options)
        names = [name for name, _ in task_options.concepts]
        keys = ["target", *(f"concept{k + 1}" for k in range(1, len(names)))]
        objective = similarities[:, 0].sum()
        cams: list[tuple[str, object]] = []
        if options.cam != "none":
            cams = [("target", None), *((key, similarities[:, k].sum()) for k, key in enumerate(keys) if k)]
        values = similarities.detach().float().cpu().numpy()
        predictions: list[ImagePrediction] = []
        for i in range(count):
            scores = [ClassScore(k, name, float(values[i, k]), float(values[i, k])) for k, name in enumerate(names)]
            ranked = sorted(scores, key=lambda score: -score.logit if score.logit == score.logit else float("inf"))
            predictions.append(
                EmbedPrediction(
                    target=scores[0], top5=tuple(ranked[:5]), cam_targets=dict(zip(keys, scores)), notes=_identical_notes(scores)
                )
            )
        return EmbedPlan(objective, cams, predictions, values, task_options)

    def scorer(self, plan: Plan, key: str, options):
        """The cosine similarity to the concept CAM ``key`` explains (see ``Task.scorer``)."""
        concept = next((target.index for target in targets_of_cam(plan, key) if target is not None), 0)
        bound = plan.task_options  # type: ignore[attr-defined]

        def score(output, images):
            return self._similarities(output, options, bound)[:, concept]

        return score

    def objective_name(self, options, task_options=None) -> str:
        return "cosine"

    def objective_words(self, options, task_options=None) -> str:
        return "the cosine similarity"
