"""The video: a video file (mp4, mkv, webm, mov, avi) or a folder of frames is one clip, one
(C, T, H, W) float tensor named ``clip`` (the kind of a model that takes clips).

A file's frames are decoded with PyAV (the ``video`` extra), seeking to each sampled frame
(``hookviz.samples.video_decode``); a folder's are its photos in the order of their names,
each decoded as a photo is. The frames become the model's input through the weights'
transform object when it makes the input (torchvision's ``VideoClassification`` takes
(T, C, H, W) uint8 and returns (C, T, H, W)), else each frame is resized, cropped and
normalised as a photo is. Overlays are drawn over the frames tiled as ``anatomy.slices`` tiles
a map of three dimensions; ``times`` holds each frame's timestamp in seconds.

A folder of photos stays photos for a photo model: only this kind's ``find`` reads a folder of
frames as a clip. A folder that holds video files is a folder of videos, never of frames: its
videos are clips and the photos beside them are left out, with one note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hookviz.errors import ImageError, UsageError, arg, display_path
from hookviz.inputs.discovery import IMAGE_SUFFIXES, find_files, is_output_folder
from hookviz.inputs.identity import SampleIdentity
from hookviz.inputs.images import LoadedSample, Preprocessing, load_image, prepare
from hookviz.inputs.parts import part_key, split_part
from hookviz.options.declared import option
from hookviz.samples.base import Sample, SampleKindBase, register_sample_kind
from hookviz.samples.video_decode import VIDEO_SUFFIXES, ClipPlan, decode_clip, frame_indices, part_of_span, require_av

__all__ = ["VIDEO", "VideoOptions", "Video", "Clip", "LoadedClip", "frames_of", "model_frames", "DEFAULT_FRAMES"]

#: The video kind's name.
VIDEO = "video"

#: Frames per clip when neither ``--frames`` nor the model says.
DEFAULT_FRAMES = 16

#: The most frames a clip may have.
MAX_FRAMES = 1024

#: The most clips one video may be cut into (``--clips``).
MAX_CLIPS = 1024


@dataclass(frozen=True)
class VideoOptions:
    """The video kind's settings: ``--frames``, ``--frame-stride``, ``--start``, ``--end``, ``--clips`` on the
    command line, the same names in ``explain()``. ``frames``, ``start`` and ``end`` are ``None``
    until the run fills them in for the model (``Video.settings_for_model``): the model's own frame count, the video's start and end."""

    frames: int | None = option(
        None, help=f"Frames per clip (default: the model's own, else {DEFAULT_FRAMES}), spread evenly over the span."
    )
    frame_stride: int = option(
        0, help="Take every Nth frame from --start on instead of spreading them evenly (0: spread).", low=0, high=10_000
    )
    start: float | None = option(None, help="Where the clip's span starts, in seconds (a folder of frames: frame number).")
    end: float | None = option(None, help="Where the clip's span ends, in seconds (default: the video's end).")
    clips: int = option(
        1,
        help="Clips per video: its span cut into K equal runs of frames, one clip from each (a sample each, VIDEO#k).",
        low=1,
        high=MAX_CLIPS,
    )


@dataclass(frozen=True)
class Clip(Sample):
    """A prepared clip: a ``Sample`` whose ``times`` are its frames' timestamps in seconds."""

    times: tuple[float, ...] = ()
    main: str = "clip"


@dataclass(frozen=True)
class LoadedClip:
    """A decoded clip: its frames (T, H, W, 3) uint8 and their ``times``; ``decoded``: how many
    frames the decoder decoded for it. Has a ``LoadedSample``'s ``path``, ``label``, ``notes``, ``identity``."""

    path: Path
    frames: np.ndarray = field(repr=False)
    times: tuple[float, ...]
    notes: tuple[str, ...] = ()
    identity: SampleIdentity | None = None
    decoded: int = 0

    @property
    def label(self) -> str:
        return display_path(self.path)


def frames_of(folder: Path) -> list[Path]:
    """The photos directly in ``folder``, in the order of their names, numbers compared as numbers."""
    if not folder.is_dir() or is_output_folder(folder):
        return []
    photos = [entry for entry in folder.iterdir() if entry.suffix.lower() in IMAGE_SUFFIXES and entry.is_file()]
    return sorted(photos, key=lambda entry: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", entry.name.lower())])


def model_frames(model) -> int | None:
    """The frames per clip a model declares: its weights' (``Preprocessing.frames``, as a source
    reads them for torchvision's video classifiers), its module's ``hookviz_clip_frames`` (a
    factory's), else a Hugging Face config's ``num_frames``; ``None`` when it says nothing."""
    module = getattr(model, "module", None)
    declared = getattr(getattr(model, "preprocessing", None), "frames", None)
    if declared is None:
        declared = getattr(module, "hookviz_clip_frames", None)
    if declared is None:
        declared = getattr(getattr(module, "config", None), "num_frames", None)
    return int(declared) if isinstance(declared, int) and declared > 0 else None


def _number(name: str, value, kind: type):
    """A setting as ``kind`` (the command line gives text), or a one-line error naming it."""
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise UsageError(f"{arg(name, value)}: give a {'whole ' if kind is int else ''}number") from None
    if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
        raise UsageError(f"{arg(name, value)}: give a whole number")
    if not np.isfinite(number) or number < 0:
        raise UsageError(f"{arg(name, value)}: give a number of 0 or more")
    return number


@register_sample_kind
class Video(SampleKindBase):
    """A clip: a video file, or a folder of frames (see the module's docstring)."""

    name = VIDEO
    words = "a clip: a video file (mp4, mkv, webm, mov, avi) or a folder of frames"
    noun = "clip"
    main = "clip"
    options_type = VideoOptions

    def settings_for_model(self, settings: VideoOptions, model) -> VideoOptions:
        """``settings`` with numbers for text, the model's frame count for ``frames`` when not given.

        Raises:
            UsageError: ``frames`` 0 or above ``MAX_FRAMES`` or other than the model requires, ``clips`` 0 or above ``MAX_CLIPS``, a negative or non-numeric value, or ``end`` not after ``start``.
        """
        frames = _number("frames", settings.frames, int) if settings.frames is not None else None
        if frames is not None and not 1 <= frames <= MAX_FRAMES:
            raise UsageError(f"{arg('frames', frames)}: a clip takes 1 to {MAX_FRAMES} frames")
        start = _number("start", settings.start, float) if settings.start is not None else 0.0
        end = _number("end", settings.end, float) if settings.end is not None else None
        if end is not None and end <= start:
            raise UsageError(f"{arg('end', end)}: must be after {arg('start', start)}")
        clips = _number("clips", settings.clips, int)
        if not 1 <= clips <= MAX_CLIPS:
            raise UsageError(f"{arg('clips', clips)}: a video is cut into 1 to {MAX_CLIPS} clips")
        required = getattr(model, "input_frames", None)
        if frames is not None and required is not None and frames != required:
            name = getattr(model, "name", "the model")
            raise UsageError(
                f"{arg('frames', frames)}: {name} takes clips of {required} frames; pass {arg('frames', required)} or leave it out"
            )
        frames = frames or model_frames(model) or DEFAULT_FRAMES
        return replace(settings, frames=frames, start=start, end=end, clips=clips)

    def find(self, sources, exclude=(), notes=None) -> list[Path]:
        words = self.words.removeprefix("a ")
        for source in sources:  # a file named outright is taken as it is, if a video or a photo (refused as it loads)
            path = Path(source)
            if path.is_file() and path.suffix.lower() not in VIDEO_SUFFIXES and path.suffix.lower() not in IMAGE_SUFFIXES:
                raise UsageError(f"{display_path(source)}: names no {words} (hidden and output folders are skipped)")
        found = find_files(sources, VIDEO_SUFFIXES, words, exclude, whole=_holds_frames)  # a folder of frames is a clip
        _note_photos_beside_videos(found, notes)
        if any(path.suffix.lower() in VIDEO_SUFFIXES and path.is_file() for path in found):
            require_av()
        return found

    def sample_keys(self, paths, settings: VideoOptions) -> list[Path]:
        """With ``--clips K`` over 1, K keys per video or folder of frames (``walk.mp4#1`` to ``#K``,
        ``hookviz.inputs.parts``); a photo stays itself, to be refused as the run goes on."""
        clips, cut = int(settings.clips), []
        for path in paths:
            whole = path.is_dir() or path.suffix.lower() in VIDEO_SUFFIXES
            cut += [part_key(path, k) for k in range(1, clips + 1)] if clips > 1 and whole else [path]
        return cut

    def files(self, path: Path) -> list[Path]:
        whole, _ = split_part(path)
        return frames_of(whole) if whole.is_dir() else [whole]

    def load(self, path: Path, max_pixels: int, settings: VideoOptions) -> LoadedClip:
        whole, part = split_part(path)
        clips = int(settings.clips)
        if whole.suffix.lower() in IMAGE_SUFFIXES and not whole.is_dir():
            raise ImageError(
                f"{display_path(whole)}: is a photo, not a clip, and this model takes clips: give a video file, "
                "or a folder of frames (a photo alone in a folder is a clip of one frame)"
            )
        if part is None and clips > 1:
            raise ImageError(
                f"{display_path(whole)}: {arg('clips', clips)} cuts it into {clips} clips: name one, as {whole.name}#1"
            )
        if part is not None and part > clips:
            raise ImageError(f"{display_path(path)}: names clip {part}, and {arg('clips', clips)} cuts it into {clips}")
        plan = ClipPlan(
            int(settings.frames or DEFAULT_FRAMES), settings.frame_stride, settings.start or 0.0, settings.end, part or 1, clips
        )
        identity = self._identity(path)
        if whole.is_dir():
            return replace(_folder_clip(whole, plan, max_pixels, identity), path=path)
        decoded = decode_clip(whole, plan, max_pixels)
        return LoadedClip(path, decoded.frames, decoded.times, decoded.notes, identity, decoded.decoded)

    def prepare(self, loaded: LoadedClip, preprocessing: Preprocessing, max_pixels: int, settings=None) -> Clip:
        tensor = _clip_tensor(loaded, preprocessing, max_pixels)
        shown = _shown(tensor, preprocessing)
        source = LoadedSample(loaded.path, _first_frame(loaded), loaded.notes, loaded.identity)
        return Clip(source, {self.main: tensor}, shown, main=self.main, times=loaded.times)

    def blank(self, preprocessing: Preprocessing, settings: VideoOptions) -> tuple:
        import torch

        frames = int(settings.frames or DEFAULT_FRAMES) if settings is not None else DEFAULT_FRAMES
        return (torch.zeros(1, preprocessing.channels, frames, *preprocessing.trace_size),)

    def _identity(self, path: Path) -> SampleIdentity | None:
        try:
            return self.identity(path)
        except OSError as exc:
            raise ImageError(f"{display_path(path)}: cannot be read ({exc.strerror or exc})") from None


def _note_photos_beside_videos(found: list[Path], notes: list[str] | None) -> None:
    """A folder that holds video files is a folder of videos, not of frames: its photos are left
    out, with a note."""
    folders = dict.fromkeys(p.parent for p in found if p.suffix.lower() in VIDEO_SUFFIXES and p.is_file())
    for here in folders if notes is not None else ():
        photos = len(frames_of(here))
        if photos:
            notes.append(  # type: ignore[union-attr]
                f"{display_path(here)}: holds videos and {photos} photo{'s' if photos > 1 else ''}: each video is a clip "
                "and the photos are left out (a folder of frames holds photos alone: move them into a folder of their own)"
            )


def _holds_frames(folder: Path) -> bool:
    """Whether ``folder`` is a folder of frames: photos, and no video file beside them."""
    if not frames_of(folder):
        return False
    return not any(entry.suffix.lower() in VIDEO_SUFFIXES and entry.is_file() for entry in folder.iterdir())


def _folder_clip(folder: Path, plan: ClipPlan, max_pixels: int, identity) -> LoadedClip:
    """The clip of a folder of frames: the plan's frames, each decoded as a photo (its times are
    frame numbers: a folder holds no frame rate)."""
    frames = frames_of(folder)
    shown = display_path(folder)
    if not frames:
        raise ImageError(f"{shown}: holds no frames (photos)")
    first = int(np.ceil(plan.start))
    last = len(frames) if plan.end is None else min(len(frames), int(np.floor(plan.end)) + 1)
    if first >= last:
        raise ImageError(f"{shown}: holds {len(frames)} frames; {arg('start', plan.start)} to its end holds none")
    try:
        first, available = part_of_span(last - first, plan, first)
    except ImageError as error:
        raise ImageError(f"{shown}: {error}") from None
    indices, short = frame_indices(available, plan, first)
    notes = [f"{shown}: a folder of frames has no frame rate: its times, {arg('start')} and {arg('end')} are frame numbers"]
    notes += [f"{shown}: {short}"] if short else []
    loaded = {i: load_image(frames[i], max_pixels) for i in sorted(set(indices))}
    sizes = {image.rgb.size for image in loaded.values()}
    if len(sizes) > 1:
        raise ImageError(f"{shown}: its frames differ in size ({', '.join(f'{w}x{h}' for w, h in sorted(sizes))})")
    pixels = np.stack([np.asarray(loaded[i].rgb) for i in indices])
    notes += [note for image in loaded.values() for note in image.notes]
    return LoadedClip(folder, pixels, tuple(float(i) for i in indices), tuple(dict.fromkeys(notes)), identity, len(loaded))


def _clip_tensor(loaded: LoadedClip, preprocessing: Preprocessing, max_pixels: int):
    """The (C, T, H, W) float input: the weights' transform object on the (T, C, H, W) uint8
    frames when it makes the input, else each frame as a photo is preprocessed."""
    import torch
    from PIL import Image

    transform = preprocessing.transform
    if preprocessing.applies_transform and transform is not None:
        frames = torch.from_numpy(np.ascontiguousarray(loaded.frames)).permute(0, 3, 1, 2)
        try:
            tensor = transform.function(frames)
        except Exception as exc:  # the weights' or the user's code: say whose, and how it failed
            raise ImageError(
                f"{loaded.label}: {transform.origin} failed on the clip's frames ({type(exc).__name__}: {exc})"
            ) from None
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point() or tensor.dim() != 4:
            what = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ImageError(f"{loaded.label}: {transform.origin} returned {what}, not a (C, T, H, W) float tensor")
        return tensor.detach().to(device="cpu", dtype=torch.float32).contiguous()
    prepared = [prepare(LoadedSample(loaded.path, Image.fromarray(frame)), preprocessing, max_pixels) for frame in loaded.frames]
    tensors: list = [frame.tensor for frame in prepared]  # PreparedSample types its tensor loosely
    return torch.stack(tensors, dim=1)


def _shown(tensor, preprocessing: Preprocessing) -> np.ndarray:
    """The clip's frames as they were before normalisation, tiled as its maps are."""
    from hookviz.anatomy.slices import tiling

    channels = tensor.shape[0]
    mean = np.asarray(preprocessing.mean[:channels], dtype=np.float32)[:, None, None, None]
    std = np.asarray(preprocessing.std[:channels], dtype=np.float32)[:, None, None, None]
    values = np.nan_to_num(tensor.numpy() * std + mean)
    frames = (np.clip(values, 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 3, 0)
    frames = np.repeat(frames, 3, axis=3) if channels == 1 else frames[..., :3]
    tiles = tiling(tuple(frames.shape[:3]))
    return np.ascontiguousarray(tiles.flat(frames[list(tiles.indices)], np.uint8(140)))


def _first_frame(loaded: LoadedClip):
    from PIL import Image

    return Image.fromarray(np.ascontiguousarray(loaded.frames[0]))
