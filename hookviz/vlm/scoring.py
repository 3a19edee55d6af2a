"""Every answer token's score in one teacher-forced forward pass: the model reads prompt and
answer at once, and the logits at ``answer_positions`` predict the answer's tokens. The CAMs'
objective (one backward pass per token) and perturbation (one forward pass per mask, all
tokens at once) both take their numbers from here."""

from __future__ import annotations

import torch

from hookviz.errors import UsageError, arg

__all__ = ["OBJECTIVES", "answer_logits", "picked", "token_scores"]

#: What a token's score is: its logit, or its log-probability (a log-softmax over the vocabulary).
OBJECTIVES = ("logit", "logprob")


def token_scores(model, conversation, pixel_values: torch.Tensor | None = None, objective: str = "logit") -> torch.Tensor:
    """(B, T): the ``objective`` of each of the conversation's T answer tokens, for each of the
    B ``pixel_values`` (default: the conversation's own photo, B = 1), in float32. Gradients
    flow (call it under ``torch.no_grad()`` when none are wanted).

    Raises:
        UsageError: an objective not in ``OBJECTIVES``.
    """
    if objective not in OBJECTIVES:
        raise UsageError(f"{arg('objective', objective)} is not one of {', '.join(OBJECTIVES)}")
    return picked(answer_logits(model, conversation, pixel_values), conversation, objective)


def answer_logits(model, conversation, pixel_values: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T, V): the logits that predict each of the conversation's T answer tokens, for each of
    the B ``pixel_values`` (default: the conversation's own photo), in float32; one forward pass."""
    inputs = dict(conversation.inputs)
    if pixel_values is not None:
        count = pixel_values.shape[0] // max(conversation.inputs["pixel_values"].shape[0], 1)
        inputs = {k: _repeat(v, count) for k, v in inputs.items() if k != "pixel_values"}
        inputs["pixel_values"] = pixel_values
    positions = conversation.answer_positions
    return model(**inputs, logits_to_keep=positions.to(inputs["input_ids"].device)).logits.float()


def picked(logits: torch.Tensor, conversation, objective: str) -> torch.Tensor:
    """(B, T): the ``objective`` of each answer token from ``answer_logits``' (B, T, V)."""
    ids = conversation.answer_ids.to(logits.device)
    if objective == "logprob":
        logits = torch.log_softmax(logits, dim=-1)
    return logits.gather(-1, ids[None, :, None].expand(logits.shape[0], -1, 1)).squeeze(-1)


def _repeat(value: torch.Tensor, count: int) -> torch.Tensor:
    return value.repeat(count, *([1] * (value.dim() - 1))) if count > 1 else value
