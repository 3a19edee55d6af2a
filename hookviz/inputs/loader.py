"""The image loader: decodes a run's samples (photos) in a background thread, ahead of the model.

Decoding needs no torch, so the loader starts with the run and works on the core the
import of torch leaves idle. It holds at most ``limit`` decoded samples (a bound the run
lowers once it knows how large its batches are), and prepares them for the model once
the preprocessing is known. Its sample kind (``hookviz.samples``) decodes and prepares
them: a photo's unless it is given another.

Whatever a kind's ``load`` or ``prepare`` raises in the thread fails that sample, ``SystemExit``
and ``KeyboardInterrupt`` included (a signal reaches the main thread only, so one raised there
is the kind's own); should the thread fail anyway, iterating ends the run in one line instead
of waiting for a sample that never comes.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

from hookviz.errors import HookvizError, ImageError, describe, display_path
from hookviz.inputs.images import PreparedSample, load_image, prepare

__all__ = ["ImageLoader"]

_END = object()


class _Photos:
    """The photo's decoding and preprocessing (``samples.photo.Photo``'s), for a loader given no kind."""

    name = "photo"

    @staticmethod
    def load(path: Path, max_pixels: int, settings=None):
        return load_image(path, max_pixels)

    @staticmethod
    def prepare(loaded, preprocessing, max_pixels: int, settings=None):
        return prepare(loaded, preprocessing, max_pixels)


class _Decoded:
    """A sample decoded before the preprocessing was known: prepared when it is taken."""

    def __init__(self, loaded):
        self.loaded = loaded


class ImageLoader:
    """Iterating yields ``(path, PreparedSample or ImageError)`` in the order of ``paths``.

    Args:
        paths: the photos, in order.
        max_pixels: refuse larger photos (and resized sizes).
        limit: at most this many photos wait, decoded, for the consumer.
        stop: when set, iteration ends and the thread stops (a run asked to stop).
        kind: the sample kind (``hookviz.samples.SampleKind``) that decodes and prepares
            them; a photo's by default.
        settings: the kind's option group, as the run sets it (``None``: it has none).
    """

    def __init__(
        self, paths: Sequence[Path], max_pixels: int, limit: int, stop: threading.Event | None = None, kind=None, settings=None
    ):
        self.kind, self.settings = kind or _Photos(), settings
        self._paths = list(paths)
        self._max_pixels = max_pixels
        self._limit = max(1, limit)
        self._items: deque = deque()
        self._changed = threading.Condition()
        self._stopped = False
        self._stop_event = stop or threading.Event()
        self._preprocessing = None
        self._failure: BaseException | None = None  # what stopped the thread before its last sample
        context = contextvars.copy_context()  # messages keep the caller's spelling of arguments
        self._thread = threading.Thread(target=context.run, args=(self._work,), name="hookviz-loader", daemon=True)

    def start(self) -> "ImageLoader":
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def set_preprocessing(self, preprocessing) -> None:
        """From now on photos are prepared for the model as they are decoded."""
        with self._changed:
            self._preprocessing = preprocessing

    def hold_at_most(self, count: int) -> None:
        """Let at most ``count`` decoded photos wait from now on."""
        with self._changed:
            self._limit = max(1, count)
            self._changed.notify_all()

    @property
    def waiting(self) -> int:
        with self._changed:
            return len(self._items)

    def __iter__(self) -> Iterator[tuple[Path, PreparedSample | ImageError]]:
        while True:
            with self._changed:
                while not self._items and not self._stopping():
                    self._changed.wait(timeout=0.2)
                if not self._items or self._stop_event.is_set():
                    return
                item = self._items.popleft()
                self._changed.notify_all()
                preprocessing = self._preprocessing
            if item is _END:
                if self._failure is not None:
                    raise HookvizError(f"the sample loader stopped: {describe(self._failure)}") from self._failure
                return
            path, image = item
            if isinstance(image, _Decoded):  # decoded before the preprocessing was known
                image = self._prepared(path, image.loaded, preprocessing)
            yield path, image

    def _stopping(self) -> bool:
        return self._stopped or self._stop_event.is_set()

    # -- the thread

    def _work(self) -> None:
        try:
            self._load_all()
        except BaseException as exc:  # noqa: BLE001 (a fault of its own: iterating reports it)
            self._failure = exc
        finally:
            with self._changed:
                self._items.append(_END)
                self._changed.notify_all()

    def _load_all(self) -> None:
        for path in self._paths:
            with self._changed:
                while len(self._items) >= self._limit and not self._stopping():
                    self._changed.wait(timeout=0.2)
                if self._stopping():
                    return
                preprocessing = self._preprocessing
            image = self._decoded(path)
            if isinstance(image, _Decoded) and preprocessing is not None:
                image = self._prepared(path, image.loaded, preprocessing)
            with self._changed:
                self._items.append((path, image))
                self._changed.notify_all()

    def _decoded(self, path: Path) -> _Decoded | ImageError:
        try:
            return _Decoded(self.kind.load(path, self._max_pixels, self.settings))
        except ImageError as exc:
            return exc
        except Exception as exc:  # a decoder bug must fail this image, not the run
            return ImageError(f"{display_path(path)}: could not decode ({describe(exc)})")
        except BaseException as exc:
            return self._raised_in_thread(exc, f"{display_path(path)}: could not decode")

    def _prepared(self, path: Path, image, preprocessing) -> PreparedSample | ImageError:
        try:
            return self.kind.prepare(image, preprocessing, self._max_pixels, self.settings)
        except ImageError as exc:
            return exc
        except Exception as exc:
            return ImageError(f"{display_path(path)}: could not preprocess ({describe(exc)})")
        except BaseException as exc:
            return self._raised_in_thread(exc, f"{display_path(path)}: could not preprocess")

    def _raised_in_thread(self, exc: BaseException, what: str) -> ImageError:
        """``SystemExit`` or ``KeyboardInterrupt`` from a kind's code fails its sample in the thread
        (no signal reaches it); in the caller's thread it goes on up, as the caller's would."""
        if threading.current_thread() is not self._thread:
            raise exc
        return ImageError(f"{what} ({describe(exc)}, raised by sample kind {getattr(self.kind, 'name', '?')!r})")
