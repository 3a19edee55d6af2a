"""A prompt about a photo, turned into the model's inputs and an answer to explain: the answer
the model writes greedily (``max_new_tokens``), or one given (teacher forcing). Either way the
result holds the whole sequence, prompt and answer, so that one forward pass over it gives
every answer token's logit (``scoring.token_scores``): no token is ever generated again.

The prompt goes through the processor's chat template when it has one (a user turn of the
image and the text, then the assistant's turn opened); without one, the image token, a new
line and the prompt, as LLaVA's model cards write it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from hookviz.errors import AnswerError, ImageError, UsageError, arg, first_line

__all__ = ["Conversation", "answer_conversation", "chat_text", "converse", "model_inputs", "special_tokens"]


@dataclass(frozen=True)
class Conversation:
    """A prompt, a photo's inputs and the answer to explain, as one sequence.

    Attributes:
        inputs: the processor's tensors over prompt and answer (``input_ids``,
            ``attention_mask``, ``pixel_values`` and any family's extras), batch of one.
        answer_ids: (T,) the answer's token ids.
        answer_positions: (T,) the positions whose logits predict each answer token.
        tokens: each answer token as the tokenizer writes it alone.
        prompt: the prompt as the caller gave it.
        text: the answer's text, decoded without its special tokens (as transformers'
            ``batch_decode(..., skip_special_tokens=True)`` writes it).
        generated: whether the model wrote the answer (``False``: given, teacher forcing).
        special: the indices of the answer's special tokens (``<pad>``, ``<s>``, an image token:
            those the text leaves out), which are explained only when asked for by index.
    """

    inputs: Mapping[str, torch.Tensor] = field(repr=False)
    answer_ids: torch.Tensor
    answer_positions: torch.Tensor
    tokens: tuple[str, ...]
    prompt: str
    text: str
    generated: bool = True
    special: tuple[int, ...] = ()

    @property
    def prompt_length(self) -> int:
        return int(self.answer_positions[0]) + 1 if len(self.answer_positions) else int(self.inputs["input_ids"].shape[1])


def chat_text(processor, prompt: str) -> str:
    """``prompt`` as the model reads it: through the chat template, or after the image token."""
    if getattr(processor, "chat_template", None):
        turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        return processor.apply_chat_template(turn, add_generation_prompt=True)
    return f"{image_token(processor)}\n{prompt}"


def image_token(processor) -> str:
    """The processor's image token.

    Raises:
        UnknownModelError: it has none (a processor for text alone).
    """
    from hookviz.errors import UnknownModelError

    tokenizer = getattr(processor, "tokenizer", None)
    token = getattr(processor, "image_token", None) or getattr(tokenizer, "image_token", None)
    unknown = tokenizer is not None and token and tokenizer.convert_tokens_to_ids(str(token)) == tokenizer.unk_token_id
    if not token or unknown:
        raise UnknownModelError(
            f"the processor {type(processor).__name__} has no image token, so no photo can enter the prompt; "
            "save the model's own processor (with its image token) next to it"
        )
    return str(token)


def _check_image_token(model, processor) -> None:
    """The processor's image token is the model's (PaliGemma's and Idefics3's processors add an
    image token of their own to a tokenizer without one: a token the model reads as a word, or
    past its vocabulary).

    Raises:
        UnknownModelError: the processor has no image token, or another than the model's.
    """
    from hookviz.errors import UnknownModelError

    token = image_token(processor)
    config = model.config
    wanted = getattr(config, "image_token_id", None)
    wanted = wanted if wanted is not None else getattr(config, "image_token_index", None)
    tokenizer = getattr(processor, "tokenizer", None)
    found = tokenizer.convert_tokens_to_ids(token) if tokenizer is not None else None
    if wanted is not None and found is not None and int(found) != int(wanted):
        raise UnknownModelError(
            f"the processor {type(processor).__name__} has no image token of the model's (its {token} is token {found}, "
            f"the model's image token is {wanted}), so no photo can enter the prompt; "
            "save the model's own processor (with its image token) next to it"
        )


def model_inputs(model, processor, photo, prompt: str) -> dict[str, torch.Tensor]:
    """The processor's tensors for ``photo`` (a PIL image) and ``prompt``, floats in the model's dtype.

    Raises:
        ImageError: the processor cannot take the photo.
    """
    text = chat_text(processor, prompt)
    _check_image_token(model, processor)
    try:
        made = processor(images=photo, text=text, return_tensors="pt")
    except (ValueError, TypeError, RuntimeError, IndexError) as exc:
        raise ImageError(f"the processor {type(processor).__name__} cannot take this photo ({first_line(exc)})") from None
    dtype = next(model.parameters()).dtype
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in made.items() if isinstance(v, torch.Tensor)}


def _context(model) -> int | None:
    config = getattr(model.config, "text_config", model.config)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if value else None


def _check_length(model, length: int, answer: int, what: str) -> None:
    limit = _context(model)
    if limit is not None and length + answer > limit:
        raise UsageError(
            f"{arg('prompt')}: the prompt and the photo make {length} tokens{what}, more than the model's context "
            f"of {limit}; shorten the prompt or {arg('max_new_tokens')}"
        )


#: Per-token inputs a processor makes over the prompt, and their value over the answer: the
#: attention mask (1), Qwen2-VL's ``mm_token_type_ids`` (0: text), PaliGemma's ``token_type_ids``
#: (1: a suffix, read causally, as generate reads what it writes).
ANSWER_VALUES = {"attention_mask": 1, "mm_token_type_ids": 0, "token_type_ids": 1}


def _joined(inputs: Mapping[str, torch.Tensor], answer_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Prompt and answer as one sequence; PaliGemma's training ``labels`` left out."""
    joined = {key: value for key, value in inputs.items() if key != "labels"}
    joined["input_ids"] = torch.cat([inputs["input_ids"], answer_ids[None].to(inputs["input_ids"])], dim=1)
    for key, value in ANSWER_VALUES.items():
        if key in inputs:
            more = torch.full((1, len(answer_ids)), value, dtype=inputs[key].dtype)
            joined[key] = torch.cat([inputs[key], more], dim=1)
    return joined


def special_tokens(tokenizer, answer_ids) -> tuple[int, ...]:
    """The indices of the tokens of ``answer_ids`` that decoding with ``skip_special_tokens``
    leaves out (the tokenizer decides, as in transformers' ``batch_decode``)."""
    ids = [int(i) for i in answer_ids]
    return tuple(k for k, i in enumerate(ids) if tokenizer.decode([i], skip_special_tokens=True) == "" != tokenizer.decode([i]))


def _made(processor, prompt: str, inputs, answer_ids: torch.Tensor, generated: bool) -> Conversation:
    tokenizer = getattr(processor, "tokenizer", processor)
    length = int(inputs["input_ids"].shape[1])
    return Conversation(
        _joined(inputs, answer_ids),
        answer_ids,
        torch.arange(length - 1, length - 1 + len(answer_ids)),
        tuple(tokenizer.decode([int(i)]) for i in answer_ids),
        prompt,
        tokenizer.decode(answer_ids.tolist(), skip_special_tokens=True),
        generated,
        special_tokens(tokenizer, answer_ids),
    )


def converse(model, processor, photo, prompt: str, max_new_tokens: int = 16) -> Conversation:
    """The answer the model writes to ``prompt`` about ``photo``, greedily, up to its end token
    (not kept) or ``max_new_tokens``.

    Raises:
        UsageError: the prompt and answer would not fit the model's context.
        AnswerError: the model wrote nothing before its end token.
    """
    inputs = model_inputs(model, processor, photo, prompt)
    _check_length(model, int(inputs["input_ids"].shape[1]), max_new_tokens, f" and {max_new_tokens} to write")
    with torch.no_grad():
        written = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    answer = written[0, inputs["input_ids"].shape[1] :]
    ends = _end_ids(model)
    stop = next((k for k, token in enumerate(answer.tolist()) if token in ends), len(answer))
    if stop == 0:
        raise AnswerError(f"{arg('prompt', prompt)}: the model ended its answer before writing a token; give {arg('answer')}")
    return _made(processor, prompt, inputs, answer[:stop].cpu(), True)


def _end_ids(model) -> set[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        return set()
    return {int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])}


def answer_conversation(model, processor, photo, prompt: str, answer: str) -> Conversation:
    """``answer`` as the model's reply to ``prompt`` about ``photo`` (teacher forcing).

    Raises:
        UsageError: the answer tokenizes to nothing, or does not fit the model's context.
    """
    inputs = model_inputs(model, processor, photo, prompt)
    tokenizer = getattr(processor, "tokenizer", processor)
    ids = torch.tensor(tokenizer(answer, add_special_tokens=False)["input_ids"], dtype=torch.long)
    if ids.numel() == 0:
        raise UsageError(f"{arg('answer', answer)} tokenizes to nothing; give the answer's words")
    _check_length(model, int(inputs["input_ids"].shape[1]), len(ids), f" and the answer {len(ids)}")
    return _made(processor, prompt, inputs, ids, False)
