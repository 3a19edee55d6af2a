"""open_clip's CLIP models, explained through text prompts: ``--model open_clip:ViT-B-32``
(any name ``open_clip.list_models()`` gives), optionally with a pretrained tag
(``open_clip:ViT-B-32/laion2b_s34b_b79k``), and ``--prompt TEXT`` (repeatable) or
``--prompts FILE``.

The model is wrapped (``ClipLogits``) so that its forward returns CLIP's own image-text
logits over the prompts: ``logit_scale * normalize(image features) @ normalize(text
features).T`` (plus SigLIP's ``logit_bias``: a model with one gets sigmoid probabilities, each
prompt on its own, as SigLIP is trained). The text features are computed once, under
``no_grad``, when the model is loaded with its prompts; the wrapper keeps only the image tower
(``visual``), so layer paths read ``visual.transformer.resblocks.11.ln_1``. The classification
task then applies as it is: the categories are the prompts.

* ``--weights DEFAULT``: the tag the name gives, else the first tag open_clip lists for the
  architecture, read from the Hugging Face cache (see ``hub``); ``none``: open_clip's own
  random initialisation, seeded; a file: a state_dict of the whole CLIP model.
* Preprocessing: the model's ``preprocess_cfg`` (size, mean, std, interpolation, resize mode).

open_clip is an optional extra, imported only when an ``open_clip:`` name is loaded or listed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator, Sequence

from hookviz.errors import UnknownModelError, UsageError, WeightsError, arg, did_you_mean, first_line, hint
from hookviz.inputs.images import INTERPOLATIONS, Preprocessing
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import (
    STAND_IN_PROMPTS,
    LoadedModel,
    cut_prompts_note,
    prompts_notes,
    random_or_file,
    refuse_same_tokens,
    register_source,
    seeded,
    weights_kind,
    weights_only_loads,
)

__all__ = ["OpenClipSource", "ClipLogits", "PREFIX", "INSTALL"]

PREFIX = "open_clip:"
INSTALL = "pip install 'hookviz[clip]'"
#: The file names open_clip's weights have in a Hugging Face repository, safest first.
HUB_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def _installed() -> bool:
    return importlib.util.find_spec("open_clip") is not None


def _import_open_clip(name: str | None = None):
    if not _installed():
        raise UnknownModelError(f"{arg('model', name or PREFIX + 'ARCH')} needs open_clip: {INSTALL}")
    import open_clip

    return open_clip


class _FromOpenClip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}open_clip{os.sep}" not in record.pathname


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Drop open_clip's warnings ("No pretrained weights loaded"): hookviz's report says what
    was loaded. open_clip logs them on the root logger, whose ``logging.warning`` would give a
    process without logging set up a handler (``basicConfig``): a handler of hookviz's stands
    in while the block runs, and both are taken off after it."""
    root, stand_in, drop = logging.getLogger(), logging.NullHandler(), _FromOpenClip()
    root.addHandler(stand_in)
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
        root.removeHandler(stand_in)


def _split(name: str) -> tuple[str, str | None]:
    """``open_clip:ARCH/TAG`` -> (ARCH, TAG or None)."""
    arch, _, tag = name[len(PREFIX) :].partition("/")
    return arch, tag or None


@register_source
class OpenClipSource:
    name = "open_clip"
    priority = 10  # prefixed names first
    prefix = PREFIX
    #: Its models have a text tower: ``load`` takes the prompts they are explained by.
    takes_prompts = True

    def about(self) -> str:
        if not _installed():
            return f"open_clip's CLIP models with text prompts (open_clip:ARCH --prompt TEXT): {INSTALL}"
        return f"open_clip {_import_open_clip().__version__}: --model open_clip:ARCH[/TAG] --prompt TEXT; DEFAULT weights from the Hugging Face cache"

    def claims(self, name: str) -> bool:
        return name.startswith(PREFIX)

    def names(self) -> list[str]:
        return [PREFIX + n for n in _import_open_clip().list_models()] if _installed() else []

    def describe(self, name: str) -> str:
        tags = _import_open_clip().list_pretrained_tags_by_model(_split(name)[0])
        return f"DEFAULT {tags[0]}" if tags else "no pretrained weights"

    def task_of(self, name: str) -> str:
        from hookviz.tasks import DEFAULT_TASK

        return DEFAULT_TASK

    def load(
        self, name: str, weights: str, seed: int, trust_checkpoint: bool = False, prompts: Sequence[str] | None = ()
    ) -> LoadedModel:
        """``prompts=None``: only its layers are listed; a stand-in prompt serves (``STAND_IN_PROMPTS``)."""
        if _installed() and prompts is not None and not prompts:  # said before open_clip's slow import
            raise UsageError(f"{arg('model', name)}: a CLIP model is explained by text prompts; {hint('prompts')}")
        open_clip = _import_open_clip(name)
        arch, tag = _split(name)
        if arch not in open_clip.list_models():
            known = [PREFIX + n for n in open_clip.list_models()]
            raise UnknownModelError(
                f"{arg('model', name)}: open_clip has no such model{did_you_mean(name, known)}; {hint('list_models')}"
            )
        if tag is not None and weights_kind(weights) != "default":
            raise WeightsError(f"{arg('weights', weights)}: {name} names its weights ({tag}); drop {arg('weights')}")
        if weights_kind(weights) == "default":
            model, label = _pretrained(open_clip, name, arch, tag, seed)
            loaded = LoadedWeights(label, None)
        else:
            with seeded(seed), _quiet():
                model = open_clip.create_model(arch, pretrained=None)
            loaded = random_or_file(model, weights, seed)
        texts = STAND_IN_PROMPTS if prompts is None else tuple(prompts)
        tokens, cut = _tokens(open_clip, arch, texts)
        wrapper = ClipLogits(model, tokens).eval()
        from hookviz.anatomy.attention_blocks import open_clip_attention
        from hookviz.anatomy.geometry import declared_layout

        preprocessing, notes = _preprocessing(model)
        probabilities = _probabilities(model)
        said = cut + (prompts_notes(texts, probabilities) if prompts is not None else ())
        return LoadedModel(
            name,
            wrapper,
            loaded.label,
            texts,
            preprocessing,
            source=self.name,
            input_size=_pair(model.visual.image_size),
            notes=said + notes + loaded.notes,
            weights_sha256=loaded.sha256,
            declared_layout=declared_layout(model.visual),
            declared_attention=open_clip_attention(wrapper),
            probabilities=probabilities,
        )


def _probabilities(model) -> str:
    """``sigmoid`` for a SigLIP (a model with a ``logit_bias``: trained with a sigmoid loss, each
    prompt scored on its own), else ``softmax`` over the prompts, as CLIP's zero-shot classifier does."""
    return "softmax" if getattr(model, "logit_bias", None) is None else "sigmoid"


def _tokens(open_clip, arch: str, prompts: Sequence[str]):
    """The prompts' tokens, cut to the tokenizer's context length, and the note that says which were cut.

    Raises:
        UsageError: two prompts of the same tokens (``a cat``, ``A cat``: CLIP's tokenizer lowercases).
    """
    tokenizer = open_clip.get_tokenizer(arch)
    texts = [str(text) for text in prompts]  # plain texts: a Prompt's file and line are for messages
    counts = _token_counts(tokenizer, texts)
    limit = getattr(tokenizer, "context_length", None)
    cut = cut_prompts_note(prompts, counts, int(limit)) if counts and limit else ()
    tokens = tokenizer(texts)
    refuse_same_tokens(prompts, tokens.tolist())
    return tokens, cut


def _token_counts(tokenizer, prompts: Sequence[str]) -> list[int]:
    """How many tokens each prompt is, its start and end tokens included: CLIP's own BPE
    (``SimpleTokenizer.encode``) or a Hugging Face tokenizer inside open_clip's wrapper
    (SigLIP's); ``[]`` for a tokenizer of another kind."""
    if callable(getattr(tokenizer, "encode", None)):
        return [len(tokenizer.encode(text)) + 2 for text in prompts]
    inner, clean = getattr(tokenizer, "tokenizer", None), getattr(tokenizer, "clean_fn", lambda text: text)
    if callable(inner):
        return [len(inner(clean(text))["input_ids"]) for text in prompts]
    return []


def _pretrained(open_clip, name: str, arch: str, tag: str | None, seed: int):
    """``arch`` with the weights of ``tag`` (default: open_clip's first for it), found (or
    fetched) in the Hugging Face cache by hookviz and handed to open_clip as a local file."""
    from hookviz.models.sources.hub import fetch

    label = arg("weights", "DEFAULT") if tag is None else arg("model", name)
    tags = open_clip.list_pretrained_tags_by_model(arch)
    if not tags:
        raise WeightsError(
            f"{label}: open_clip has no pretrained weights for {arch}; pass {arg('weights', 'none')} or {arg('weights', 'PATH')}"
        )
    tag = tag or tags[0]
    if tag not in tags:
        raise UnknownModelError(f"{arg('model', name)}: open_clip has no weights {tag!r} for {arch}; choose {', '.join(tags)}")
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    parts = cfg.get("hf_hub", "").strip("/").split("/")  # "org/name/" or "org/name/file.bin"
    if len(parts) < 2:
        raise WeightsError(f"{label}: {arch}/{tag} is not on the Hugging Face hub; pass {arg('weights', 'PATH')} to its file")
    repo = "/".join(parts[:2])
    path = fetch(repo, (parts[2],) if len(parts) > 2 else HUB_FILES, label)
    # Given a file, open_clip knows no tag: what the tag's config says of the model is passed on.
    kwargs = {
        "force_quick_gelu": bool(cfg.get("quick_gelu", False)),
        "force_preprocess_cfg": {k: cfg[k] for k in ("mean", "std", "interpolation", "resize_mode") if k in cfg},
    }
    try:
        with seeded(seed), weights_only_loads(), _quiet():
            model = open_clip.create_model(arch, pretrained=str(path), **kwargs)
    except Exception as exc:  # open_clip's loaders raise many kinds: one line naming the file
        raise WeightsError(
            f"{label}: could not load {arch}/{tag} from {path} ({first_line(exc)}); delete the file to fetch it again"
        ) from None
    return model, f"DEFAULT ({tag}: {repo}, Hugging Face cache)"


def _pair(value) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _preprocessing(model) -> tuple[Preprocessing, tuple[str, ...]]:
    """open_clip's eval transform of ``model`` (resize the shorter side and crop the centre, or
    squash the whole photo), and notes where hookviz approximates it; where it does not,
    open_clip's own transform object is kept on it (``Preprocessing.transform``)."""
    from dataclasses import replace

    from hookviz.inputs.transforms import WeightsTransform

    processing, notes = _read_preprocess_cfg(model)
    if notes:  # approximated: the object would not describe the fields
        return processing, notes
    import open_clip

    config = getattr(model.visual, "preprocess_cfg", None) or {}
    transform = open_clip.image_transform(
        _pair(config.get("size", model.visual.image_size)),
        False,
        mean=processing.mean,
        std=processing.std,
        resize_mode=config.get("resize_mode"),
        interpolation=processing.interpolation,
    )
    return replace(processing, transform=WeightsTransform(transform, "open_clip's eval transform")), notes


def _read_preprocess_cfg(model) -> tuple[Preprocessing, tuple[str, ...]]:
    config = getattr(model.visual, "preprocess_cfg", None) or {}
    height, width = _pair(config.get("size", model.visual.image_size))
    notes = []
    if height != width:
        notes.append(f"open_clip's input size is {height}x{width}; hookviz feeds squares, so {height}x{height}")
    interpolation = config.get("interpolation", "bicubic")
    if interpolation not in INTERPOLATIONS:
        notes.append(f"open_clip's interpolation {interpolation!r} replaced by bicubic")
        interpolation = "bicubic"
    resize_mode = config.get("resize_mode") or "shortest"
    mode = "whole" if resize_mode == "squash" else "crop"  # SigLIP's weights squash the whole photo
    if resize_mode not in ("shortest", "squash"):
        notes.append(f"open_clip's resize_mode {resize_mode!r} approximated by a centre crop")
    mean, std = tuple(config.get("mean", ())), tuple(config.get("std", ()))
    common = {"resize": height, "size": height, "mode": mode, "interpolation": interpolation}
    if len(mean) != 3 or len(std) != 3:
        return Preprocessing(**common), tuple(notes)
    return Preprocessing(mean=mean, std=std, **common), tuple(notes)


# The wrapper is defined on first use: torch is not imported by ``hookviz --help``.
def ClipLogits(model, tokens):  # noqa: N802  (it builds a module)
    """``model`` (an open_clip CLIP) as a classifier over the prompts ``tokens`` stand for; see ``clip_logits``."""
    from hookviz.models.sources.clip_logits import ClipLogits as Logits

    return Logits(model, tokens)
