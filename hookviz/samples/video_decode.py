"""Decoding a clip's sampled frames from a video file with PyAV, seeking to each rather than
decoding the whole file: a two-hour video costs what its sampled frames (and the frames
between each one's keyframe and itself) cost, and memory holds only the sampled frames.

No torch here: a sample kind's ``load`` runs while torch imports.

What is done with awkward files, each in one note or one error line:
- a corrupt or truncated container, or one with no video stream: ``ImageError``;
- a clip longer than the video (or its ``--start``/``--end`` span): the last frame is repeated;
- variable frame rate: frames are taken by their timestamps (what ``times`` says);
- more than 8 bits per channel or an HDR transfer: converted to 8-bit RGB, without tone mapping;
- frames above ``--max-pixels``: downscaled as they are decoded (keeping the aspect ratio);
- rotation metadata: the frames are turned upright, as EXIF orientation is for photos.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hookviz.errors import ImageError, UsageError, arg, describe, display_path

__all__ = ["VIDEO_SUFFIXES", "INSTALL", "ClipPlan", "DecodedClip", "decode_clip", "frame_indices", "part_of_span", "require_av"]

#: The files that are videos.
VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".mkv", ".webm", ".mov", ".avi"})

INSTALL = "pip install 'hookviz[video]'"

#: A target this many seconds or less after the last decoded frame is reached by decoding on;
#: a farther one (or an earlier one) by seeking to the keyframe before it.
SEEK_GAP = 1.0

#: Transfer characteristics of HDR video (ITU-T H.273): SMPTE ST 2084 (PQ) and ARIB STD-B67 (HLG).
HDR_TRANSFERS = {16: "PQ", 18: "HLG"}


@dataclass(frozen=True)
class ClipPlan:
    """Which frames make a clip.

    Attributes:
        frames: how many.
        stride: ``0``: spread evenly over the span; ``s``: every ``s``-th frame from its start.
        start, end: the span in seconds (``end`` ``None``: to the video's end).
        part, parts: clip ``part`` (from 1) of ``parts`` (``--clips``): the span is cut into
            ``parts`` equal runs of frames, and the clip is taken from its run as from the span.
    """

    frames: int
    stride: int = 0
    start: float = 0.0
    end: float | None = None
    part: int = 1
    parts: int = 1


@dataclass(frozen=True)
class DecodedClip:
    """A clip's frames, (T, H, W, 3) uint8 upright RGB; ``times`` in seconds; ``decoded``: how
    many frames the decoder decoded to get them (what the clip cost)."""

    frames: np.ndarray
    times: tuple[float, ...]
    notes: tuple[str, ...] = ()
    decoded: int = 0


def require_av():
    """PyAV, imported.

    Raises:
        UsageError: it is not installed, in one line saying how to install it.
    """
    try:
        import av
    except ImportError:
        raise UsageError(f"reading videos needs PyAV: {INSTALL}") from None
    return av


def part_of_span(available: int, plan: ClipPlan, first: int = 0) -> tuple[int, int]:
    """The run of frames of clip ``plan.part`` of ``plan.parts`` among ``available`` frames from
    index ``first`` on: its first index and its length. The runs follow one another and never overlap.

    Raises:
        ImageError: the span holds fewer frames than ``plan.parts`` (without a path: the caller adds it).
    """
    if plan.parts == 1:
        return first, available
    if available < plan.parts:
        raise ImageError(f"holds {available} frames in its span, fewer than {arg('clips', plan.parts)}; give fewer clips")
    begin = (plan.part - 1) * available // plan.parts
    return first + begin, plan.part * available // plan.parts - begin


def frame_indices(available: int, plan: ClipPlan, first: int = 0) -> tuple[list[int], str | None]:
    """The indices of the clip's frames among ``available`` frames from index ``first`` on, and a
    note when some repeat (the span holds fewer frames than the clip needs)."""
    if plan.stride:
        wanted = [first + i * plan.stride for i in range(plan.frames)]
        taken = [min(i, first + available - 1) for i in wanted]
        short = wanted[-1] > taken[-1]
        need = f"{(plan.frames - 1) * plan.stride + 1} frames ({arg('frames', plan.frames)} every {arg('frame_stride', plan.stride)})"
    else:
        taken = [first + int(i) for i in np.linspace(0, available - 1, plan.frames).round()] if plan.frames > 1 else [first]
        short = available < plan.frames
        need = f"{arg('frames', plan.frames)}"
    if not short:
        return taken, None
    return taken, f"holds {available} frames in its span, fewer than {need}: its last frames repeat"


def decode_clip(path: Path, plan: ClipPlan, max_pixels: int) -> DecodedClip:
    """The frames of ``plan`` from the video at ``path``.

    Raises:
        ImageError: the file is missing, empty, corrupt, truncated before the clip's first
            frame, has no video stream, or its span holds no frame, in one line naming it.
    """
    av = require_av()
    shown = display_path(path)
    if not path.is_file():
        raise ImageError(f"{shown}: no such file")
    stat = path.stat()
    if stat.st_size == 0:
        raise ImageError(f"{shown}: file is empty (0 bytes)")
    with _OPEN.lock:
        reader = _OPEN.take((str(path), stat.st_size, stat.st_mtime_ns, max_pixels), plan)
        try:
            if reader is None:
                reader = _open_reader(av, path, shown, max_pixels)
            clip = reader.clip(plan)
        except av.FFmpegError as exc:
            _close(reader)
            raise ImageError(f"{shown}: corrupt or truncated video ({describe(exc)})") from None
        except BaseException:
            _close(reader)
            raise
        if plan.parts > 1 and plan.part < plan.parts:  # --clips: the next clip decodes on from here
            _OPEN.keep((str(path), stat.st_size, stat.st_mtime_ns, max_pixels), plan, reader)
        else:
            _close(reader)
        return clip


def _open_reader(av, path: Path, shown: str, max_pixels: int) -> "_Reader":
    try:
        container = av.open(str(path), metadata_errors="ignore")
    except av.FFmpegError as exc:
        raise ImageError(f"{shown}: not a video PyAV can read, corrupt or truncated ({describe(exc)})") from None
    if not container.streams.video:
        audio = bool(container.streams.audio)  # read before closing: a closed container lists no streams
        container.close()
        if not audio:
            raise ImageError(f"{shown}: holds no stream PyAV can read: corrupt or truncated?")
        raise ImageError(f"{shown}: holds no video stream (audio only); give a video")
    return _Reader(container, shown, max_pixels)


def _close(reader) -> None:
    if reader is not None:
        reader.container.close()


class _OpenReader:
    """The one video kept open between the clips ``--clips`` cuts it into: clip k+1 of a file is
    asked for right after clip k, and decoding on from where clip k ended costs one pass over
    the file where seeking cannot help (a video of one keyframe), instead of one per clip."""

    def __init__(self):
        self.lock = threading.Lock()
        self.key, self.part, self.reader = None, 0, None

    def take(self, key, plan: ClipPlan):
        """The kept reader of ``key`` when ``plan`` is its next clip (else ``None``, the kept one closed)."""
        reader, fits = self.reader, self.key == key and plan.part == self.part + 1
        self.key, self.part, self.reader = None, 0, None
        if reader is not None and not fits:
            _close(reader)
            return None
        return reader

    def keep(self, key, plan: ClipPlan, reader) -> None:
        self.key, self.part, self.reader = key, plan.part, reader


_OPEN = _OpenReader()


class _Reader:
    """One open video's stream: where its frames lie in time, and the frames at given times."""

    def __init__(self, container, shown: str, max_pixels: int):
        self.container, self.shown, self.max_pixels = container, shown, max_pixels
        self.stream = container.streams.video[0]
        self.stream.thread_type = "AUTO"
        rate = self.stream.average_rate or self.stream.guessed_rate or self.stream.base_rate
        self.fps = float(rate) if rate else 0.0
        self.origin = float(self.stream.start_time * self.stream.time_base) if self.stream.start_time is not None else 0.0
        self.decoded = 0
        self.notes: dict[str, None] = {}
        self.steps: list[float] = []
        # Where decoding stands (kept between the clips of one video), and the longest stretch
        # a seek showed to hold no keyframe: a target nearer than that is decoded on to.
        self.frames: Any = None  # the decoder's frames, from the last seek on
        self.last: Any = None
        self.position: float | None = None
        self.previous: float | None = None
        self.keyless = 0.0

    def duration(self) -> float:
        if self.stream.duration:
            return float(self.stream.duration * self.stream.time_base)
        if self.container.duration:
            return self.container.duration / 1_000_000
        raise ImageError(
            f"{self.shown}: its duration is unknown (a stream without an index?); remux it, e.g. with ffmpeg -c copy"
        )

    def clip(self, plan: ClipPlan) -> DecodedClip:
        if self.fps <= 0:
            raise ImageError(f"{self.shown}: its frame rate is unknown; remux it, e.g. with ffmpeg -c copy")
        duration = self.duration()
        end = duration if plan.end is None else min(plan.end, duration)
        if plan.start >= end:
            span = f"{arg('start', plan.start)} to {arg('end', plan.end) if plan.end is not None else 'its end'}"
            raise ImageError(f"{self.shown}: lasts {duration:.3g} s; {span} holds no frame")
        first = math.ceil(plan.start * self.fps - 1e-6)
        available = max(1, math.floor(end * self.fps + 1e-6) - first)
        try:
            first, available = part_of_span(available, plan, first)
        except ImageError as error:
            raise ImageError(f"{self.shown}: lasts {duration:.3g} s and {error}") from None
        indices, short = frame_indices(available, plan, first)
        self.notes, decoded = {}, self.decoded
        if short:
            self.notes[f"{self.shown}: {short}"] = None
        wanted = sorted({i / self.fps for i in indices})
        found = self._frames_at(wanted)
        frames = np.stack([found[i / self.fps][0] for i in indices])
        times = tuple(round(found[i / self.fps][1], 6) for i in indices)
        self._note_variable_rate()
        return DecodedClip(frames, times, tuple(self.notes), self.decoded - decoded)

    def _frames_at(self, wanted: list[float]) -> dict[float, tuple[np.ndarray, float]]:
        """Per wanted time, the first frame at or after it (within half a frame) and its time;
        past the last decodable frame, that last frame (a truncated file: noted)."""
        found: dict[float, tuple[np.ndarray, float]] = {}
        half = 0.5 / self.fps
        for target in wanted:
            if self._seeks_to(target):
                before = self.position
                self.container.seek(self._pts(target), stream=self.stream, backward=True, any_frame=False)
                self.frames, self.previous = self.container.decode(self.stream), None
                landed = self._decode_to(target, half)
                if before is not None and landed is not None and landed <= before:  # no keyframe between: seeking cost more
                    self.keyless = max(self.keyless, target - landed)
            else:
                self._decode_to(target, half)
            position = self.position
            found[target] = (self._pixels(self.last), position if position is not None else 0.0)
        return found

    def _seeks_to(self, target: float) -> bool:
        """Whether to seek to ``target`` rather than decode on: it is behind, or farther ahead
        than ``SEEK_GAP`` and than a stretch already seen to hold no keyframe."""
        position = self.position
        if self.frames is None or position is None or target < position:
            return True
        return target - position > max(SEEK_GAP, self.keyless)

    def _decode_to(self, target: float, half: float) -> float | None:
        """Decode on to the first frame at or after ``target``; the time of the first frame decoded."""
        first = None
        for frame in self.frames:
            self.decoded += 1
            time = float(frame.pts * self.stream.time_base) - self.origin if frame.pts is not None else self.position or 0.0
            first = time if first is None else first
            if self.previous is not None and time > self.previous:  # steps between frames decoded in a row
                self.steps.append(time - self.previous)
            self.position = self.previous = time
            self.last = frame
            if time + half >= target:
                return first
        self.frames = None
        if self.last is None:
            raise ImageError(f"{self.shown}: no frame could be decoded at {target:.3g} s (corrupt or truncated)")
        self.notes[f"{self.shown}: no frame at {target:.3g} s (truncated?): the last one, at {self.position:.3g} s, repeats"] = (
            None
        )
        return first

    def _pts(self, seconds: float) -> int:
        return int((seconds + self.origin) / self.stream.time_base)

    def _pixels(self, frame) -> np.ndarray:
        """The frame as upright 8-bit RGB, downscaled to ``max_pixels`` if larger (each noted once)."""
        width, height = frame.width, frame.height
        bits = max((component.bits for component in frame.format.components), default=8)
        if bits > 8:
            self.notes[f"{self.shown}: {bits}-bit video ({frame.format.name}) converted to 8-bit RGB"] = None
        transfer = HDR_TRANSFERS.get(int(getattr(frame, "color_trc", 0) or 0))
        if transfer:
            self.notes[f"{self.shown}: HDR ({transfer}) shown as 8-bit RGB without tone mapping; colours may look flat"] = None
        if width * height > self.max_pixels:
            scale = math.sqrt(self.max_pixels / (width * height))
            width, height = max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2)
            self.notes[
                f"{self.shown}: {frame.width}x{frame.height} frames downscaled to {width}x{height} as decoded ({arg('max_pixels')})"
            ] = None
        pixels = frame.reformat(width=width, height=height, format="rgb24").to_ndarray()
        return _upright(pixels, getattr(frame, "rotation", 0) or 0)

    def _note_variable_rate(self) -> None:
        if len(self.steps) >= 2 and max(self.steps) > 1.5 * min(self.steps):
            self.notes[
                f"{self.shown}: variable frame rate (frames {min(self.steps):.3g} to {max(self.steps):.3g} s apart): "
                "frames are taken by their timestamps"
            ] = None


def _upright(pixels: np.ndarray, rotation: float) -> np.ndarray:
    """``pixels`` turned as the stream's display matrix says (``rotation``: degrees counter-clockwise,
    as PyAV's ``VideoFrame.rotation`` gives it)."""
    quarter = round(rotation / 90) % 4
    return np.ascontiguousarray(np.rot90(pixels, quarter)) if quarter else pixels
