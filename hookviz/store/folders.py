"""Where each image's results go in a run's output folder: its folder's name (never taking
another photo's or a run-level file's), the folder an earlier run already filled for the same
photo, and what ``--skip-existing`` compares with that folder's report (``Recipe``)."""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hookviz.errors import display_path
from hookviz.inputs.identity import Match, file_sha256, match_photo
from hookviz.inputs.parts import part_stem
from hookviz.store.fingerprints import FINGERPRINT, looks_whole
from hookviz.store.records import Report, read_report

if TYPE_CHECKING:
    from hookviz.options import PictureOptions

__all__ = [
    "REPORT",
    "TENSORS",
    "DIFF",
    "RUN_FILE_PATTERN",
    "output_names",
    "plain_name",
    "distinct_name",
    "Placement",
    "place",
    "Recipe",
    "Folders",
    "plan_folders",
    "layer_stems",
]

REPORT = "report.json"
TENSORS = "tensors.npz"
#: A run's comparison with a baseline, at the top of its output folder (``hookviz.compare.diffing``).
DIFF = "diff.json"
#: Files a run writes at the top of its output folder; no image's folder may take these names.
RUN_FILE_PATTERN = re.compile(
    r"^(run(-\d+-of-\d+)?\.json|index\.html|diff\.json|samples\.(csv|parquet)|explorer-[a-z0-9-]+\.js)$", re.IGNORECASE
)


def _digest(text: str, length: int = 8) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:length]


def _safe(name: str) -> str:
    cleaned = "".join(c if (c.isalnum() and c.isprintable()) or c in "-_.+ " else "_" for c in name).strip(" .")
    return cleaned or "image"


def output_names(paths: Sequence[Path]) -> dict[Path, str]:
    """A folder name per image: its stem, made safe; with a short hash of its full path
    (``distinct_name``) when two images of the run share a stem, or when the stem would take
    the name of a run-level file (``run.json``, ``index.html``). Depends only on the run's
    full input list, so every ``--shard`` of it agrees."""
    plain = {path: plain_name(path) for path in paths}
    counts = Counter(name.lower() for name in plain.values() if name is not None)
    return {path: name if name is not None and counts[name.lower()] == 1 else distinct_name(path) for path, name in plain.items()}


def plain_name(path: Path) -> str | None:
    """An image's folder name when no other image takes it: its stem, or ``None`` when the
    stem needs characters replaced or would take a run-level file's name."""
    given = _stem(path)
    stem = _safe(given)[:120]
    return None if RUN_FILE_PATTERN.match(stem) or stem != given[:120] else stem


def distinct_name(path: Path) -> str:
    """The folder name of an image whose stem is taken: the stem and a short hash of its full path."""
    # realpath, as Path.resolve but for a link to itself, which it raises RuntimeError for (Python < 3.13)
    return f"{_safe(_stem(path))[:120]}-{_digest(display_path(Path(os.path.realpath(path))))}"


def _stem(path: Path) -> str:
    """A sample's name: its file's stem, or a folder's whole name (a clip's folder ``walk.v2``, a sample kind's);
    a part of a file (``walk.mp4#2``, ``--clips``) adds ``.clip-k`` (``hookviz.inputs.parts``)."""
    return part_stem(path)


@dataclass(frozen=True)
class Placement:
    """Where one photo's results go: ``name``, its folder under the output folder; the
    ``report`` already there (``None``: none, or not a whole one); and how the photo that
    report was made from relates to this one (``identity.Match``)."""

    name: str
    report: Report | None
    match: Match


def place(
    out: Path,
    path: Path,
    name: str,
    taken: Collection[str] = (),
    present: Collection[str] | None = None,
    match=None,
    read=read_report,
) -> Placement:
    """The folder for the photo at ``path`` in ``out``, which earlier runs may have filled.

    Of its possible names, ``name`` (from ``output_names``), ``plain_name`` and
    ``distinct_name``, it is the one whose report was made from this photo (the same bytes,
    or this file before it was rewritten); else the first that holds no other photo's
    results; else the distinct name. So a photo of another folder with the same file name (a
    camera's ``IMG_0001``) never takes, or overwrites, another photo's results, and an
    earlier run's results are found whichever other photos it ran with. A name in ``taken``
    (lower case: another image's of this run) is never used. ``present``, the lower-case
    names of the folders in ``out`` when the caller listed them, spares looking into the others.
    ``match(recorded, path)`` tells how the sample at ``path`` relates to a report's (its sample
    kind's ``match``; by default a photo's: ``identity.match_photo``); ``read(path)`` reads a
    report.json as the run writes them, with its ``sample_identity`` (by default a photo run's,
    ``read_report``; a vision-language model's run reads its own and a photo run's,
    ``runs.vlm_resume``).
    """
    matches = match or (lambda recorded, here: match_photo(recorded, here, file_sha256))
    names = (name, plain_name(path), distinct_name(path))
    candidates = [c for c in dict.fromkeys(n for n in names if n) if c == name or c.lower() not in taken]
    free = None
    for candidate in candidates:
        there = present is None or candidate.lower() in present
        report = read(out / candidate / REPORT) if there else None
        found = Match.UNKNOWN if report is None else matches(report.sample_identity, path)
        if found in (Match.SAME, Match.CHANGED):
            return Placement(candidate, report, found)
        if found is Match.UNKNOWN and free is None:  # nothing there, or a report of an older hookviz
            free = Placement(candidate, report, found)
    return free or Placement(candidates[-1], None, Match.OTHER)


@dataclass(frozen=True)
class Recipe:
    """What a run makes of each photo, as ``--skip-existing`` compares it with a report
    already in the photo's folder: the model, its weights (and their bytes), the
    preprocessing and target options, the layers, the pictures and whether tensors are saved.

    Attributes:
        target: the target options as report.json keeps them (``Explainer.asked``).
        layers: the run's layer selections (``layers.LayerSpec``: ``path``, ``call``, ``label``).
        pictures: a ``PictureOptions``.
    """

    model: str
    weights: str
    weights_sha256: str | None
    preprocessing: dict
    target: dict
    layers: tuple
    pictures: PictureOptions
    save_tensors: bool = False
    trust: dict = field(default_factory=dict)
    prompts: tuple[str, ...] = ()
    references: tuple = ()

    @classmethod
    def of(cls, explainer, pictures, save_tensors: bool, trust) -> Recipe:
        """The recipe of a run with ``explainer`` and these ``PictureOptions`` and ``TrustOptions``."""
        model = explainer.model
        return cls(
            model.name,
            model.weights,
            model.weights_sha256,
            explainer.preprocessing.to_json(),
            explainer.asked,
            tuple(explainer.layers),
            pictures,
            save_tensors,
            trust.to_json() if trust.any else {},
            tuple(model.prompts),
            tuple(explainer.references),
        )

    def made(self, folder: Path, report: Report) -> bool:
        """Whether ``report`` (``folder``'s) is of this recipe's results: the same model, weights,
        preprocessing and target options, listing every layer of this recipe with every
        picture it draws (and tensors.npz when asked), each file there, in this hookviz's words
        (a report that keeps its sample as ``image`` and ``photo``, schema 2's, is redone once)."""
        if report.older_words or not self._same(report):
            return False
        if FINGERPRINT not in report.files or not looks_whole(folder / FINGERPRINT):
            return False  # written before hookviz kept fingerprints, or damaged since: a later comparison needs one
        if self.save_tensors and not looks_whole(folder / TENSORS):
            return False
        wanted = [kind.name for kind in self.pictures.kinds]
        for spec in self.layers:
            matching = [layer for layer in report.layers if _names_spec(layer.name, spec)]
            if not matching and spec.label not in report.skipped_layers:
                return False
            for layer in matching:
                if any(k not in layer.pictures or not _there(folder, layer.pictures[k]) for k in wanted):
                    return False
        return True

    def _same(self, report: Report) -> bool:
        asked = report.asked
        grids = any(kind.group == "channels" for kind in self.pictures.kinds)
        return (
            report.model == self.model
            and report.weights == self.weights
            and report.weights_sha256 == self.weights_sha256  # a file rewritten in place
            and _without_size(report.preprocessing) == self.preprocessing
            and asked.target == self.target
            and asked.trust == self.trust
            and _known_same(asked.prompts, self.prompts)
            and _known_same(_contents(asked.references), _contents(self.references))
            and (not grids or (asked.channels, asked.scale) == (str(self.pictures.channels), self.pictures.scale))
            and (not self._pixel_pictures(report) or (asked.pixel_clip, asked.pixel_sign) == self._pixel_drawing())
        )

    def _pixel_pictures(self, report: Report) -> bool:
        """Whether a result of this recipe draws maps of the input (``pixel_maps.png``)."""
        return "cam" in self.pictures.pictures and any(record.shape for record in report.pixel_maps.values())

    def _pixel_drawing(self) -> tuple[float, str]:
        return float(self.pictures.pixel_clip), self.pictures.pixel_sign


def _known_same(recorded, wanted: tuple | None) -> bool:
    """Whether a report's prompts (or references) are the recipe's. An older report kept none
    (``None``): unknown, so a recipe that has some redoes it; one that has none (a model
    without a text tower, no reference) could not have had any then either."""
    return tuple(recorded) == wanted if recorded is not None else not wanted


def _contents(references) -> tuple | None:
    """References as compared: name and content, not where or when the file lies (a copied
    folder of references is the same concept)."""
    return None if references is None else tuple((r.name, r.sha256) for r in references)


def _there(folder: Path, name: str | None) -> bool:
    """Whether a picture a report lists is in ``folder`` (``None``: it does not apply, nothing to find)."""
    return name is None or (folder / name).exists()


def _names_spec(name: str, spec) -> bool:
    """Whether a report's layer ``name`` (``relu:1``) is a call of the module ``spec`` selects."""
    path, _, call = name.partition(":")
    return path == spec.path and (spec.call is None or call == str(spec.call))


class MadeBy(Protocol):
    """What tells a result done already (``Recipe``, or a vision-language model's run's)."""

    def made(self, folder: Path, report) -> bool: ...


@dataclass(frozen=True)
class Folders:
    """Where each photo of a run goes (``names``), and which of them are ``done`` already or
    still ``todo``; ``reports``: the report of each photo done already, which the run's checks
    then judge it by."""

    names: dict
    done: tuple[Path, ...] = ()
    todo: tuple[Path, ...] = ()
    reports: dict = field(default_factory=dict)


def plan_folders(
    out: Path, paths: Sequence[Path], names: dict[Path, str], recipe: MadeBy | None = None, match=None, read=read_report
) -> Folders:
    """Give each photo of ``paths`` its folder in ``out`` (``place``: never another photo's),
    starting from ``names`` (``output_names`` of the run's full list); ``match``, ``read``: as
    ``place``'s (``recipe``: anything with ``made(folder, report)``, for the reports ``read`` reads).

    With a ``recipe`` (``--skip-existing``), a photo whose folder holds a complete result of
    this photo made by this recipe is done already; the others are still to do.

    Raises:
        SchemaError: a report there was written by a newer hookviz.
    """
    names = dict(names)
    taken = {name.lower() for name in names.values()}  # as a case-insensitive file system sees them
    present = {entry.lower() for entry in os.listdir(out)}  # one listing, not a look per image
    done, todo, reports = [], [], {}
    for path in paths:
        placement = place(out, path, names[path], taken=taken, present=present, match=match, read=read)
        names[path] = placement.name
        report = placement.report if placement.match is Match.SAME else None
        if recipe is not None and report is not None and recipe.made(out / placement.name, report):
            done.append(path)
            reports[path] = report
        else:
            todo.append(path)
    return Folders(names, tuple(done), tuple(todo), reports)


def layer_stems(names: Sequence[str]) -> dict[str, str]:
    """A file-name stem per layer name, unique among ``names``: ``layer3.5.relu:1`` ->
    ``layer3.5.relu-1``. A name with characters a file name cannot hold (``a/b``) gets a
    short hash of the name, so it never takes another layer's files (``a_b``)."""
    stems = {}
    for name in names:
        plain = name.replace(":", "-")
        stem = _safe(plain)
        if stem != plain or len(stem) > 150:
            stem = f"{stem[:150]}-{_digest(name, 6)}"
        stems[name] = stem
    counts = Counter(stems.values())
    return {name: (f"{stem}-{_digest(name, 6)}" if counts[stem] > 1 else stem) for name, stem in stems.items()}


def _without_size(preprocessing: dict) -> dict:
    """A report's preprocessing without ``input_size`` (a clip's or a signal's real size, which
    follows from the preprocessing and the kind's settings the recipe compares)."""
    return {key: value for key, value in preprocessing.items() if key != "input_size"}
