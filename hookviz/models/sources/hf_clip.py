"""transformers' CLIP and SigLIP checkpoints (``CLIPModel``, ``SiglipModel``) as ``hf:ORG/NAME``
or ``hf:FOLDER``, explained through text prompts (``--prompt TEXT``, ``--prompts FILE``).

The model is wrapped (``clip_logits.TransformersClipLogits``) so that its forward returns
its own image-text logits over the prompts, the numbers ``model(**inputs).logits_per_image``
gives; the classification task then applies as it is, the prompts being its classes. The
prompts are tokenized once by the checkpoint's own tokenizer (``AutoTokenizer``), padded as
the model was trained: SigLIP to ``max_length``, CLIP to the longest prompt. A SigLIP's
probabilities are sigmoids, each prompt on its own (``LoadedModel.probabilities``), as its
model card computes them; a CLIP's the softmax over the prompts.

Preprocessing comes from the image processor (``huggingface.hf_preprocessing``); the token
layout is declared here: CLIP's vision tower puts a class token before its patch grid,
SigLIP's has none (an attention-pooling head reads every patch token).
"""

from __future__ import annotations

from collections.abc import Sequence

from hookviz.errors import UnknownModelError, UsageError, arg, first_line, hint
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import (
    STAND_IN_PROMPTS,
    LoadedModel,
    cut_prompts_note,
    prompts_notes,
    refuse_same_tokens,
    weights_kind,
)

__all__ = ["load", "text_tower"]

#: Files a tokenizer is read from; a folder with none of them has no tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "spiece.model", "tokenizer.model")
#: Files that could name a tokenizer's or processor's own Python code (an ``auto_map``).
_CODE_MAPS = ("tokenizer_config.json", "processor_config.json")
#: What each kind's tokens are padded to, as its model card does it.
_PADDING = {"clip": True, "siglip": "max_length"}


def text_tower(config) -> str | None:
    """``clip`` or ``siglip`` for a ``CLIPModel``'s or ``SiglipModel``'s config (not one saved
    as an image classifier, ``CLIPForImageClassification``), else ``None``."""
    from transformers import CLIPConfig, SiglipConfig

    architectures = [str(a) for a in getattr(config, "architectures", None) or ()]
    if any("ForImageClassification" in a for a in architectures):
        return None
    if isinstance(config, CLIPConfig):
        return "clip"
    if isinstance(config, SiglipConfig):
        return "siglip"
    return None


def load(where, config, weights: str, seed: int, prompts: Sequence[str] | None) -> LoadedModel:
    """The checkpoint ``where`` (a ``huggingface._Where``) holds, as a classifier over ``prompts``
    (``None``: only its layers are listed; a stand-in prompt serves, ``STAND_IN_PROMPTS``).

    Raises:
        UsageError: prompts for a checkpoint without a text tower, or none for one with it.
        UnknownModelError: the checkpoint has no tokenizer.
    """
    from transformers import AutoModel

    from hookviz.models.sources.hf_files import state_dict_file

    kind = text_tower(config)
    listing = prompts is None
    prompts = STAND_IN_PROMPTS if prompts is None and kind is not None else prompts or ()
    _check_prompts(where, kind, prompts)
    assert kind is not None  # _check_prompts refused the rest
    where.refuse_custom_code(_CODE_MAPS)
    tokens, notes = _tokens(where, kind, config, prompts)
    if weights_kind(weights) == "default":
        model, said_loading = where.pretrained(seed, AutoModel)
        notes += said_loading
        loaded = LoadedWeights(f"DEFAULT ({where.repo}, {where.origin})", None)
    else:
        model = where.from_config(config, seed, AutoModel)
        loaded = (
            LoadedWeights(f"none (random init, seed {seed})", None)
            if weights_kind(weights) == "none"
            else state_dict_file(model, weights)
        )
    from hookviz.anatomy.attention_blocks import transformers_attention
    from hookviz.models.sources.clip_logits import TransformersClipLogits

    wrapper = TransformersClipLogits(model.eval(), tokens).eval()
    preprocessing, said = where.preprocessing()
    size = int(config.vision_config.image_size)
    probabilities = "sigmoid" if kind == "siglip" else "softmax"
    notes += () if listing else prompts_notes(prompts, probabilities)
    return LoadedModel(
        where.name,
        wrapper,
        loaded.label,
        tuple(prompts),
        preprocessing,
        source="hf",
        input_size=(size, size),
        notes=notes + said + loaded.notes,
        declared_layout=_layout(kind, config),
        declared_attention=transformers_attention(wrapper),
        weights_sha256=loaded.sha256,
        probabilities=probabilities,
    )


def _check_prompts(where, kind: str | None, prompts: Sequence[str]) -> None:
    if kind is None:
        from hookviz.options.model import prompts_given_as

        named, flags = prompts_given_as(prompts)
        raise UsageError(
            f"{named}: {where.name} has no text tower; text prompts explain CLIP and SigLIP "
            f"models ({arg('model', 'open_clip:ARCH')}, or an hf: CLIPModel or SiglipModel); drop {flags}"
        )
    if not prompts:
        raise UsageError(
            f"{arg('model', where.name)}: a {'SigLIP' if kind == 'siglip' else 'CLIP'} model is explained by text "
            f"prompts; {hint('prompts')}"
        )


def _tokens(where, kind: str, config, prompts: Sequence[str]) -> tuple[dict, tuple[str, ...]]:
    """``prompts`` as the checkpoint's own tokenizer makes them, padded as the model expects
    and cut to its text tower's length, and the note that says which were cut.

    Raises:
        UnknownModelError: no tokenizer files, or ones transformers cannot read.
        UsageError: two prompts of the same tokens (``a cat``, ``A cat``: CLIP's tokenizer lowercases).
    """
    from transformers import AutoTokenizer

    from hookviz.models.sources.hub import offline, quiet

    if (not where.hub or offline()) and not any(where.file(name) for name in TOKENIZER_FILES):
        raise UnknownModelError(
            f"{arg('model', where.name)}: {where.where} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}), "
            "which its text prompts need; save the model's tokenizer (or processor) into it with save_pretrained"
        )
    try:
        with quiet():
            tokenizer = AutoTokenizer.from_pretrained(str(where.repo), **where.kwargs)
    except (OSError, ValueError, TypeError, ImportError, AttributeError) as exc:
        raise UnknownModelError(
            f"{arg('model', where.name)}: cannot read {where.where}'s tokenizer ({first_line(exc)}); "
            "save the model's tokenizer (or processor) into it with save_pretrained"
        ) from None
    limit = int(config.text_config.max_position_embeddings)
    try:  # a tokenizer_config.json naming another class loads, then cannot pad (no pad token)
        with quiet():  # transformers' warning of a sequence longer than the model's is the note's to say
            texts = [str(text) for text in prompts]
            counts = [len(ids) for ids in tokenizer(texts)["input_ids"]]
        tokens = tokenizer(texts, padding=_PADDING[kind], truncation=True, max_length=limit, return_tensors="pt")
    except (ValueError, TypeError, KeyError, AttributeError, RuntimeError) as exc:
        raise UnknownModelError(
            f"{arg('model', where.name)}: {where.where}'s tokenizer cannot tokenize the prompts ({first_line(exc)}); "
            "save the model's own tokenizer (or processor) into it with save_pretrained"
        ) from None
    kept = {key: tokens[key] for key in ("input_ids", "attention_mask") if key in tokens}
    refuse_same_tokens(prompts, [sum(parts, []) for parts in zip(*(kept[key].tolist() for key in kept))])
    return kept, cut_prompts_note(prompts, counts, limit)


def _layout(kind: str, config):
    """CLIP: a class token before the patch grid; SigLIP: the patch grid alone."""
    from hookviz.anatomy.featuremaps import DeclaredLayout

    patch = int(config.vision_config.patch_size)
    said = "class_embedding, " if kind == "clip" else "no class token, "
    name = "CLIPModel" if kind == "clip" else "SiglipModel"
    return DeclaredLayout(
        1 if kind == "clip" else 0, (patch, patch), False, (patch,), None, f"transformers ({name}): {said}patch_size={patch}"
    )
