"""What the option groups share."""

from __future__ import annotations

__all__ = ["set_field"]


def set_field(instance, name: str, value) -> None:
    """Set a field of a frozen dataclass: a group normalises its values in ``__post_init__``."""
    object.__setattr__(instance, name, value)
