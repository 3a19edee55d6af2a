"""A sample that is one part of a file: clip ``k`` of a video's ``--clips K``.

Everything keys a sample by a path (its output folder's name, ``--skip-existing``, ``--shard``,
run.json, the gallery's rows), so a part's key is its file's path with ``#k`` after the name
(``walk.mp4#2``, counted from 1): distinct per part, readable in messages and report.json, and
stable across runs and shards. Its output folder is the file's stem and ``.clip-k``
(``walk.clip-2``), since ``#`` would start a link's fragment in the gallery.

A path that exists is never a part, so a folder of frames called ``take#2`` stays itself.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["part_key", "split_part", "part_stem"]

_PART = re.compile(r"^(.+)#([1-9]\d*)$")


def part_key(path: Path, part: int) -> Path:
    """The key of part ``part`` (from 1) of the file or folder at ``path``."""
    return path.with_name(f"{path.name}#{part}")


def split_part(path: Path) -> tuple[Path, int | None]:
    """The file (or folder) a key names and its part, ``None`` when the key is the whole file."""
    found = _PART.match(path.name)
    if found is None or path.exists():
        return path, None
    return path.with_name(found[1]), int(found[2])


def part_stem(path: Path) -> str:
    """A sample's name for its output folder: its file's stem (a folder's whole name: a clip's folder
    ``walk.v2``), and ``.clip-k`` for part ``k``."""
    whole, part = split_part(path)
    stem = whole.name if whole.is_dir() else whole.stem
    return stem if part is None else f"{stem}.clip-{part}"
