"""The samples of an atlas: what the sources name, in one order every shard agrees on, and the
true class of each when a folder is laid out as torchvision's ImageFolder (one sub-folder per
class)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Dataset", "find_dataset", "folder_classes"]


@dataclass(frozen=True)
class Dataset:
    """``paths``: every sample's key path, in the run's order (an id is a place in it);
    ``classes``: each one's true class, or ``None`` (no ImageFolder layout holds it)."""

    paths: tuple[Path, ...]
    classes: tuple[str | None, ...]

    @property
    def has_classes(self) -> bool:
        return any(name is not None for name in self.classes)


def find_dataset(kind, settings, sources, exclude, notes: list[str]) -> Dataset:
    """The samples ``sources`` hold for sample ``kind`` (its ``find`` and ``split``, as ``hookviz run`` finds them)."""
    from hookviz.samples import split

    paths = split(kind, kind.find(list(sources), exclude=list(exclude), notes=notes), settings)
    return Dataset(tuple(paths), folder_classes(sources, paths))


def folder_classes(sources, paths) -> tuple[str | None, ...]:
    """Each path's class: the name of its first folder below a source folder all of whose
    samples lie in sub-folders (ImageFolder's layout); ``None`` where no such folder holds it."""
    folders = [Path(source) for source in sources if Path(source).is_dir()]
    layouts = {}
    for folder in folders:
        inside = [parts for parts in (_below(path, folder) for path in paths) if parts is not None]
        if inside and all(len(parts) >= 2 for parts in inside):
            layouts[folder] = True
    classes = []
    for path in paths:
        name = None
        for folder in layouts:
            parts = _below(path, folder)
            if parts is not None:
                name = parts[0]
                break
        classes.append(name)
    return tuple(classes)


def _below(path: Path, folder: Path) -> tuple[str, ...] | None:
    from hookviz.inputs.parts import split_part

    whole, _part = split_part(path)
    try:  # absolute without resolving links: the sources name both, and 50,000 resolutions cost seconds
        return Path(os.path.abspath(whole)).relative_to(os.path.abspath(folder)).parts
    except ValueError:
        return None
