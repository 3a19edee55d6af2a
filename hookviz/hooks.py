"""Hooks: the one place hook handles are kept, so that every one of them is removed."""

from __future__ import annotations

__all__ = ["HookSet"]


class HookSet:
    """Holds hook handles (module and tensor hooks) and removes every one of them when
    its ``with`` block ends, on error too. Never swallows the error."""

    def __init__(self) -> None:
        self._handles: list = []

    def add(self, handle) -> None:
        self._handles.append(handle)

    def close(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def __enter__(self) -> "HookSet":
        return self

    def __exit__(self, *exc_info) -> bool:
        self.close()
        return False

    def __len__(self) -> int:
        return len(self._handles)

    def __repr__(self) -> str:
        return f"HookSet({len(self._handles)} handles)"
