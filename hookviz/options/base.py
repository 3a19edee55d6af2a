"""What the option groups share: setting a normalised value, and asking a later stage about
the names it owns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookviz.registry import Registry

__all__ = ["ANSWERS", "answers", "ask", "set_field"]

#: The questions an option group asks about names that a later stage owns (the tasks, the
#: methods, the picture kinds, the checks; and the run's own groups' names, which
#: ``declared`` asks of ``hookviz.options``), each answered by that stage: the modules below
#: register their answers, and the registry imports them on first use, as it imports any
#: registry's modules (``hookviz.registry``). A group so checks its names when it is made,
#: without importing the stages above it.
ANSWERS: Registry[Callable[..., Any]] = Registry(
    "question",
    "answer",
    modules=("hookviz.options", "hookviz.tasks", "hookviz.methods.asked", "hookviz.render.kinds", "hookviz.explaining.checks"),
)
answers = ANSWERS.register


def ask(question: str, *args: Any) -> Any:
    """The answer to ``question`` (``run_settings``, ``methods``, ``method_settings``, ``owners``,
    ``tasks``, ``picture_groups``, ``picture_kinds``, ``default_pictures``, ``checks``) for ``args``."""
    return ANSWERS.get(question)(*args)


def set_field(instance, name: str, value) -> None:
    """Set a field of a frozen dataclass: a group normalises its values in ``__post_init__``."""
    object.__setattr__(instance, name, value)
