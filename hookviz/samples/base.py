"""Sample kinds: what one sample of a run is, registered by name.

A *sample kind* owns everything hookviz assumed of "one photo file, one (3, H, W) tensor":
which files form a sample, how they are decoded and preprocessed into the model's named
inputs, the blank sample of the dry pass, what is shown under an overlay, and the identity
that ``--skip-existing`` compares. A photo (``hookviz.samples.photo``) is the built-in one; a
model declares another (``LoadedModel.sample_kind``), and a plug-in registers its own with
``register_sample_kind``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hookviz.errors import UsageError, arg
from hookviz.inputs.identity import Match, SampleIdentity, match_files
from hookviz.registry import Registry, built_in

__all__ = [
    "Sample",
    "SampleKind",
    "SampleKindBase",
    "SAMPLE_KINDS",
    "register_sample_kind",
    "get_sample_kind",
    "kind_settings",
    "counted_noun",
    "settings_for_model",
    "sample_keys",
]


@dataclass(frozen=True)
class Sample:
    """One sample as the model sees it (a photo's is ``hookviz.inputs.images.PreparedSample``,
    which has the same members).

    Attributes:
        source: what was decoded: its ``path``, ``label``, ``notes`` and ``identity`` (the
            ``SampleIdentity`` report.json keeps), as a ``LoadedSample`` has them.
        tensors: the model's inputs by name, each without a batch dimension.
        shown: what its overlays are drawn over, (H, W, 3) uint8, at the main input's size.
        whole: the whole picture, when a CAM is drawn on it instead (``mode="whole"``).
        main: the name of the input that maps are made of (the one methods alter).
    """

    source: Any
    tensors: dict
    shown: np.ndarray
    whole: np.ndarray | None = field(default=None, repr=False)
    main: str = "image"

    @property
    def tensor(self):
        """The main input (what a photo's single tensor is)."""
        return self.tensors[self.main]


class SampleKind(Protocol):
    """Attributes:
    name: how a model declares it (``LoadedModel.sample_kind``).
    words: what one sample is, in words for messages (``a photo``).
    noun: one sample in one word, whose plural adds an s, as messages count them (``photo``,
        ``clip``, ``signal``; ``SampleKindBase``'s: ``sample``).
    main: the name of the input maps are made of.
    options_type: its option group (a frozen dataclass, ``hookviz.options.declared``), or
        ``None``: its fields are ``hookviz run`` flags (the Images panel) and ``explain()``
        keywords, and ``load``, ``prepare`` and ``blank`` get the run's values as ``settings``.
    """

    name: str
    words: str
    noun: str
    main: str
    options_type: type | None

    def find(self, sources: Sequence[str], exclude: Sequence[Path] = (), notes: list[str] | None = None) -> list[Path]:
        """The samples that ``sources`` (files, folders, patterns) name, each by its key path (a
        photo's file): what folder names and ``--skip-existing`` go by.

        Raises:
            UsageError: a source names no sample.
        """

    def settings_for_model(self, settings, model):
        """The run's ``settings`` with what depends on ``model`` (a ``LoadedModel``) filled in
        (a clip's frame count); ``SampleKindBase``'s returns them as they are.

        Raises:
            UsageError: a value the kind refuses, naming the option.
        """

    def sample_keys(self, paths: Sequence[Path], settings) -> list[Path]:
        """The key paths of the samples ``find``'s ``paths`` hold as ``settings`` ask (a video's ``--clips K``: K
        keys per file, ``hookviz.inputs.parts``); ``SampleKindBase``'s: ``paths`` themselves."""

    def files(self, path: Path) -> list[Path]:
        """The files that form the sample of key path ``path``, ``path`` first."""

    def load(self, path: Path, max_pixels: int, settings):
        """Decode the sample at ``path`` (no torch: it runs while torch imports); a value with
        ``path``, ``label``, ``notes`` and ``identity``. ``settings``: the run's instance of
        ``options_type`` (``None`` for a kind without one).

        Raises:
            ImageError: a file is missing, unreadable or unusable, in one line naming it.
        """

    def prepare(self, loaded, preprocessing, max_pixels: int, settings):
        """The decoded sample as the model's inputs: a ``Sample`` (or ``PreparedSample``)."""

    def blank(self, preprocessing, settings) -> tuple:
        """The model's positional inputs for a blank sample, a batch of one (the dry pass
        that recognises the task and finds the default layer), as ``settings`` shape one."""

    def identity(self, path: Path) -> SampleIdentity:
        """What report.json keeps of the sample's files (``--skip-existing`` compares it)."""

    def match(self, recorded: SampleIdentity | None, path: Path) -> Match:
        """How the sample at ``path`` relates to the one a report was made from."""


class SampleKindBase:
    """Defaults for a kind whose sample is one key file and the files ``files`` adds:
    discovery is a photo's (its key files are photos), its identity covers all its files."""

    name: str
    words: str
    noun = "sample"
    main = "image"
    options_type: type | None = None

    def find(self, sources: Sequence[str], exclude: Sequence[Path] = (), notes: list[str] | None = None) -> list[Path]:
        from hookviz.inputs.discovery import find_images

        try:
            return find_images(sources, exclude, notes)
        except UsageError as error:
            if self.name == "photo":
                raise
            raise UsageError(f"{error}; a sample of kind {self.name!r} is {self.words}") from None

    def files(self, path: Path) -> list[Path]:
        return [path]

    def settings_for_model(self, settings, model):
        return settings

    def sample_keys(self, paths: Sequence[Path], settings) -> list[Path]:
        return list(paths)

    def identity(self, path: Path) -> SampleIdentity:
        return SampleIdentity.of_files(self.files(path))

    def match(self, recorded: SampleIdentity | None, path: Path) -> Match:
        return match_files(recorded, self.files(path))


#: Every sample kind, by name.
SAMPLE_KINDS: Registry[SampleKind] = Registry(
    "sample_kind", "sample kind", modules=built_in("hookviz.samples", "multi video photo")
)


def register_sample_kind(kind_class):
    """Class decorator: adds an instance of ``kind_class`` to ``SAMPLE_KINDS`` under its name.

    Raises:
        UsageError: another kind has that name, or it could not be typed as one word; an
            ``options_type`` that is not a frozen dataclass with defaults, or whose setting
            another owner's group (or the run's own options) names too.
    """
    SAMPLE_KINDS.check_free(kind_class.name)
    if getattr(kind_class, "options_type", None) is not None:
        from hookviz.options.declared import check_group

        check_group(kind_class.options_type, f"sample kind {kind_class.name!r}")
    SAMPLE_KINDS.add(kind_class.name, kind_class())
    return kind_class


def get_sample_kind(name: str) -> SampleKind:
    """The sample kind called ``name``.

    Raises:
        UsageError: no kind has that name.
    """
    return SAMPLE_KINDS.get(name)


def kind_settings(kind: SampleKind, given: Sequence, model: str):
    """The option group of ``kind`` among ``given`` (sample kinds' groups, as ``hookviz run``'s
    flags or ``explain()``'s keywords made them), its defaults when none is; ``None`` for a
    kind without one.

    Raises:
        UsageError: something else than a sample kind's group, two of one kind's, or another
            kind's group with a value of its own (``--clip-frames`` for a photo model).
    """
    from hookviz.options.declared import check_values, groups, refuse_given

    declared = tuple(groups("sample kind"))
    of_kind = []
    for options in given:
        if not isinstance(options, declared):
            names = ", ".join(group.__name__ for group in declared) or "none is registered"
            raise UsageError(f"{arg('sample_options', type(options).__name__)}: expected a sample kind's option group ({names})")
        if kind.options_type is not None and type(options) is kind.options_type:
            of_kind.append(options)
            continue
        what = f"{model} takes {kind.words} (sample kind {kind.name!r})"
        refuse_given(options, what, "drop {option}, or explain a model of sample kind '{taker}'")
    if kind.options_type is None:
        return None
    if len(of_kind) > 1:
        raise UsageError(f"{arg('sample_options')}: {len(of_kind)} {kind.options_type.__name__}s; give one")
    settings = of_kind[0] if of_kind else kind.options_type()
    check_values(settings)
    return settings


def counted_noun(kind: SampleKind) -> str:
    """What a run's lines that count its samples call one (``2 of 2 signals done``): a photo an
    ``image``, as those lines always have; another kind by its ``noun``."""
    return "image" if kind.name == "photo" else kind.noun


def settings_for_model(kind: SampleKind, settings, model):
    """``settings`` with what depends on ``model`` (a ``LoadedModel``) filled in by ``kind``'s
    ``settings_for_model`` (a clip's frame count); ``None`` for a kind without settings.

    Raises:
        UsageError: a value the kind refuses, naming the option.
    """
    return settings if settings is None else kind.settings_for_model(settings, model)


def sample_keys(kind: SampleKind, paths: Sequence[Path], settings) -> list[Path]:
    """The key paths of the samples that ``paths`` (``kind.find``'s) hold as ``settings`` ask: the
    kind's ``sample_keys`` (a video's ``--clips``: one key per clip)."""
    return list(paths) if settings is None else list(kind.sample_keys(paths, settings))
