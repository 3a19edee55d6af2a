"""Identity: how a later run recognises a file an earlier run read, by its content.

``--skip-existing`` keeps an image's results only when they were made from the same photo
with the same weights. A name says neither: cameras name every card's first photo
``IMG_0001.jpg``, and training overwrites ``last.ckpt`` in place. So each report records
the photo's resolved path, size, modification time and SHA-256, and the weights file's
SHA-256 (the digest ``sha256sum`` prints and the Hugging Face hub shows). A photo whose
path, size and time are unchanged is taken as unchanged without reading it again. A sample
of several files (a folder of frames, a photo and its depth) records each file's path, size
and time too, so replacing any one of them (by a copy of the same size and an older time, as
``cp -p`` or ``rsync -a`` makes) has its files read again.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from hookviz.errors import display_path

__all__ = ["file_sha256", "SampleIdentity", "ReferenceIdentity", "Match", "match_photo", "match_files"]

_CHUNK = 1 << 20
#: Digests remembered, the most recent first out: a run over a million photos keeps a few.
_CACHED = 256
_cache: OrderedDict[tuple[str, int, int], str] = OrderedDict()
_cache_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks (a 100 MB checkpoint: about 0.13 s).

    Remembered for the process by resolved path, size and modification time, so loading
    the same weights again costs a ``stat``.

    Raises:
        OSError: the file cannot be read.
    """
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    with _cache_lock:
        known = _cache.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    with _cache_lock:
        _cache[key] = digest.hexdigest()
        while len(_cache) > _CACHED:
            _cache.popitem(last=False)
    return digest.hexdigest()


@dataclass(frozen=True)
class SampleIdentity:
    """What a report records of the files its sample was made from (``report.json``'s
    ``sample_identity``): a photo's file, a clip's, a photo and the files bound to it."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    #: A sample of several files: each one's (resolved path, size, modification time), in order.
    files: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def of(cls, path: Path) -> "SampleIdentity":
        """Raises OSError when the file cannot be read."""
        stat = os.stat(path)
        return cls(display_path(os.path.realpath(path)), stat.st_size, stat.st_mtime_ns, file_sha256(path))

    @classmethod
    def of_files(cls, paths) -> "SampleIdentity":
        """A sample's identity: its one file's (``of``); of several (a photo and the vector paired
        with it), the first's path, their total size, the latest modification time, one
        SHA-256 of their digests, in order, and each one's path, size and time: rewriting or
        replacing any of them changes it.

        Raises OSError when a file cannot be read."""
        paths = [Path(p) for p in paths]
        if len(paths) == 1:
            return cls.of(paths[0])
        files = _stats(paths)
        size, latest = sum(f[1] for f in files), max(f[2] for f in files)
        return cls(files[0][0], size, latest, _joined(paths), files)

    def to_json(self) -> dict:
        entry = {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns, "sha256": self.sha256}
        if self.files:
            entry["files"] = [{"path": path, "size": size, "mtime_ns": mtime} for path, size, mtime in self.files]
        return entry

    @classmethod
    def from_json(cls, entry) -> "SampleIdentity | None":
        """The identity a report recorded, or ``None`` (a report of an older hookviz, or damaged)."""
        if not isinstance(entry, dict):
            return None
        path, size, mtime, sha = (entry.get(key) for key in ("path", "size", "mtime_ns", "sha256"))
        if not (isinstance(path, str) and isinstance(size, int) and isinstance(mtime, int) and isinstance(sha, str)):
            return None
        return cls(path, size, mtime, sha, _files_from_json(entry.get("files")))


@dataclass(frozen=True)
class ReferenceIdentity:
    """What a report records of a reference an embedding was compared with (``--target-image``):
    its name, the photos it stands for (a folder's, each as ``SampleIdentity``) and one SHA-256
    of its content (a photo's bytes; a folder's photos' digests, in order; from Python, an
    embedding's or an in-memory image's values), which ``--skip-existing`` compares."""

    name: str
    sha256: str
    photos: tuple[SampleIdentity, ...] = ()

    @classmethod
    def of_photos(cls, name: str, paths) -> "ReferenceIdentity":
        """Raises OSError when a photo cannot be read."""
        photos = tuple(SampleIdentity.of(Path(path)) for path in paths)
        if len(photos) == 1:
            return cls(name, photos[0].sha256, photos)
        return cls(name, hashlib.sha256(" ".join(p.sha256 for p in photos).encode()).hexdigest(), photos)

    @classmethod
    def of_values(cls, name: str, values: bytes) -> "ReferenceIdentity":
        return cls(name, hashlib.sha256(values).hexdigest())

    def to_json(self) -> dict:
        return {"name": self.name, "sha256": self.sha256, "photos": [photo.to_json() for photo in self.photos]}

    @classmethod
    def from_json(cls, entry) -> "ReferenceIdentity | None":
        """The reference a report recorded, or ``None`` (damaged)."""
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("sha256"), str):
            return None
        photos = entry.get("photos")
        photos = photos if isinstance(photos, list) else []
        return cls(entry["name"], entry["sha256"], tuple(p for p in map(SampleIdentity.from_json, photos) if p is not None))


class Match(Enum):
    """How a photo relates to the one a report was made from."""

    SAME = "same"  # the same bytes (perhaps moved or copied since)
    CHANGED = "changed"  # the same file, since rewritten
    OTHER = "other"  # another photo
    UNKNOWN = "unknown"  # the report records no photo, or this one cannot be read


def match_photo(recorded: SampleIdentity | None, path: Path, digest) -> Match:
    """Compare the photo at ``path`` with ``recorded``.

    Args:
        digest: ``digest(path)`` gives the photo's SHA-256; called only when the path, size
            and modification time do not already tell (a run remembers it per photo).
    """
    if recorded is None:
        return Match.UNKNOWN
    try:
        stat = os.stat(path)
        here = display_path(os.path.realpath(path))
        if (recorded.path, recorded.size, recorded.mtime_ns) == (here, stat.st_size, stat.st_mtime_ns):
            return Match.SAME
        sha = digest(path)
    except OSError:
        return Match.UNKNOWN
    if sha == recorded.sha256:
        return Match.SAME
    return Match.CHANGED if recorded.path == here else Match.OTHER


def match_files(recorded: SampleIdentity | None, paths) -> Match:
    """``match_photo`` for a sample of several files (``SampleIdentity.of_files``): the same when
    each file's path, size and time is the one recorded, else by their digests (a report that
    records no file's own, of an older hookviz, by their digests)."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1:
        return match_photo(recorded, paths[0], file_sha256)
    if recorded is None:
        return Match.UNKNOWN
    try:
        here = display_path(os.path.realpath(paths[0]))
        if recorded.files and recorded.files == _stats(paths):
            return Match.SAME
        sha = _joined(paths)
    except OSError:
        return Match.UNKNOWN
    if sha == recorded.sha256:
        return Match.SAME
    return Match.CHANGED if recorded.path == here else Match.OTHER


def _stats(paths) -> tuple[tuple[str, int, int], ...]:
    """Each file's resolved path, size and modification time."""
    stats = [(p, os.stat(p)) for p in paths]
    return tuple((display_path(os.path.realpath(p)), s.st_size, s.st_mtime_ns) for p, s in stats)


def _files_from_json(entries) -> tuple[tuple[str, int, int], ...]:
    """The files a report recorded (``SampleIdentity.files``); ``()`` where it records none or a damaged list."""
    if not isinstance(entries, list):
        return ()
    files: list[tuple[str, int, int]] = []
    for entry in entries:
        path, size, mtime = (entry.get(key) for key in ("path", "size", "mtime_ns")) if isinstance(entry, dict) else (None,) * 3
        if not (isinstance(path, str) and isinstance(size, int) and isinstance(mtime, int)):
            return ()
        files.append((path, size, mtime))
    return tuple(files)


def _joined(paths) -> str:
    """One SHA-256 of the files' own digests, in order."""
    return hashlib.sha256(" ".join(file_sha256(p) for p in paths).encode()).hexdigest()


#: Its name in hookviz 0.2, for plug-ins written against it (to go in 0.3).
PhotoIdentity = SampleIdentity
