"""Attention rollout (Abnar & Zuidema 2020) and Chefer et al.'s relevancy (2021) from an answer
token to the image tokens, through the language model's layers.

The row of the position that predicts the token (``Conversation.answer_positions``) is read at
the image tokens' columns and laid on their grid. Rollout multiplies each layer's attention,
its heads averaged, with the identity added and the rows renormalised: one forward pass for
every token. Chefer's relevancy adds each layer's heads' mean of (gradient x attention)^+
times the relevancy so far to the identity: one forward pass, then one backward pass per
target. The attention probabilities come from the model's eager attention (hookviz loads a
vision-language model with it)."""

from __future__ import annotations

import torch

from hookviz.errors import UsageError, arg

__all__ = ["chefer", "rollout"]


def _attentions(model, conversation) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """The logits at the answer positions (T, V) and each language layer's attention (1, H, L, L)."""
    positions = conversation.answer_positions
    output = model(**conversation.inputs, output_attentions=True, logits_to_keep=positions)
    attentions = tuple(a for a in (output.attentions or ()) if a is not None)
    if not attentions:
        raise UsageError(
            f"{arg('cam', 'rollout')}: the model gave no attention probabilities (fused attention); "
            "load it with attn_implementation='eager'"
        )
    return output.logits[0].float(), attentions


def _rows(relevance: torch.Tensor, conversation, target, image) -> torch.Tensor:
    rows = relevance[conversation.answer_positions[list(target.tokens)]].sum(0)
    return rows[image.positions].reshape(image.grid).float()


def rollout(model, conversation, targets, image) -> torch.Tensor:
    """(K, rows, cols): attention rollout of each target over ``image`` (``families.ImageTokens``)."""
    with torch.no_grad():
        _, attentions = _attentions(model, conversation)
        length = attentions[0].shape[-1]
        eye = torch.eye(length)
        joint = eye
        for attention in attentions:
            mixed = attention[0].float().mean(0) + eye
            joint = (mixed / mixed.sum(-1, keepdim=True)) @ joint
    return torch.stack([_rows(joint, conversation, target, image) for target in targets])


def chefer(model, conversation, targets, image, objective: str = "logit") -> torch.Tensor:
    """(K, rows, cols): Chefer's relevancy of each target over ``image``."""
    logits, attentions = _attentions(model, conversation)
    ids = conversation.answer_ids
    scores = torch.log_softmax(logits, -1) if objective == "logprob" else logits
    scores = scores.gather(-1, ids[:, None]).squeeze(-1)
    length = attentions[0].shape[-1]
    maps = []
    for target in targets:
        gradients = torch.autograd.grad(scores[list(target.tokens)].sum(), attentions, retain_graph=True)
        relevance = torch.eye(length)
        for attention, gradient in zip(attentions, gradients):
            weighted = (gradient[0].float() * attention[0].detach().float()).clamp(min=0).mean(0)
            relevance = relevance + weighted @ relevance
        maps.append(_rows(relevance, conversation, target, image))
    return torch.stack(maps)
