"""The samples of an atlas: what the sources name, in one order every shard agrees on, and the
true class of each when a folder is laid out as torchvision's ImageFolder (one sub-folder per
class)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hookviz.inputs.parts import split_part

__all__ = ["Dataset", "find_dataset", "folder_classes", "source_folders", "shown_path"]


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
    """The samples ``sources`` hold for sample ``kind`` (its ``find`` and ``sample_keys``, as ``hookviz run`` finds them)."""
    from hookviz.samples import sample_keys

    paths = sample_keys(kind, kind.find(list(sources), exclude=list(exclude), notes=notes), settings)
    return Dataset(tuple(paths), folder_classes(sources, paths))


def folder_classes(sources, paths) -> tuple[str | None, ...]:
    """Each path's class: the name of its first folder below a source folder all of whose
    samples lie in sub-folders (ImageFolder's layout); ``None`` where no such folder holds it."""
    folders = [os.path.abspath(source) for source in sources if os.path.isdir(source)]
    # absolute without resolving links: the sources name both, and 50,000 resolutions cost seconds
    below = [[_below(whole, folder) for folder in folders] for whole in (os.path.abspath(split_part(p)[0]) for p in paths)]
    layouts = [
        i
        for i in range(len(folders))
        if any(parts[i] for parts in below) and all(len(parts[i]) >= 2 for parts in below if parts[i])
    ]
    return tuple(next((parts[i][0] for i in layouts if parts[i]), None) for parts in below)


def _below(path: str, folder: str) -> tuple[str, ...]:
    """``path``'s parts below ``folder`` (both absolute), ``()`` when it is not below it."""
    prefix = folder.rstrip(os.sep) + os.sep
    return tuple(path[len(prefix) :].split(os.sep)) if path.startswith(prefix) else ()


def source_folders(sources) -> list[str]:
    """The folders among ``sources``, absolute (as ``shown_path`` takes them)."""
    return [os.path.abspath(source) for source in sources if os.path.isdir(source)]


def shown_path(path, folders: list[str]) -> str:
    """A sample as a page shows it: its path below the source folder that holds it, as it lies
    in the data (``tabby/walk.png``), else (a file or a pattern given) its file name."""
    from hookviz.errors import display_path

    whole = os.path.abspath(path)
    parts = next((found for found in (_below(whole, folder) for folder in folders) if found), ())
    return display_path("/".join(parts) if parts else os.path.basename(whole))
