"""The multi-input sample: a model whose ``forward`` takes several inputs (a photo and its depth
map, a photo and a row of metadata, two views) binds each to files with ``--input NAME=PATH``
(``hookviz.samples.multi_bindings``); one sample is the first input's photo and the file of
every other input paired with it (``hookviz.samples.multi_files``).

Photos get the model's transform; ``.npy``, ``.pt`` and ``.safetensors`` tensors are taken as
they are, checked against the shape of the first sample's; a CSV gives the sample's row, its
header the features' names; an ``--aligned`` tensor (a depth map of the photo's size) gets the
photo's resize and crop. The first input is the main one: its photo is what overlays are drawn over.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hookviz.errors import ImageError, UsageError, arg, display_path
from hookviz.inputs.identity import Match, SampleIdentity, match_files
from hookviz.inputs.images import LoadedSample, Preprocessing, load_image, prepare
from hookviz.samples.base import Sample, SampleKindBase, register_sample_kind
from hookviz.samples.multi_bindings import MULTI, Binding, MultiOptions, parse_bindings, resolve
from hookviz.samples.multi_files import (
    checked_array,
    clashing_files,
    doubled_row,
    files_in,
    is_csv,
    is_photo,
    key_of,
    partner,
    read_header,
    read_row,
    read_tensor,
)

__all__ = ["MULTI", "Multi", "MultiSample", "BoundInputs", "MultiOptions"]

#: The file of an input given in memory.
MEMORY = "<memory>"

#: What each input of a sample is: a photo, a tensor taken as it is, a vector of named features (a CSV's row).
PHOTO_INPUT, TENSOR_INPUT, VECTOR_INPUT = "photo", "tensor", "vector"


@dataclass(frozen=True)
class MultiSample(Sample):
    """A sample of several inputs: ``positional``, the names passed by position (in order; the rest
    by keyword); per input, ``kinds`` (photo, tensor or vector), ``features`` (a vector's
    names), ``files`` (its file, ``<memory>`` for a value given) and ``views`` (a photo's pixels as shown)."""

    positional: tuple = ()
    kinds: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict, repr=False)
    identities: dict = field(default_factory=dict, repr=False)

    @property
    def inputs_record(self) -> dict:
        """What report.json's ``inputs`` keeps: per input, its file, kind, its file's identity (and a vector's feature names)."""
        record = {}
        for name, kind in self.kinds.items():
            file = self.files.get(name)
            entry = {"file": None if file == MEMORY else file, "kind": kind, "identity": self.identities.get(name)}
            record[name] = {**entry, **({"features": list(self.features[name])} if name in self.features else {})}
        return record


@register_sample_kind
class Multi(SampleKindBase):
    """The registered kind; a run's bindings make it a ``BoundInputs`` (``bind``), which does the work."""

    name = MULTI
    words = "a photo and the inputs bound to it with --input"
    main = "image"
    options_type = MultiOptions

    def settings_for_model(self, settings: MultiOptions, model) -> MultiOptions:
        """``settings`` with each binding resolved against ``model``'s forward, and the shape of every tensor input's first file.

        Raises:
            UsageError: a binding the forward does not take, two on one argument, no files at all.
        """
        bindings = parse_bindings(settings)
        if not bindings:
            raise UsageError(f"{arg('input')}: {model.name} takes several inputs: bind them with {arg('input', 'NAME=PATH')}")
        bound = resolve(bindings, model.module, model.name, tuple(settings.aligned or ()))
        with_bindings = dataclasses.replace(settings, bound=bound)
        inputs = BoundInputs(with_bindings)
        if not bound[0].in_memory:
            inputs.find()  # no photos, or a folder that pairs none: refused before the model runs
        return dataclasses.replace(with_bindings, shapes=inputs.reference_shapes())

    def bind(self, settings: MultiOptions) -> "BoundInputs":
        return BoundInputs(settings)

    def load(self, path: Path, max_pixels: int, settings):
        return self.bind(settings).load(path, max_pixels, settings)

    def prepare(self, loaded, preprocessing: Preprocessing, max_pixels: int, settings=None):
        return self.bind(settings).prepare(loaded, preprocessing, max_pixels, settings)

    def blank(self, preprocessing: Preprocessing, settings) -> tuple:
        if settings is None or not settings.bound:  # nothing bound yet: the first input, a photo
            import torch

            return (torch.zeros(1, preprocessing.channels, *preprocessing.trace_size),)
        return self.bind(settings).blank(preprocessing, settings)


@dataclass(frozen=True)
class _Loaded:
    """A decoded sample: its ``source`` (the main photo, with the identity of every file) and per input ``(kind, value, file, features)``."""

    source: Any
    inputs: dict
    path: Path | None = None

    @property
    def label(self) -> str:
        return self.source.label if hasattr(self.source, "label") else "<in-memory inputs>"


class BoundInputs(SampleKindBase):
    """The multi-input kind as one run's bindings make it (``Explainer.kind``): it finds, reads and prepares the samples."""

    name = MULTI
    words = Multi.words
    options_type = MultiOptions

    def __init__(self, settings: MultiOptions):
        if not settings.bound:
            raise UsageError(
                f"{arg('input')}: the inputs are not bound to a model yet (have the kind fill in its settings for the model first)"
            )
        self.settings = settings
        self.bindings: tuple[Binding, ...] = settings.bound
        self.main = self.bindings[0].name
        self.shapes = dict(settings.shapes)

    @property
    def _first(self) -> Binding:
        return self.bindings[0]

    # -- discovery and identity

    def find(self, sources=(), exclude=(), notes=None) -> list[Path]:
        first = self._first
        if first.in_memory:
            raise UsageError(f"{arg('input', first.text)}: a run reads files: bind the first input to photos")
        excluded = {Path(os.path.realpath(p)) for p in exclude}
        keys = [found for root in first.paths for found in (files_in(root, excluded) if root.is_dir() else [root])]
        keys = [path for path in keys if is_photo(path)]
        if not keys:
            raise UsageError(f"{arg('input', first.text)}: names no photos; the first input is the photos the others pair with")
        for binding in self.bindings[1:]:
            self._check_pairing(binding, keys)
        return keys

    def _check_pairing(self, binding: Binding, keys: list[Path]) -> None:
        """Refuse an input whose files pair with none of ``keys``, or pair one ambiguously: two
        files for one sample, or a CSV with two rows for one.

        Raises:
            UsageError: naming the input and both files (or rows)."""
        folders = [root for root in binding.paths if root.is_dir()]
        samples = {Path(os.path.realpath(k)) for k in keys} if folders else set()
        for root in folders:
            clash = clashing_files(root, samples)
            if clash is not None:
                raise UsageError(
                    f"{arg('input', binding.text)}: {display_path(clash[0])} and {display_path(clash[1])} would pair with "
                    "one sample (files pair by relative path without suffix, and these differ only in suffix or case); keep one"
                )
        if folders and not any(self._partner(binding, k) for k in keys):
            raise UsageError(
                f"{arg('input', binding.text)}: pairs no file with the {len(keys)} photos of {self._first.text} "
                "(files pair by relative path without suffix: rgb/a/001.png with depth/a/001.npy)"
            )
        tables = [root for root in binding.paths if root.is_file() and is_csv(root)]
        for table in tables:
            doubled = doubled_row(table, [(self._key(k), k) for k in keys], repr(binding.given))
            if doubled is not None:
                raise UsageError(f"{arg('input', binding.text)}: {doubled}")

    def _key(self, path: Path) -> str:
        return key_of(path, self._first.paths)

    def _partner(self, binding: Binding, key_file: Path) -> Path | None:
        return partner(binding.paths, self._key(key_file), key_file)

    def files(self, path: Path) -> list[Path]:
        found = [path] + [self._partner(b, path) for b in self.bindings[1:] if not b.in_memory]
        return [p for p in found if p is not None]

    def identity(self, path: Path) -> SampleIdentity:
        return SampleIdentity.of_files(self.files(path))

    def match(self, recorded: SampleIdentity | None, path: Path) -> Match:
        return match_files(recorded, self.files(path))

    # -- reading

    def reference_shapes(self) -> tuple:
        """Per tensor input, the shape of its first sample's (what every other sample's must be)."""
        shapes = []
        first_key = self._first_key()
        for binding in self.bindings[1:]:
            if binding.in_memory and not _is_pil(binding.value):
                shapes.append((binding.name, tuple(np.asarray(_array_of(binding.value, binding)).shape)))
                continue
            file = self._partner(binding, first_key) if first_key is not None else next(iter(binding.paths), None)
            if file is not None and is_csv(file):  # a vector of the header's features
                shapes.append((binding.name, (len(read_header(file, repr(binding.given))),)))
            elif file is not None and file.is_file() and not is_photo(file):
                shapes.append((binding.name, read_tensor(file, repr(binding.given)).shape))
        return tuple(shapes)

    def _first_key(self) -> Path | None:
        first = self._first
        if first.in_memory:
            return None
        for root in first.paths:
            found = [p for p in (files_in(root, set()) if root.is_dir() else [root]) if is_photo(p)]
            if found:
                return found[0]
        return None

    def load(self, path: Path, max_pixels: int, settings=None) -> _Loaded:
        """Decode the sample of key file ``path``: its photo and each other input's file.

        Raises:
            ImageError: an input's file is missing, unreadable, of the wrong shape or dtype, or a CSV without its row.
        """
        inputs = {self.main: (PHOTO_INPUT, load_image(path, max_pixels), path, ())}
        for binding in self.bindings[1:]:
            inputs[binding.name] = self._read(binding, path, max_pixels)
        try:
            identity = self.identity(path)
        except OSError as exc:
            raise ImageError(f"{display_path(path)}: cannot be read ({exc.strerror or exc})") from None
        photo = dataclasses.replace(inputs[self.main][1], identity=identity)
        inputs[self.main] = (PHOTO_INPUT, photo, path, ())
        return _Loaded(photo, inputs, path)

    def loaded_in_memory(self, max_pixels: int) -> _Loaded:
        """The sample the bindings hold (``explain()``'s mapping): values in memory, or paths."""
        first = self._first
        main: tuple[str, Any, Path | None, tuple]
        if first.in_memory:
            main = (PHOTO_INPUT, first.value, None, ())
            key_file = None
        else:
            key_file = first.paths[0]
            main = (PHOTO_INPUT, load_image(key_file, max_pixels), key_file, ())
        inputs = {self.main: main}
        for binding in self.bindings[1:]:
            inputs[binding.name] = self._read(binding, key_file, max_pixels)
        return _Loaded(main[1] if isinstance(main[1], LoadedSample) else None, inputs, key_file)

    def _read(self, binding: Binding, key_file: Path | None, max_pixels: int):
        label = repr(binding.given)
        if binding.in_memory:
            if _is_pil(binding.value):
                return PHOTO_INPUT, LoadedSample(None, binding.value.convert("RGB")), None, ()
            array = checked_array(np.asarray(_array_of(binding.value, binding)), f"{arg('input', binding.given)}")
            return TENSOR_INPUT, self._shaped(array, binding, f"{arg('input', binding.given)}"), None, ()
        key = self._key(key_file) if key_file is not None else ""
        file = partner(binding.paths, key, key_file) if key_file is not None else binding.paths[0]
        if file is None:
            where = display_path(key_file) if key_file is not None else "the sample"
            raise ImageError(
                f"{where}: input {label} has no file {display_path(binding.paths[0])}/{key}.* "
                "(inputs pair by relative path without suffix); the sample is skipped"
            )
        if is_photo(file):
            return PHOTO_INPUT, load_image(file, max_pixels), file, ()
        if is_csv(file):
            values, names = read_row(file, key, key_file or file, label)
            return VECTOR_INPUT, self._shaped(values, binding, f"{display_path(file)}: input {label}"), file, names
        array = read_tensor(file, label)
        return TENSOR_INPUT, self._shaped(array, binding, f"{display_path(file)}: input {label}"), file, ()

    def _shaped(self, array: np.ndarray, binding: Binding, where: str) -> np.ndarray:
        """``array``, when its shape is the one the model takes (the first sample's); an aligned map's size follows its photo."""
        expected = self.shapes.get(binding.name)
        if binding.aligned:
            if array.ndim not in (2, 3):
                raise ImageError(f"{where}: an aligned input is (H, W) or (C, H, W), not {array.shape}")
            return array
        if expected is not None and tuple(array.shape) != tuple(expected):
            raise ImageError(
                f"{where}: a tensor of shape {tuple(array.shape)}; the model takes {tuple(expected)} (the first sample's)"
            )
        return array

    # -- preparing

    def prepare(self, loaded: _Loaded, preprocessing: Preprocessing, max_pixels: int, settings=None) -> MultiSample:
        import torch

        from hookviz.samples.photo import prepared_photo

        main = loaded.inputs[self.main][1]
        photo = (
            prepare(main, preprocessing, max_pixels)
            if isinstance(main, LoadedSample)
            else prepared_photo(main, preprocessing, max_pixels)
        )
        tensors, kinds, features, files, views = (
            {self.main: photo.tensor},
            {self.main: PHOTO_INPUT},
            {},
            {},
            {self.main: photo.shown},
        )
        identities = {}
        for name, (kind, value, file, names) in loaded.inputs.items():
            files[name] = display_path(file) if file is not None else MEMORY
            identities[name] = _identity(file)
            kinds[name] = kind
            if name == self.main:
                continue
            if kind == PHOTO_INPUT:
                other = prepare(value, preprocessing, max_pixels)
                tensors[name], views[name] = other.tensor, other.shown
            elif self._aligned(name):
                tensors[name] = aligned(value, main, preprocessing, files[name], repr(name))
            else:
                tensors[name] = torch.from_numpy(value.copy())
            if names:
                features[name] = tuple(names)
        positional = tuple(b.name for b in self.bindings if b.position is not None)
        made = (photo.source, tensors, photo.shown, photo.whole, self.main, positional, kinds, features, files, views, identities)
        return MultiSample(*made)

    def _aligned(self, name: str) -> bool:
        return any(b.aligned for b in self.bindings if b.name == name)

    def blank(self, preprocessing: Preprocessing, settings=None) -> tuple:
        """Zeros of every input's shape, a batch of one: the positional ones, then a dict of the keyword ones."""
        import torch

        made = {}
        for binding in self.bindings:
            if binding.name == self.main or binding.name not in self.shapes:
                made[binding.name] = torch.zeros(1, preprocessing.channels, *preprocessing.trace_size)
            elif binding.aligned:
                shape = self.shapes[binding.name]
                channels = shape[0] if len(shape) == 3 else 1
                made[binding.name] = torch.zeros(1, channels, *preprocessing.trace_size)
            else:
                made[binding.name] = torch.zeros(1, *self.shapes[binding.name])
        positional = tuple(made[b.name] for b in self.bindings if b.position is not None)
        keywords = {b.name: made[b.name] for b in self.bindings if b.position is None}
        return (*positional, keywords) if keywords else positional


def aligned(array: np.ndarray, photo, preprocessing: Preprocessing, where: str, label: str):
    """A map of the photo's size (an (H, W) or (C, H, W) array) resized and cropped as the photo is."""
    import torch
    from torchvision.transforms import functional as F

    tensor = torch.from_numpy(array.copy())
    tensor = tensor[None] if tensor.dim() == 2 else tensor
    size = getattr(photo, "rgb", None)
    if size is not None and tuple(tensor.shape[1:]) != (size.height, size.width):
        raise ImageError(
            f"{where}: input {label} is aligned with the photo ({size.width}x{size.height}) but is "
            f"{tensor.shape[2]}x{tensor.shape[1]}; give it at the photo's size, or drop it from {arg('aligned')}"
        )
    mode = preprocessing.mode
    if mode == "whole":
        return F.resize(tensor, [preprocessing.size, preprocessing.size], antialias=False)
    if mode == "original":
        return tensor
    resized = F.resize(tensor, preprocessing.resize, antialias=False)
    return F.center_crop(resized, preprocessing.size) if mode == "crop" else resized


def _identity(file: Path | None) -> dict | None:
    if file is None:
        return None
    try:
        return SampleIdentity.of(file).to_json()
    except OSError:
        return None


def _is_pil(value) -> bool:
    return type(value).__module__.startswith("PIL")


def _array_of(value, binding: Binding):
    if isinstance(value, np.ndarray):
        return value
    detach = getattr(value, "detach", None)
    if detach is None:
        raise UsageError(
            f"{arg('input', binding.text)}: expected a path, a PIL image, an array or a tensor, not a {type(value).__name__}"
        )
    tensor = detach().cpu()
    return tensor.float().numpy() if tensor.is_floating_point() else tensor.numpy()


def is_mapping(value) -> bool:
    return isinstance(value, Mapping)
