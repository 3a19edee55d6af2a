"""Hugging Face backbones without a classification head (a folder or repository whose
architecture is ``ViTModel``, ``Dinov2Model``): embedding models, explained by their
similarity to a reference photo (``--target-image``, ``tasks.embed``), as timm's models with
``num_classes=0`` are.

The embedding is the model's ``pooler_output`` when it gives one whose weights the checkpoint
holds (ViT's pooler, DINOv2's normalised class token), else the class token of
``last_hidden_state``; a note in report.json says which. The module is wrapped
(``BackboneEmbedding``) so that its forward returns that (N, D) embedding; the backbone keeps
the name its classifier gives it (``base_model_prefix``), so layer paths read as the
classifier's (``vit.layers.11.layernorm_before``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hookviz.errors import UnknownModelError, arg
from hookviz.models.checkpoints import LoadedWeights
from hookviz.models.sources.base import LoadedModel, seeded, weights_kind

__all__ = ["is_backbone", "bare", "load_backbone", "POOLED", "CLASS_TOKEN"]

POOLED = "pooler_output"
CLASS_TOKEN = "class token"
_BARE = re.compile(r"[A-Z]\w*Model")


def is_backbone(config) -> bool:
    """Whether ``config`` is of a bare image backbone (every architecture ``...Model``, no
    ``For...`` head, no text tower: ``CLIPModel``'s is another matter)."""
    architectures = [str(a) for a in getattr(config, "architectures", None) or ()]
    return not hasattr(config, "text_config") and bare(architectures)


def bare(architectures: Sequence[str]) -> bool:
    """Whether a config's ``architectures`` are all a bare model's (``ViTModel``), with no head."""
    return bool(architectures) and all(_BARE.fullmatch(a) for a in architectures)


def load_backbone(name: str, where, config, weights: str, seed: int, source: str) -> LoadedModel:
    """The backbone ``where`` (``huggingface._Where``) holds, as an embedding model (task ``embed``).

    Raises:
        UnknownModelError: its output has neither a pooled output nor tokens.
        WeightsError: the weights cannot be had or do not fit.
    """
    from transformers import AutoModel

    from hookviz.anatomy.attention_blocks import transformers_attention
    from hookviz.anatomy.geometry import declared_layout
    from hookviz.models.sources.hf_files import state_dict_file
    from hookviz.tasks.embed import Embed

    kind = weights_kind(weights)
    missing: list[str] = []
    if kind == "default":
        model, missing = where.from_pretrained(AutoModel, seed)
        loaded = LoadedWeights(f"DEFAULT ({where.repo}, {where.origin})", None)
    else:
        with seeded(seed):
            model = AutoModel.from_config(config, trust_remote_code=False).float()
        loaded = LoadedWeights(f"none (random init, seed {seed})", None) if kind == "none" else state_dict_file(model, weights)
    pooled, said = _embedding_of(model, missing, name)
    module = _wrap(model, pooled).eval()
    preprocessing, notes = where.preprocessing()
    return LoadedModel(
        name,
        module,
        loaded.label,
        None,
        preprocessing,
        source=source,
        task=Embed.name,
        notes=(said, *_missing_note(where, missing), *notes, *loaded.notes),
        weights_sha256=loaded.sha256,
        declared_layout=declared_layout(model),
        declared_attention=transformers_attention(module),
    )


def _embedding_of(model, missing: list[str], name: str) -> tuple[bool, str]:
    """Whether the embedding is the pooled output (else the class token), and the note saying which."""
    import torch

    config = model.config
    side = config.image_size if isinstance(config.image_size, int) else config.image_size[0]
    blank = torch.zeros(1, getattr(config, "num_channels", 3), side, side)
    with torch.no_grad():
        output = model(pixel_values=blank)
    pooler = getattr(output, "pooler_output", None)
    untrained = [key for key in missing if key.startswith("pooler.")]
    if pooler is not None and not untrained:
        return True, f"the embedding is the model's {POOLED}"
    hidden = getattr(output, "last_hidden_state", None)
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3:
        raise UnknownModelError(
            f"{arg('model', name)}: its output has no {POOLED} nor tokens to take a class token of; "
            "load the model yourself and pass a module that returns an embedding to hookviz.explain"
        )
    why = "its pooler's weights are not in the checkpoint" if untrained else f"it gives no {POOLED}"
    return False, f"the embedding is the {CLASS_TOKEN} of last_hidden_state ({why})"


def _missing_note(where, missing: list[str]) -> tuple[str, ...]:
    others = [key for key in missing if not key.startswith("pooler.")]
    if not others:
        return ()
    listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return (f"{len(others)} of the model's weights are not in {where.where} and were initialised at random: {listed}",)


# The wrapper is defined on first use: torch is not imported by ``hookviz --help``.
def _wrap(model, pooled: bool):
    from hookviz.models.sources.backbone_embedding import BackboneEmbedding

    return BackboneEmbedding(model, pooled)
