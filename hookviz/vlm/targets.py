"""Which answer tokens are explained (``--tokens 3,5``, ``--words cat``): each target is a group
of answer tokens whose scores are summed, one token alone, or the tokens of a word."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hookviz.errors import AnswerError, UsageError, arg

__all__ = ["Target", "choose_targets", "token_spans"]


@dataclass(frozen=True)
class Target:
    """Answer tokens explained together (their scores summed), and how a picture names them."""

    tokens: tuple[int, ...]
    label: str

    @property
    def key(self) -> str:
        """``token3`` or ``tokens3-4``: how tensors.npz and file names name it."""
        first, last = self.tokens[0], self.tokens[-1]
        return f"token{first}" if first == last else f"tokens{first}-{last}"


def token_spans(tokenizer, answer_ids) -> list[tuple[int, int]]:
    """Each answer token's (start, end) characters in the decoded answer."""
    spans, previous = [], 0
    ids = [int(i) for i in answer_ids]
    for k in range(len(ids)):
        end = len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True))
        spans.append((min(previous, end), end))
        previous = end
    return spans


def choose_targets(conversation, tokenizer, tokens: str | None = None, words: str | None = None) -> tuple[Target, ...]:
    """The targets: ``tokens`` (answer indices from 0, separated by commas: every token of the
    answer counts, its special tokens too), ``words`` (words of the answer, separated by commas;
    each is all its tokens), or else every answer token alone but its special tokens (``<pad>``:
    those the answer's text leaves out).

    Raises:
        UsageError: an index past the answer, a word not in it, both options given, or a given
            answer of special tokens alone (nothing to explain by default).
        AnswerError: the model's own answer is special tokens alone.
    """
    count = len(conversation.answer_ids)
    if tokens and words:
        raise UsageError(f"{arg('tokens', tokens)} and {arg('words', words)}: give one of them")
    if words:
        return tuple(_word(conversation, tokenizer, word.strip()) for word in str(words).split(",") if word.strip())
    if not tokens:
        kept = tuple(Target((k,), conversation.tokens[k]) for k in range(count) if k not in conversation.special)
        if not kept:  # the model's own answer fails its photo alone; a given one would fail every photo
            raise (AnswerError if conversation.generated else UsageError)(
                f"the answer {' '.join(conversation.tokens)!r} is special tokens alone, which are not explained by default; "
                f"give {arg('answer')}, or {arg('tokens')} to explain them"
            )
        return kept
    chosen = []
    for part in str(tokens).split(","):
        if not part.strip().isdigit() or int(part) >= count:
            raise UsageError(
                f"{arg('tokens', tokens)}: {part.strip()!r} is no token of the answer; give indices from 0 to {count - 1} "
                f"(the answer: {conversation.text!r})"
            )
        chosen.append(Target((int(part),), conversation.tokens[int(part)]))
    return tuple(chosen)


def _word(conversation, tokenizer, word: str) -> Target:
    spans = token_spans(tokenizer, conversation.answer_ids)
    for found in re.finditer(r"[\w'-]+", conversation.text):
        if found.group(0).lower() == word.lower():
            inside = tuple(k for k, (a, b) in enumerate(spans) if a < found.end() and b > found.start())
            if inside:
                return Target(inside, found.group(0))
    raise UsageError(f"{arg('words', word)} is not a word of the answer {conversation.text!r}; give one of its words")
