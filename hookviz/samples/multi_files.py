"""The files of a multi-input sample: which samples the first input's folders hold, the file of
each other input that pairs with one (by relative path without suffix), and reading them:
photos, ``.npy``, ``.pt`` and ``.safetensors`` tensors, a CSV's row (keyed by file name)."""

from __future__ import annotations

import csv
import functools
import glob
import os
import pickle
import re
from pathlib import Path

import numpy as np

from hookviz.errors import ImageError, UsageError, arg, describe, display_path, first_line
from hookviz.inputs.discovery import IMAGE_SUFFIXES, is_output_folder

__all__ = [
    "TENSOR_SUFFIXES",
    "SUFFIXES",
    "files_in",
    "key_of",
    "partner",
    "clashing_files",
    "doubled_row",
    "read_tensor",
    "read_row",
    "read_header",
    "is_photo",
    "is_csv",
]

#: Tensors taken as they are.
TENSOR_SUFFIXES = (".npy", ".pt", ".safetensors")
#: What an input's file may be.
SUFFIXES = (*TENSOR_SUFFIXES, ".csv")


def is_photo(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def is_csv(path: Path) -> bool:
    return path.suffix.lower() == ".csv"


def _usable(name: str) -> bool:
    suffix = Path(name).suffix.lower()
    return not name.startswith(".") and (suffix in IMAGE_SUFFIXES or suffix in TENSOR_SUFFIXES)


def files_in(top: Path, excluded: set[Path]) -> list[Path]:
    """The photos and tensor files below folder ``top`` (hidden and output folders skipped), sorted."""
    found = []
    for folder, subfolders, names in os.walk(top):
        here = Path(folder)
        subfolders[:] = sorted(
            d
            for d in subfolders
            if not d.startswith(".") and not is_output_folder(here / d) and Path(os.path.realpath(here / d)) not in excluded
        )
        found += [here / n for n in sorted(names) if _usable(n)]
    return sorted(found)


def key_of(path: Path, roots: tuple[Path, ...]) -> str:
    """The key a sample's file pairs by: its path below the first input's folder without suffix (a file given alone: its stem)."""
    for root in roots:
        if root.is_dir():
            try:
                return path.relative_to(root).with_suffix("").as_posix()
            except ValueError:
                continue
    return path.stem


def partner(roots: tuple[Path, ...], key: str, sample: Path | None = None) -> Path | None:
    """The file of an input bound to ``roots`` for the sample of ``key``: the file itself when one is
    bound, else the file of that relative path without suffix in its folder."""
    for root in roots:
        if not root.is_dir():
            return root
        folder, stem = (root / key).parent, Path(key).name
        if folder.is_dir():
            found = sorted(
                p
                for p in folder.glob(f"{glob.escape(stem)}.*")
                if p.stem == stem and _usable(p.name) and p.is_file() and (sample is None or not _same_file(p, sample))
            )
            if len(found) > 1:
                raise ImageError(
                    f"{display_path(found[0])} and {display_path(found[1])}: two files for the sample {key}; keep one"
                )
            if found:
                return found[0]
    return None


def _same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def clashing_files(root: Path, samples: set[Path]) -> tuple[Path, Path] | None:
    """Two files below folder ``root`` that would pair with one sample (``depth/a.npy`` and
    ``depth/a.pt``), or whose relative paths differ only by case (``A.npy`` and ``a.npy``: one
    would be left out unsaid, and a case-insensitive disk holds only one); ``None`` when none do.
    ``samples`` (resolved paths), the first input's files, are no input's (a folder of photos and
    their ``.npy`` files, bound twice)."""
    seen: dict[str, Path] = {}
    for path in files_in(root, set()):
        if Path(os.path.realpath(path)) in samples:
            continue
        key = path.relative_to(root).with_suffix("").as_posix().casefold()
        if key in seen:
            return seen[key], path
        seen[key] = path
    return None


def read_tensor(path: Path, label: str) -> np.ndarray:
    """A tensor file's array (float32), as it is.

    Raises:
        ImageError: it cannot be read, holds not one tensor, or holds no numbers (naming the file and the input).
    """
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            array = np.load(path, allow_pickle=False)
        elif suffix == ".safetensors":
            from safetensors.numpy import load_file

            held = load_file(str(path))
            if len(held) != 1:
                raise ImageError(f"{display_path(path)}: input {label}: holds {len(held)} tensors ({', '.join(held)}); give one")
            array = next(iter(held.values()))
        else:
            import torch

            value = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(value, torch.Tensor):
                raise ImageError(f"{display_path(path)}: input {label}: holds a {type(value).__name__}, not one tensor")
            array = value.detach().float().numpy() if value.is_floating_point() else value.numpy()
    except ImageError:
        raise
    except pickle.UnpicklingError as exc:  # torch's weights-only refusal: its advice runs to many lines
        raise ImageError(f"{display_path(path)}: input {label}: {_pickled(exc)}") from None
    except Exception as exc:  # a damaged or foreign file: say which, in one line
        raise ImageError(f"{display_path(path)}: input {label}: cannot be read as a tensor ({describe(exc)})") from None
    return checked_array(np.asarray(array), f"{display_path(path)}: input {label}")


def _pickled(error: pickle.UnpicklingError) -> str:
    """One line for a ``.pt`` that ``torch.load(weights_only=True)`` refused: what it holds, and what to do."""
    found = re.search(r"GLOBAL (\S+)", str(error))
    what = f" (it names {found.group(1)})" if found else f" ({first_line(error)})"
    return (
        f"holds pickled Python objects{what}, which hookviz does not load, so nothing in it ran; "
        "save the tensor alone (torch.save(tensor, path), or numpy.save)"
    )


def checked_array(array: np.ndarray, where: str) -> np.ndarray:
    """``array`` as float32, when it holds real numbers (floats: a model's input is taken as it is).

    Raises:
        ImageError: an integer, boolean, complex or object dtype, or an empty array.
    """
    if array.dtype.kind != "f":
        raise ImageError(f"{where}: a tensor of dtype {array.dtype}; the model takes floating-point inputs (float16/32/64)")
    if array.size == 0:
        raise ImageError(f"{where}: the tensor is empty")
    return np.ascontiguousarray(array, dtype=np.float32)


@functools.lru_cache(maxsize=16)
def _table(path: Path, mtime_ns: int) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    with open(path, newline="", encoding="utf-8") as stream:
        rows = [row for row in csv.reader(stream) if row]
    if len(rows) < 2 or len(rows[0]) < 2:
        raise ImageError(f"{display_path(path)}: a CSV needs a header (file, then feature names) and a row per sample")
    table: dict[str, tuple[str, ...]] = {}
    for row in rows[1:]:
        if row[0].strip() in table:
            raise ImageError(f"{display_path(path)}: two rows for {row[0].strip()}; keep one")
        table[row[0].strip()] = tuple(row[1:])
    return tuple(rows[0]), table


def read_header(path: Path, label: str) -> tuple[str, ...]:
    """The feature names of a CSV's header (after its first column, the file names).

    Raises:
        UsageError: the CSV cannot be read or has no header and rows.
    """
    try:
        return _table(path, os.stat(path).st_mtime_ns)[0][1:]
    except (OSError, UnicodeDecodeError, csv.Error, ImageError) as exc:
        raise UsageError(f"{arg('input', display_path(path))}: input {label}: cannot be read as a CSV ({exc})") from None


def _row_names(key: str, key_file: Path) -> tuple[str, ...]:
    """What a CSV's first column may call the sample of ``key``: its key, file name, stem, key with suffix."""
    return tuple(dict.fromkeys((key, key_file.name, key_file.stem, f"{key}{key_file.suffix}")))


def _two_rows(path: Path, key_file: Path, rows: list[str], label: str) -> str:
    return f"{display_path(path)}: input {label}: two rows for {key_file.name} ({rows[0]!r} and {rows[1]!r}); keep one"


def doubled_row(path: Path, keys, label: str) -> str | None:
    """Where the CSV ``path`` has two rows for one sample of ``keys`` (``(key, key_file)`` pairs:
    rows ``a.png`` and ``a`` both name ``a.png``), the line that says so; else ``None``.

    Raises:
        UsageError: the CSV cannot be read (``read_header``'s).
    """
    read_header(path, label)
    rows = _table(path, os.stat(path).st_mtime_ns)[1]
    for key, key_file in keys:
        matching = [name for name in _row_names(key, key_file) if name in rows]
        if len(matching) > 1:
            return _two_rows(path, key_file, matching, label)
    return None


def read_row(path: Path, key: str, key_file: Path, label: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """The row of ``path`` (a CSV) for the sample of ``key`` (its key file ``key_file``): its numbers and the header's feature names.

    Raises:
        ImageError: the CSV cannot be read, has no row for the sample, or a cell that is no finite number.
    """
    try:
        (first, *header), rows = _table(path, os.stat(path).st_mtime_ns)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ImageError(f"{display_path(path)}: input {label}: cannot be read as a CSV ({exc})") from None
    names = _row_names(key, key_file)
    matching = [name for name in names if name in rows]
    if len(matching) > 1:
        raise ImageError(_two_rows(path, key_file, matching, label))
    row = rows[matching[0]] if matching else None
    if row is None and first.strip() in names:
        raise ImageError(
            f"{display_path(path)}: input {label}: its first line, the header, is the row of {key_file.name}; "
            "add a header line first (file, then the features' names)"
        )
    if row is None:
        raise ImageError(
            f"{display_path(path)}: input {label}: no row for {key_file.name} (its first column keys rows by file name)"
        )
    try:
        values = np.asarray([float(cell) for cell in row], dtype=np.float32)
    except ValueError:
        raise ImageError(
            f"{display_path(path)}: input {label}: the row of {key_file.name} holds a cell that is no number"
        ) from None
    if not np.isfinite(values).all():
        cell = row[int(np.flatnonzero(~np.isfinite(values))[0])].strip()
        raise ImageError(
            f"{display_path(path)}: input {label}: the row of {key_file.name} holds {cell}, not a finite number; fill it in"
        )
    if values.shape != (len(header),):
        raise ImageError(
            f"{display_path(path)}: input {label}: the row of {key_file.name} has {values.size} numbers, the header {len(header)} names"
        )
    return values, tuple(header)
