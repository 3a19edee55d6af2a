"""Targets: what ``target`` names, read against a model's class names (every task uses it)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hookviz.errors import TargetError, arg, did_you_mean

__all__ = ["parse_target", "class_target"]


def parse_target(text: str, categories: Sequence[str] | None) -> int | None:
    """``top1`` -> None; an index -> int; a class name (or one of the comma-separated
    synonyms a name lists) -> its index.

    Raises:
        TargetError: unknown name (with suggestions) or an index outside the categories.
    """
    text = str(text).strip()
    named = [index for index, name in enumerate(categories or ()) if name.strip() == text]
    if text.lower() in ("top1", "top-1", "top"):
        if named:  # a CLIP prompt "top" (the garment)
            raise TargetError(
                f"{arg('target', text)}: ambiguous: the best class, and class {named[0]} is named {text!r}; "
                f"rename the class (a prompt of words: 'a {text}') or pass its index, {named[0]}"
            )
        return None
    if re.fullmatch(r"-?\d+", text):
        index = int(text)
        if named and named[0] != index:  # CLIP's prompts are class names anyone may write: "1", "0"
            raise TargetError(
                f"{arg('target', text)}: ambiguous: class {index} is {_name(categories, index)}, and class "
                f"{named[0]} is named {text!r}; rename the class (a prompt of words: 'the number {text}')"
            )
        if index < 0:
            raise TargetError(f"{arg('target', text)}: a class index must be 0 or more")
        if categories is not None and index >= len(categories):
            raise TargetError(f"{arg('target', text)}: class index out of range (the model has 0..{len(categories) - 1})")
        return index
    if not categories:
        raise TargetError(f"{arg('target', text)}: this model has no class names; pass a class index")
    if named:  # as written first: prompts "a Cat" and "a cat" are two classes
        return named[0]
    wanted = _normal(text)
    alike = [index for index, name in enumerate(categories) if _normal(name) == wanted]
    if len(alike) > 1:
        choices = ", ".join(repr(categories[index]) for index in alike[:5])
        raise TargetError(
            f"{arg('target', text)}: names {len(alike)} classes written otherwise ({choices}); write the one you mean as it is"
        )
    if alike:
        return alike[0]
    # Hugging Face's ImageNet labels list synonyms ("tabby, tabby cat"): any one of them names the class.
    for index, name in enumerate(categories):
        if wanted in (_normal(part) for part in name.split(",")):
            return index
    raise TargetError(f"{arg('target', text)}: not a class name of this model{did_you_mean(text, categories, n=5)}")


def _name(categories: Sequence[str] | None, index: int) -> str:
    return repr(categories[index]) if categories is not None and index < len(categories) else "past the classes"


def _normal(name: str) -> str:
    return name.lower().replace("_", " ").strip()


def class_target(text: str, categories: Sequence[str] | None, classes: int) -> tuple[list[str] | None, int | None]:
    """The model's class names (``None`` unless there is one per class of its output) and the
    class ``text`` names in them (``None`` for ``top1``).

    Raises:
        TargetError: a name the model lacks (or class names not one per class), or an index past its ``classes``.
    """
    names = list(categories) if categories is not None and len(categories) == classes else None
    given = str(text).strip()
    if names is None and categories and given.lower() not in ("top1", "top-1", "top") and not re.fullmatch(r"-?\d+", given):
        raise TargetError(  # not "this model has no class names": it was given some
            f"{arg('target', text)}: the model's output has {classes} classes but there are {len(categories)} class "
            "names, so no name is used; give one name per class, or a class index"
        )
    fixed = parse_target(text, names)
    if fixed is not None and fixed >= classes:
        raise TargetError(f"{arg('target', text)}: class index out of range (the model has 0..{classes - 1})")
    return names, fixed
