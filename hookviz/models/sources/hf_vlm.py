"""transformers' vision-language models (``LlavaForConditionalGeneration`` and the other image-text
generators of ``AutoModelForImageTextToText``) as ``hf:FOLDER`` or ``hf:ORG/NAME``, with their
processors, explained token by token of their answer to ``--prompt`` (``hookviz.vlm``).

The model is loaded in float32 with eager attention (rollout and Chefer's relevancy read its
attention probabilities); the processor (tokenizer, image processor, chat template) with it. A
repository naming its own code (``auto_map``) is refused as every ``hf:`` model is."""

from __future__ import annotations

import json
from collections.abc import Sequence

from hookviz.errors import UnknownModelError, UsageError, arg, first_line
from hookviz.inputs.images import Preprocessing
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import LoadedModel, seeded, weights_kind, weights_only_loads

__all__ = ["TASK", "is_vision_language", "load", "read_config"]

#: The task of a vision-language model (its ``LoadedModel.task``): explained by ``hookviz.vlm``.
TASK = "describe"
#: Files that could name the processor's or tokenizer's own code.
_CODE_MAPS = ("config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json")


def read_config(where) -> dict:
    """The repository's config.json as JSON (``{}`` when it has none or it is unreadable)."""
    path = where.file("config.json")
    try:
        document = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def is_vision_language(config: dict) -> bool:
    """Whether a config.json is a vision-language generator's: a vision and a text config, an
    architecture that generates (``...ForConditionalGeneration``)."""
    architectures = [str(a) for a in config.get("architectures") or ()]
    both = "vision_config" in config and "text_config" in config
    return both and any(a.endswith("ForConditionalGeneration") for a in architectures)


def refuse_text_only(where, config: dict, prompts) -> None:
    """A language model without a vision tower given a prompt: refused in one line."""
    architectures = [str(a) for a in config.get("architectures") or ()]
    if (
        prompts
        and "vision_config" not in config
        and any(a.endswith(("ForCausalLM", "ForConditionalGeneration")) for a in architectures)
    ):
        raise UnknownModelError(
            f"{arg('model', where.name)}: {where.where} is a language model without a vision tower "
            f"({', '.join(architectures)}); a prompt about a photo needs a vision-language model (LLaVA, Qwen2-VL, ...)"
        )


def load(where, weights: str, seed: int, prompts: Sequence[str] | None) -> LoadedModel:
    """The model ``where`` (a ``huggingface._Where``) holds and its processor."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from hookviz.models.sources.hub import quiet

    where.refuse_custom_code(_CODE_MAPS)
    if prompts is not None and len(prompts) > 1:
        raise UsageError(f"{arg('prompts', list(map(str, prompts)))}: a vision-language model answers one prompt; give one")
    kind = weights_kind(weights)
    if kind == "other":  # a file, or a source's own name: loaded, it would pass for the folder's weights
        raise UsageError(
            f"{arg('weights', weights)}: a vision-language model loads the weights saved with it (DEFAULT) or random ones "
            f"(none); save the weights into the model's folder with save_pretrained"
        )
    processor = _processor(where)
    try:
        with seeded(seed), weights_only_loads(), quiet():
            if kind == "none":
                config = AutoConfig.from_pretrained(str(where.repo), **where.kwargs)
                model = AutoModelForImageTextToText.from_config(config, attn_implementation="eager")
            else:
                model = AutoModelForImageTextToText.from_pretrained(
                    str(where.repo), dtype="float32", attn_implementation="eager", **where.kwargs
                )
    except (OSError, ValueError, RuntimeError) as exc:
        raise where._fail(exc) from None
    label = f"DEFAULT ({where.repo}, {where.origin})" if kind == "default" else f"none (random init, seed {seed})"
    loaded = LoadedWeights(label, None)
    return LoadedModel(
        where.name,
        model.float().eval(),
        loaded.label,
        None,
        Preprocessing(),
        source="hf",
        task=TASK,
        prompts=tuple(str(p) for p in prompts or ()),
        processor=processor,
    )


def _processor(where):
    from transformers import AutoProcessor

    from hookviz.models.sources.hub import quiet

    try:
        with quiet():
            return AutoProcessor.from_pretrained(str(where.repo), **where.kwargs)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UnknownModelError(
            f"{arg('model', where.name)}: cannot read {where.where}'s processor ({first_line(exc)}); "
            "save the model's processor into it with save_pretrained"
        ) from None
