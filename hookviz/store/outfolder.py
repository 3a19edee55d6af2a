"""A run's output folder before anything is written there: whether it can be
(``check_out``), and that no other run writes there meanwhile (``FolderLock``).

One writer per output folder: a run holds its ``--out`` for as long as it writes there. Two
runs writing one folder at once mix their results (one run's reports beside the other's, a
run.json describing one command and files of the other left unlisted). A run holds a lock on a file in the folder (``flock``): whole for a run without ``--shard``, shared
for the shards of a run, which write disjoint images and their own run file (and each shard
whole, so the same shard is not run twice at once). The kernel releases a lock when its
process ends however it ends (``kill -9``, a crash), so no stale lock is ever left to
clear by hand. Where ``fcntl`` is missing (Windows), or the file system refuses locks,
runs are not held apart.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence
from pathlib import Path

from hookviz.errors import OutputError, arg, display_path
from hookviz.store.files import existing_ancestor

__all__ = ["check_out", "claim_out", "FolderLock", "LOCK_FILE"]

#: The file the lock is taken on, hidden in the output folder (discovery skips it).
LOCK_FILE = ".hookviz-run.lock"

_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def check_out(out: Path, images: Sequence[Path] = ()) -> None:
    """Raises OutputError when ``out`` could not be created or written, or when it holds one
    of ``images`` (a run marks its folder as output, which later runs skip: the photos there
    would be left out of them), or an atlas (``hookviz atlas --out``); creates nothing."""
    _check_holds_no_photo(out, images)
    if (out / "atlas.json").is_file():  # each writes its own index.html
        raise OutputError(
            f"{arg('out', display_path(out))}: holds an atlas (atlas.json), whose page the run's index.html would "
            f"replace; choose another {arg('out')}"
        )
    dangling = next((p for p in (out, *out.parents) if p.is_symlink() and not p.exists()), None)
    if dangling is not None:
        raise OutputError(
            f"{arg('out', out)}: {display_path(dangling)} is a link to {display_path(os.readlink(dangling))}, "
            "which does not exist; create that folder or choose another"
        )
    probe = existing_ancestor(out)
    if not probe.is_dir():
        raise OutputError(f"{arg('out', out)}: {display_path(probe)} is a file, not a folder; choose another folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(
            f"{arg('out', out)}: cannot write into {display_path(probe)} (permission denied); choose another folder"
        )


def claim_out(out: Path, hold: FolderLock) -> None:
    """Create ``out``, hold it with ``hold`` before anything is written there, and mark it a run's
    output folder (which later runs skip): what every run does once its model is loaded.

    Raises:
        OutputError: it cannot be created or written, or another run is writing there now.
    """
    from hookviz.inputs.discovery import OUTPUT_MARKER

    try:
        out.mkdir(parents=True, exist_ok=True)
        hold.acquire()  # before anything is written there
        (out / OUTPUT_MARKER).touch()
    except OSError as exc:
        raise OutputError(
            f"{arg('out', out)}: cannot write there ({exc.strerror or type(exc).__name__}); choose another folder"
        ) from None


def _check_holds_no_photo(out: Path, images: Sequence[Path]) -> None:
    if not out.is_dir():
        return  # a folder still to be made holds nothing
    root = out.resolve()
    folders: dict[Path, bool] = {}  # each photo's folder, resolved once: a run's photos lie in few
    for image in images:
        parent = Path(os.path.abspath(image)).parent
        if parent not in folders:
            resolved = parent.resolve()
            folders[parent] = resolved == root or root in resolved.parents
        if folders[parent]:
            raise OutputError(
                f"{arg('out', display_path(out))}: holds {display_path(image)}, a photo to explain; later runs skip a "
                f"run's output folder, so its photos would be left out: choose another {arg('out')}, such as "
                f"{display_path(out / 'hookviz-out')}"
            )
    _check_is_no_photo_folder(out)  # and photos of no run: a run would mark their folder an output folder


def _check_is_no_photo_folder(out: Path) -> None:
    """Refuse an ``out`` that is a folder of photos (not one a run made): a run would mark it
    an output folder, which later runs over it, or over its parent, skip."""
    from hookviz.inputs.discovery import IMAGE_SUFFIXES, is_output_folder

    if is_output_folder(out):
        return
    with contextlib.suppress(OSError):
        photos = sorted(p.name for p in out.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if photos:
            shown = ", ".join(photos[:3]) + (f" and {len(photos) - 3} more" if len(photos) > 3 else "")
            raise OutputError(
                f"{arg('out', display_path(out))}: holds photos ({shown}) and is no hookviz output folder; a run "
                f"would make it one, which later runs skip: choose an empty or new folder, such as "
                f"{display_path(out / 'hookviz-out')}"
            )


class FolderLock:
    """The hold of one run (``shard``: its ``(K, N)``, or ``None``) on its output folder ``out``."""

    def __init__(self, out: Path, shard: tuple[int, int] | None = None):
        self.out, self.shard = out, shard
        self._handles: list[int] = []

    def __repr__(self) -> str:
        return f"FolderLock({display_path(self.out)!r}, shard={self.shard}, held={self.held})"

    @property
    def held(self) -> bool:
        return bool(self._handles)

    def acquire(self, create: bool = True) -> bool:
        """Hold the folder, which must exist. With ``create`` false, only when a run made its
        lock file already (checking early creates nothing). Returns whether it is held.

        Raises:
            OutputError: another run is writing into the folder.
        """
        if self.held:
            return True
        try:
            import fcntl
        except ImportError:
            return False
        files = [(LOCK_FILE, fcntl.LOCK_EX if self.shard is None else fcntl.LOCK_SH)]
        if self.shard is not None:
            files.append((f".hookviz-run-{self.shard[0]}-of-{self.shard[1]}.lock", fcntl.LOCK_EX))
        for name, mode in files:
            handle = self._open(self.out / name, create)
            if handle is None:
                self.release()
                return False
            self._handles.append(handle)
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in _BUSY:  # a file system without locks: nothing to hold apart with
                    self.release()
                    return False
                busy = self._who(handle, fcntl)
                self.release()
                raise OutputError(
                    f"{arg('out', display_path(self.out))}: {busy} is writing into this folder now; wait for it to "
                    f"end, or choose another {arg('out')} (shards of one run share a folder with {arg('shard', 'K/N')})"
                ) from None
        if self.shard is not None:
            self._hold_count(fcntl)
        return True

    def _hold_count(self, fcntl) -> None:
        """Shards share a folder only with shards of their own count N: those of another N
        (another run's 1/3 beside this run's 1/2) would write the same images at once. Each
        shard holds its N's file shared, and finds another N's held by trying it whole."""
        count = self.shard[1]  # type: ignore[index]
        handle = self._open(self.out / f".hookviz-shards-of-{count}.lock", True)
        if handle is None:
            return
        self._handles.append(handle)
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        for other in sorted(self.out.glob(".hookviz-shards-of-*.lock")):
            if other.name == f".hookviz-shards-of-{count}.lock":
                continue
            probe = self._open(other, False)
            if probe is None:
                continue
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in _BUSY:
                    self.release()
                    theirs = other.name.removeprefix(".hookviz-shards-of-").removesuffix(".lock")
                    raise OutputError(
                        f"{arg('out', display_path(self.out))}: shards of another run (of {theirs}) are writing into "
                        f"this folder now; shards share a folder only with shards of one count ({arg('shard', f'K/{theirs}')}): "
                        f"wait for them to end, or choose another {arg('out')}"
                    ) from None
            finally:
                os.close(probe)

    def _open(self, path: Path, create: bool) -> int | None:
        # for writing where it can be (NFS emulates flock with locks that need it), else for reading
        for mode in (os.O_RDWR, os.O_RDONLY):
            try:
                return os.open(path, mode | (os.O_CREAT if create else 0), 0o666)
            except PermissionError:
                continue
            except OSError:
                return None
        return None

    def _who(self, handle: int, fcntl) -> str:
        """Who holds what this run could not have: a run without ``--shard``, shards of a run, or this shard."""
        if len(self._handles) > 1:
            return f"another run of shard {self.shard[0]}/{self.shard[1]}"  # type: ignore[index]
        if self.shard is not None:
            return f"another hookviz run (without {arg('shard')})"
        try:  # shards share the lock: a shared one can be had beside theirs, not beside a run's
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return "another hookviz run"
        return "a shard of another hookviz run"

    def release(self) -> None:
        """Let go of the folder (closing the file releases its lock)."""
        for handle in self._handles:
            with contextlib.suppress(OSError):
                os.close(handle)
        self._handles = []
