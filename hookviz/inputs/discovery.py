"""Discovery: the image files a run takes from its arguments (``find_images``), or the
folders that are one sample each, for a sample kind whose sample is a folder (``find_folders``:
a clip's frames).

Files are taken as given. Folders are searched recursively and patterns expanded, but
never into hidden folders or files (``.git``, ``.venv``: a virtual environment holds
dozens of icons) below what was named, into hookviz's own output folders (a folder
holding a ``run.json`` or a run's marker), nor into the run's own ``--out``: running
twice in a folder of photos must not explain the first run's pictures.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path

from PIL import Image

from hookviz.errors import UsageError, arg, display_path, hint
from hookviz.inputs.images import HEIF_SUFFIXES

__all__ = [
    "NothingFound",
    "find_images",
    "find_files",
    "find_folders",
    "read_list",
    "is_output_folder",
    "OUTPUT_MARKER",
    "IMAGE_SUFFIXES",
]


class NothingFound(UsageError):
    """A folder or pattern that holds no photo (or no sample of a kind): a model of another
    sample kind may still find its own samples there, so the command waits for the model's word."""


#: Written into an output folder when a run starts, so that no run reads it as photos.
OUTPUT_MARKER = ".hookviz-output"

#: Formats PIL registers that are no photos to explain.
_NOT_PHOTOS = frozenset({"PDF", "EPS", "PSD", "XVTHUMB", "FITS", "MPEG", "GRIB", "BUFR", "HDF5", "WMF"})


class _ImageSuffixes:
    """The suffixes of the image files PIL reads, as PIL knows them when asked: an opener
    registered after this module was imported (pillow-heif's, by the command) counts too.
    PNG, JPEG, BMP, GIF and PPM are known from ``Image.preinit``; only another suffix loads
    every format PIL has (``Image.registered_extensions``: ~40 modules, ~25 ms of CPU before a
    run's render workers start)."""

    def __contains__(self, suffix: object) -> bool:
        if not isinstance(suffix, str):
            return False
        Image.preinit()
        known = Image.EXTENSION if suffix.lower() in Image.EXTENSION else Image.registered_extensions()
        return suffix.lower() in known and known[suffix.lower()] not in _NOT_PHOTOS


IMAGE_SUFFIXES = _ImageSuffixes()


def is_output_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a hookviz run's output (its marker, or a run.json of hookviz's)."""
    if (folder / OUTPUT_MARKER).exists():
        return True
    run_json = folder / "run.json"
    if not run_json.is_file():
        return False
    try:
        with open(run_json, encoding="utf-8") as stream:
            return "hookviz" in json.loads(stream.read(1_000_000))
    except (OSError, ValueError, TypeError):
        return False


class _Excluded:
    """Decides, with a cache per folder, whether a path lies in a folder a run never reads."""

    def __init__(self, exclude: Sequence[Path]):
        self._given = {_resolved(p): p for p in exclude}
        self._outputs: dict[Path, bool] = {}
        self.with_photos: dict[Path, int] = {}  # output folders skipped though photos lie at their top

    def root(self, folder: Path) -> Path | None:
        """The excluded folder (as it was given) that is ``folder`` or holds it, if any."""
        return self._root(_resolved(folder))

    def _root(self, resolved: Path) -> Path | None:
        return next((given for root, given in self._given.items() if resolved == root or root in resolved.parents), None)

    def folder(self, folder: Path) -> bool:
        resolved = _resolved(folder)
        if self._root(resolved) is not None:
            return True
        if resolved not in self._outputs:
            self._outputs[resolved] = is_output_folder(resolved)
            # a run writes no image at its folder's top (each image's files are in a folder of its own)
            photos = _top_images(resolved) if self._outputs[resolved] else 0
            if photos:
                self.with_photos[folder] = photos
        return self._outputs[resolved]

    def below(self, path: Path, top: Path) -> bool:
        """Whether ``path`` lies in an excluded or hidden folder between ``top`` and itself."""
        try:
            parts = path.relative_to(top).parts
        except ValueError:
            parts = path.parts
        folder = top
        for part in parts[:-1]:
            folder = folder / part
            if part.startswith(".") or self.folder(folder):
                return True
        return parts[-1].startswith(".") if parts else False


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link that points at itself (Python < 3.13)
        return path.absolute()


def find_images(sources: Sequence[str], exclude: Sequence[Path] = (), notes: list[str] | None = None) -> list[Path]:
    """Expand files, folders (recursively) and quoted glob patterns into image paths.

    Order is deterministic: arguments in the order given, each folder's or pattern's
    matches sorted. A path given twice is kept once. Files named outright are always
    taken; folders and patterns skip hidden entries below them, hookviz output folders,
    and the folders in ``exclude`` (the run's ``out``). HEIC/HEIF photos that PIL cannot
    read (pillow-heif not installed) are left out, and ``notes`` gets a line saying so.

    Raises:
        UsageError: an argument matches nothing, a folder holds no image, or a folder named
            is (or lies in) one of ``exclude``: the run's ``out``.
    """
    excluded = _Excluded(exclude)
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            found.extend(_walk(path, excluded, source, notes))
        elif path.exists() or not glob.has_magic(source):
            found.append(path)  # a missing file fails later, as that image's own error
        else:
            files = _pattern_files(source, excluded)
            matches = sorted(p for p in files if p.suffix.lower() in IMAGE_SUFFIXES)
            if not matches:
                _refuse_none_found(source, "pattern matches", files)
            _note_unread(source, "pattern matches", files, notes)
            found.extend(matches)
    if notes is not None:
        notes += [
            f"{display_path(folder)}: skipped as a hookviz output folder (it holds {OUTPUT_MARKER} or a run.json), "
            f"though {count} image file{'s lie' if count > 1 else ' lies'} at its top, where a run writes none; "
            "name the files themselves to explain them"
            for folder, count in excluded.with_photos.items()
        ]
    return _once(found)


def find_files(
    sources: Sequence[str],
    suffixes: Collection[str],
    what: str,
    exclude: Sequence[Path] = (),
    whole: Callable[[Path], bool] | None = None,
) -> list[Path]:
    """The files the arguments name whose suffix is one of ``suffixes`` (``(".csv",)``, compared
    in lower case), as ``find_images`` finds photos: a file named outright is taken as it is (a
    missing one fails later, as its own sample's error); folders are searched recursively and
    patterns expanded, skipping hidden entries, hookviz output folders and ``exclude`` (the run's
    ``out``). In the order given, each source's matches sorted, a file found twice kept once.

    Args:
        what: one file in words, for the message when a source names none (``"signal (.csv)"``).
        whole: a folder for which ``whole(folder)`` holds is one sample itself, not searched further
            (a folder of a clip's frames); ``None``: every folder is searched.

    Raises:
        NothingFound: a folder or pattern holds no such file.
        UsageError: a folder named is (or lies in) one of ``exclude``.
    """
    excluded = _Excluded(exclude)
    wanted = {suffix.lower() for suffix in suffixes}
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if not path.is_dir() and (path.exists() or not glob.has_magic(source)):
            found.append(path)
            continue
        if path.is_dir():
            _refuse_excluded(path, excluded, source)
        files = _files_below(path, excluded, whole) if path.is_dir() else _pattern_files(source, excluded)
        matches = sorted(p for p in files if p.suffix.lower() in wanted or (whole is not None and p.is_dir()))
        if not matches:
            raise NothingFound(f"{display_path(source)}: names no {what} (hidden and output folders are skipped)")
        found.extend(matches)
    return _once(found)


def _once(found: list[Path]) -> list[Path]:
    unique: dict[Path, Path] = {}
    for path in found:  # one file spelt two ways (a/x.png, a/../a/x.png) is one sample
        unique.setdefault(_resolved(path), path)
    return list(unique.values())


def _pattern_files(source: str, excluded: _Excluded) -> list[Path]:
    below = Path(_static_prefix(source))
    return [Path(p) for p in glob.glob(source, recursive=True) if Path(p).is_file() and not excluded.below(Path(p), below)]


def find_folders(sources: Sequence[str], holds: Callable[[Path], bool], what: str, exclude: Sequence[Path] = ()) -> list[Path]:
    """The folders that are one sample each: a folder named (or a pattern's) that ``holds`` a
    sample is one; else the folders below it that do, each taken whole (not searched further),
    skipping hidden and hookviz output folders and ``exclude`` (the run's ``out``). In the
    order given, each source's folders sorted, a folder found twice kept once.

    Args:
        holds: whether a folder is a sample (a clip's: it holds frames ``000.png``, ...).
        what: one sample in words, for the message when a source names none
            (``"sample of kind 'frames' (a folder of frames)"``).

    Raises:
        UsageError: a source names no such folder, or is (or lies in) one of ``exclude``.
    """
    excluded = _Excluded(exclude)
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        tops = [path] if path.exists() or not glob.has_magic(source) else sorted(map(Path, glob.glob(source, recursive=True)))
        matches = [folder for top in tops if top.is_dir() for folder in _sample_folders(top, excluded, source, holds)]
        if not matches:
            raise NothingFound(f"{display_path(source)}: names no {what} (hidden and output folders are skipped)")
        found.extend(matches)
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(_resolved(path), path)
    return list(unique.values())


def _sample_folders(top: Path, excluded: _Excluded, source: str, holds: Callable[[Path], bool]) -> list[Path]:
    _refuse_excluded(top, excluded, source)
    if holds(top):
        return [top]
    found = []
    for folder, subfolders, _ in os.walk(top):
        here = Path(folder)
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and not excluded.folder(here / d))
        found += [here / d for d in subfolders if holds(here / d)]
        subfolders[:] = [d for d in subfolders if here / d not in found]  # a sample's folder is not searched further
    return sorted(found)


def _refuse_excluded(top: Path, excluded: _Excluded, source: str) -> None:
    out = excluded.root(top)
    if out is not None:
        what = "is the folder" if _resolved(top) == _resolved(out) else f"holds {display_path(source)}, a folder"
        raise UsageError(f"{arg('out', display_path(out))}: {what} of the photos to explain; choose another {arg('out')}")
    if excluded.folder(top):
        raise UsageError(f"{display_path(source)}: is a hookviz output folder; name the photos' folder instead")


def _walk(top: Path, excluded: _Excluded, source: str, notes: list[str] | None) -> list[Path]:
    _refuse_excluded(top, excluded, source)
    files = _files_below(top, excluded)
    matches = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    if not matches:
        _refuse_none_found(source, "folder holds", files)
    _note_unread(source, "folder holds", files, notes)
    return sorted(matches)


def _files_below(top: Path, excluded: _Excluded, whole: Callable[[Path], bool] | None = None) -> list[Path]:
    """Every file below ``top`` but hidden ones, hookviz output folders' and ``excluded``'s; each
    folder ``whole`` takes (``top`` too) in their place, not searched further."""
    if whole is not None and whole(top):
        return [top]
    files = []
    for folder, subfolders, names in os.walk(top):
        here = Path(folder)
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and not excluded.folder(here / d))
        if whole is not None:
            files += [here / d for d in subfolders if whole(here / d)]
            subfolders[:] = [d for d in subfolders if here / d not in files]
        files += [here / f for f in names if not f.startswith(".")]
    return files


def _top_images(folder: Path) -> int:
    """How many image files lie directly in ``folder``."""
    try:
        entries = [entry for entry in os.scandir(folder) if not entry.name.startswith(".")]
        return sum(1 for entry in entries if Path(entry.name).suffix.lower() in IMAGE_SUFFIXES and entry.is_file())
    except OSError:
        return 0


def _unread_heif(files: Sequence[Path]) -> list[Path]:
    """The HEIC/HEIF photos among ``files`` that PIL cannot read here (no pillow-heif)."""
    return [p for p in files if p.suffix.lower() in HEIF_SUFFIXES and p.suffix.lower() not in IMAGE_SUFFIXES]


def _note_unread(source: str, what: str, files: Sequence[Path], notes: list[str] | None) -> None:
    heif = _unread_heif(files)
    if heif and notes is not None:
        notes.append(
            f"{display_path(source)}: {what} {len(heif)} HEIC/HEIF photo{'s' if len(heif) > 1 else ''}, left out: PIL "
            f"cannot read {'them' if len(heif) > 1 else 'it'} alone; {hint('heif')} to explain {'them' if len(heif) > 1 else 'it'} too"
        )


def _refuse_none_found(source: str, what: str, files: Sequence[Path]) -> None:
    """Refuse a folder or pattern without an image file PIL reads, naming pillow-heif where
    its files are photos PIL reads only with it."""
    heif = _unread_heif(files)
    if heif:
        raise NothingFound(
            f"{display_path(source)}: {what} {len(heif)} HEIC/HEIF photo{'s' if len(heif) > 1 else ''} and no other "
            f"image file; PIL cannot read {'them' if len(heif) > 1 else 'it'} alone: {hint('heif')}, or convert "
            f"{'them' if len(heif) > 1 else 'it'} to JPEG or PNG"
        )
    raise NothingFound(f"{display_path(source)}: {what} no image files (hidden and output folders are skipped)")


def _static_prefix(pattern: str) -> str:
    """The part of a glob pattern before its first wildcard's folder: ``a/b/*/c.png`` -> ``a/b``."""
    parts = Path(pattern).parts
    prefix = []
    for part in parts:
        if glob.has_magic(part):
            break
        prefix.append(part)
    return str(Path(*prefix)) if prefix else "."


def read_list(lines: Iterable[str]) -> list[str]:
    """Paths from ``--from-list``: one a line, blank lines and ``#`` comments skipped."""
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]
