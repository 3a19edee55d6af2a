"""Which model, which weights, which device (``ModelOptions``), and the prompts of a model with a text tower."""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hookviz.errors import UsageError, arg
from hookviz.options.base import ask, set_field

__all__ = [
    "task_choices",
    "check_device",
    "ModelOptions",
    "Prompt",
    "prompt_lines",
    "prompt_place",
    "prompts_given_as",
    "read_prompts",
]


def task_choices() -> tuple[str, ...]:
    """What ``task`` may be: ``auto``, or a task of ``hookviz.tasks``."""
    return ("auto", *ask("tasks"))


_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


@dataclass(frozen=True)
class ModelOptions:
    """Which model to load, with which weights, on which device.

    Attributes:
        name: a torchvision model name, a built-in one, ``timm:NAME``, ``hf:ORG/NAME``, or
            ``package.module:callable``.
        weights: ``DEFAULT``, ``none`` (random init seeded by ``seed``), a torchvision weights
            name, or a state_dict file.
        seed: seeds random initialisation, without touching the caller's random stream.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        task: a task of ``hookviz.tasks`` (``classify``, ``segment``, ``detect``), or ``auto``:
            the source's word for it, or for a factory's model, what its output looks like.
        trust_checkpoint: load a checkpoint that runs code when loaded (a pickled YOLO
            ``.pt``); refused otherwise.
        prompts: text prompts, for a model with a text tower (``open_clip:ARCH``): its
            classes (see ``read_prompts`` for a file of them).
    """

    name: str
    weights: str = "DEFAULT"
    seed: int = 0
    device: str = "auto"
    task: str = "auto"
    trust_checkpoint: bool = False
    prompts: tuple[str, ...] = ()

    def __post_init__(self):
        set_field(self, "prompts", _checked_prompts(self.prompts))
        if not self.name or not self.name.strip():
            raise UsageError(f"{arg('model', self.name)}: give a model name; {_list_models_hint()}")
        if not self.weights or not str(self.weights).strip():
            raise UsageError(f"{arg('weights', self.weights)}: give DEFAULT, none or a file")
        check_device(self.device)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise UsageError(f"{arg('seed', self.seed)}: a seed is a whole number from 0 to 2**63 - 1")
        if self.task not in task_choices():
            raise UsageError(f"{arg('task', self.task)}: choose {', '.join(task_choices())}")


def check_device(device: str) -> None:
    """Refuse a ``--device`` that is none of ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``."""
    if not _DEVICE.match(device):
        raise UsageError(f"{arg('device', device)}: choose auto, cpu, cuda, cuda:N or mps")


class Prompt(str):
    """A prompt's text that remembers the file it was read from (``file``: ``--prompts p.txt``)
    and its line (``where``: ``--prompts p.txt: line 3``), so that a message about it names
    them, not ``--prompt``; it is its text everywhere else (``str(prompt)`` is the plain text)."""

    file: str
    line: int

    def __new__(cls, text: str, file: str, line: int):
        made = super().__new__(cls, text)
        made.file, made.line = file, line
        return made

    @property
    def where(self) -> str:
        return f"{self.file}: line {self.line}"

    def __reduce__(self):
        return (Prompt, (str(self), self.file, self.line))


def prompts_given_as(prompts: Sequence[str]) -> tuple[str, str]:
    """How a message names the prompts given for a model that takes none: the first, as it was
    given (``--prompt a cat``, or its file: ``--prompts p.txt``), and the options to drop
    (``--prompt``, ``--prompts``, or both)."""
    first = prompts[0]
    named = first.file if isinstance(first, Prompt) else arg("prompts", first)
    read = {isinstance(text, Prompt) for text in prompts}
    flags = [arg(name) for name, used in (("prompts", False in read), ("prompts_file", True in read)) if used]
    return named, " and ".join(flags)


def prompt_place(text: str, number: int) -> str:
    """Where prompt ``number`` (from 1) was given, with its start: ``--prompts p.txt: line 3
    ('a cat')`` for a ``Prompt`` read from a file, else ``--prompt: prompt 2 ('a cat')``."""
    shown = str(text) if len(text) <= 40 else text[:39].rstrip() + "…"
    where = getattr(text, "where", None) or f"{arg('prompts')}: prompt {number}"
    return f"{where} ({shown!r})"


def _checked_prompts(given) -> tuple[str, ...]:
    """``ModelOptions.prompts``, checked: each a visible line of text, stripped, given once.

    Raises:
        UsageError: naming the prompt (its file and line, for one read from a file).
    """
    prompts = (given,) if isinstance(given, str) else tuple(given or ())
    for text in prompts:
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"{arg('prompts', text)}: a prompt is a non-empty text (a photo of a cat)")
    prompts = tuple(text if text == text.strip() else text.strip() for text in prompts)  # a Prompt stays one
    seen: dict[str, int] = {}
    for number, text in enumerate(prompts, 1):
        if _holds_control(text):
            raise UsageError(f"{prompt_place(text, number)} holds a control character; a prompt is one line of text without them")
        key = _visible(text)
        if not key:  # a zero-width space's line: a class no picture or message can show
            raise UsageError(
                f"{prompt_place(text, number)} holds only invisible characters; a prompt is a visible text (a photo of a cat)"
            )
        first = seen.get(key)
        if first is not None and prompts[first - 1] == text:  # a class: a second copy splits its probability
            raise UsageError(f"{arg('prompts', text)}: given twice; give each prompt once")
        if first is not None:  # two classes that read the same: which is which, no picture can tell
            raise UsageError(
                f"{prompt_place(text, number)} differs from {prompt_place(prompts[first - 1], first)} only in spacing "
                "or invisible characters; give each prompt once"
            )
        seen[key] = number
    return prompts


def _visible(text: str) -> str:
    """``text`` as it reads: format characters (a zero-width space, a byte-order mark) dropped,
    each run of spaces (any kind: a no-break space, an ideographic space) one space."""
    if text.isascii():  # the usual prompt: no format characters, and split() knows its spaces
        return " ".join(text.split())
    kept = "".join(
        " " if character.isspace() or unicodedata.category(character) == "Zs" else character
        for character in text
        if unicodedata.category(character) != "Cf"
    )
    return " ".join(kept.split())


#: The largest prompts file read: a million prompts of some words each.
MAX_PROMPTS_BYTES = 64 * 2**20


def read_prompts(path: str | Path) -> tuple[str, ...]:
    """The prompts in a text file, one a line (blank lines skipped).

    Raises:
        UsageError: the file cannot be read, holds no prompt, holds one twice or one with a
            control character (naming its line).
    """
    return tuple(Prompt(text, arg("prompts_file", str(path)), number) for number, text in prompt_lines(path))


def prompt_lines(path: str | Path) -> tuple[tuple[int, str], ...]:
    """``(line number, prompt)`` of each prompt in a text file (see ``read_prompts``)."""
    try:
        with open(path, "rb") as file:  # at most so much: /dev/zero, or a photo given by mistake, is no list of prompts
            data = file.read(MAX_PROMPTS_BYTES + 1)
        if len(data) > MAX_PROMPTS_BYTES:
            raise UsageError(
                f"{arg('prompts_file', path)}: holds more than {MAX_PROMPTS_BYTES:,} bytes; give a text file "
                "with one prompt a line"
            )
        text = _decoded(data)
    except FileNotFoundError:
        raise UsageError(f"{arg('prompts_file', path)}: no such file; give a text file with one prompt a line") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(
            f"{arg('prompts_file', path)}: cannot read it ({reason}); give a text file with one prompt a line"
        ) from None
    # numbered as an editor numbers them: a form feed or NEL inside a line is refused, not a break
    prompts = tuple((number, line.strip()) for number, line in enumerate(_LINE_BREAK.split(text), 1) if line.strip())
    if not prompts:
        raise UsageError(f"{arg('prompts_file', path)}: the file holds no prompt; write one prompt a line")
    first: dict[str, int] = {}
    for number, prompt in prompts:
        if _holds_control(prompt):
            raise UsageError(
                f"{arg('prompts_file', path)}: line {number} ({prompt[:40]!r}) holds a control character; a prompt is "
                "one line of text without them"
            )
        if prompt in first:  # each prompt is a class: a second copy splits its probability and its name matches twice
            raise UsageError(
                f"{arg('prompts_file', path)}: line {number} ({prompt[:40]!r}) repeats line {first[prompt]}; "
                "give each prompt once"
            )
        first[prompt] = number
    return prompts


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _holds_control(text: str) -> bool:
    """Whether ``text`` holds a control character (a tab, a NUL) or a line or paragraph separator."""
    if text.isascii():  # the usual prompt: no Unicode lookup per character (a million prompts)
        return not text.isprintable()
    return any(unicodedata.category(character) in ("Cc", "Zl", "Zp") for character in text)


def _decoded(data: bytes) -> str:
    """UTF-8, or UTF-16 where a byte-order mark says so (Windows PowerShell's ``>`` writes it);
    a UTF-8 byte-order mark (Notepad's) is no part of the first prompt."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    return data.decode("utf-8-sig")


def _list_models_hint() -> str:
    from hookviz.errors import hint

    return hint("list_models")
