"""Diffing: compare a run with a baseline, image by image and layer by layer, and say
what changed and where.

``compare`` matches two runs' images (by output folder, then by image path) and layers
(by canonical name) and computes, for each matched pair (``hookviz.compare.measures`` holds the
results and the measures):

* per image: the target and top-5 before and after, and the change in the probability of
  the baseline's target;
* per tensor (the model's input, each layer's four tensors, the logits): the statistics
  before and after, and ``Figures`` (max absolute and relative difference, cosine) of the
  fingerprints' channel-summed maps and per-channel means, and of the full tensors where
  both runs saved them (``--save-tensors``);
* per layer: the CAM correlation and how far its peak moved, in input pixels.

Only forward tensors (the model's input, each layer's input and output, the logits) and
CAMs make ``drift`` findings. A change at one layer changes the gradients of every layer
before it, so gradients cannot say where a change happened; they are compared and
reported, not checked. ``compare`` draws the ``<layer>.diff.png`` pictures into the new
run's image folders as it goes, ``save_diff`` writes ``diff.json``; ``diff_runs`` is
``hookviz diff``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hookviz.compare.measures import (
    FORWARD,
    CamDiff,
    ImageDiff,
    LayerDiff,
    MapPair,
    RunDiff,
    TensorDiff,
    cam_correlation,
    compare_arrays,
    nonfinite_maps,
    peak_shift,
)
from hookviz.compare.notes import image_notes, kept_notes, layer_notes, run_notes
from hookviz.errors import ComparisonError, OutputError, UsageError, arg, display_path, first_line
from hookviz.explaining.checks import Finding
from hookviz.explaining.summaries import TENSOR_KEYS
from hookviz.options import CheckOptions, Tolerances
from hookviz.store.files import DIFF, atomic_write, layer_stems, list_files, write_json
from hookviz.store.records import DiffEntry, RunRecord, Score
from hookviz.store.runfolder import ImageData, RunFolder, open_run

__all__ = ["DIFF", "Baseline", "compare", "save_diff", "diff_runs", "compare_with_baseline"]


# ----------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class _Side:
    """One tensor of one run, as far as that run kept it."""

    shape: list | None = None
    stats: dict | None = None
    summary: object = None  # a fingerprints.TensorPrint
    full: np.ndarray | None = None


def compare(
    base: RunFolder, new: RunFolder, tolerances: Tolerances = Tolerances(), checked: bool = False, pictures: bool = False
) -> RunDiff:
    """Compare ``new`` with ``base``, every image both finished (see the module's docstring).

    Args:
        checked: whether drift fails the run (``RunDiff.checked``).
        pictures: draw each compared layer's ``<layer>.diff.png`` into ``new``'s image folder
            as each image is compared; its maps are let go once drawn.

    Raises:
        ComparisonError: no image in common, or an image's files are missing or corrupt.
    """
    pairs, only_base, only_new = _pair_images(base, new)
    if not pairs:
        raise ComparisonError(
            f"{base.named} and {new.named} have no finished image in common (matched by output folder and image "
            "path); nothing to compare"
        )
    images = []
    for before_files, after_files in pairs:
        with before_files.load() as before, after_files.load() as after:
            image = _compare_image(before, after, tolerances)
        images.append((_draw(new.path, image) if pictures else image).light())
    images.sort(key=_rank)
    notes = [*run_notes(base, new, pairs), *kept_notes(base, new, pairs), *image_notes(images, only_base, only_new, base, new)]
    return RunDiff(
        base=base.describe(),
        new=new.describe(),
        new_path=new.path,
        tolerances=tolerances,
        checked=checked,
        images=tuple(images),
        only_in_base=tuple(only_base),
        only_in_new=tuple(only_new),
        notes=tuple(dict.fromkeys(notes)),
    )


def _rank(image: ImageDiff):
    corr = image.lowest_cam_corr
    return (not image.target_changed, -image.change, 1.0 if corr is None else corr)


def _pair_images(base: RunFolder, new: RunFolder):
    """Pairs of ``ImageFiles`` by output folder, then (for folders renamed by a path hash)
    by the image's path as the run was given it; and the images left in each run."""
    pairs = [(base.images[name], new.images[name]) for name in new.images if name in base.images]
    paired = {name for name in new.images if name in base.images}
    left_base = {files.image: files for name, files in base.images.items() if name not in paired}
    only_new = []
    for name, files in new.images.items():
        if name in paired:
            continue
        match = left_base.pop(files.image, None)
        if match is None:
            only_new.append(files.image)
        else:
            pairs.append((match, files))
    return pairs, sorted(left_base), only_new


def _compare_image(before: ImageData, after: ImageData, tolerances: Tolerances) -> ImageDiff:
    base_layers, new_layers = before.layers, after.layers
    stems = layer_stems(list(new_layers))
    layers = tuple(_compare_layer(name, stems[name], before, after) for name in new_layers if name in base_layers)
    image = ImageDiff(
        output=after.files.output,
        image=after.files.image,
        target=(_score_json(before.report.target), _score_json(after.report.target)),
        top5=(tuple(s.to_json() for s in before.report.top5), tuple(s.to_json() for s in after.report.top5)),
        probability_change=_probability_change(before, after),
        model_input=_tensor_diff("model_input", _model_input(before), _model_input(after)),
        logits=_tensor_diff("logits", _logits(before), _logits(after)),
        layers=layers,
        only_in_base=tuple(name for name in base_layers if name not in new_layers),
        only_in_new=tuple(name for name in new_layers if name not in base_layers),
        notes=tuple(layer_notes(before, after, layers)),
        nonfinite=nonfinite_maps(layers),
    )
    return replace(image, findings=_findings(image, tolerances))


def _score_json(score: Score | None) -> dict:
    return score.to_json() if score is not None else {}


def _compare_layer(name: str, stem: str, before: ImageData, after: ImageData) -> LayerDiff:
    tensors, sides = [], {}
    for key in TENSOR_KEYS:
        sides[key] = (_layer_side(before, name, key), _layer_side(after, name, key))
        if sides[key][0].shape is None and sides[key][1].shape is None:
            continue
        tensors.append(_tensor_diff(key, *sides[key]))
    return LayerDiff(
        name=name,
        stem=stem,
        module_type=after.layers[name].module_type,
        tensors=tuple(tensors),
        cam=_cam_diff(name, before, after),
        maps=_output_maps(name, sides["output"], before, after),
    )


def _tensor_diff(name: str, before: _Side, after: _Side) -> TensorDiff:
    comparable = before.shape is None or after.shape is None or list(before.shape) == list(after.shape)

    def figures(a, b):
        if a is None or b is None or not comparable or np.shape(a) != np.shape(b):
            return None
        return compare_arrays(a, b)

    part = lambda side, which: None if side.summary is None else getattr(side.summary, which)  # noqa: E731
    return TensorDiff(
        name=name,
        checked=name in FORWARD or name in ("model_input", "logits"),
        shapes=(before.shape, after.shape),
        before=before.stats,
        after=after.stats,
        map=figures(part(before, "map"), part(after, "map")),
        channels=figures(part(before, "channels"), part(after, "channels")),
        tensor=figures(before.full, after.full),
    )


def _layer_side(data: ImageData, name: str, key: str) -> _Side:
    layer = data.layers[name]
    shape = layer.shapes.get(key)
    if shape is None:
        return _Side()
    printed = data.fingerprint.layers.get(name) if data.fingerprint is not None else None
    return _Side(
        shape=list(shape),
        stats=layer.stats.get(key),
        summary=None if printed is None else printed.tensors.get(key),
        full=data.full(f"{name}/{key}"),
    )


def _model_input(data: ImageData) -> _Side:
    channels = data.report.input_channels
    shape = [channels, *data.input_hw] if channels is not None and data.input_hw else None
    full = data.full("input")
    return _Side(
        shape=shape,
        summary=None if data.fingerprint is None else data.fingerprint.model_input,
        full=None if full is None else full[0],
    )


def _logits(data: ImageData) -> _Side:
    from hookviz.store.fingerprints import TensorPrint

    count = data.report.logits_count
    full = data.full("logits")
    kept = None if data.fingerprint is None or data.fingerprint.logits is None else TensorPrint(data.fingerprint.logits)
    return _Side(shape=[count] if isinstance(count, int) else None, summary=kept, full=None if full is None else full.reshape(-1))


def _cam_diff(name: str, before: ImageData, after: ImageData) -> CamDiff | None:
    key = f"{name}/cam"
    cams, source = (before.full(key), after.full(key)), "tensors"
    if cams[0] is None or cams[1] is None:
        cams, source = (_kept_cam(before, name), _kept_cam(after, name)), "fingerprint"
    if cams[0] is None or cams[1] is None:
        return None
    same = cams[0].shape == cams[1].shape
    cam = after.layers[name].cam
    shape = cam.shape if cam is not None else None
    return CamDiff(
        source=source,
        corr=cam_correlation(*cams) if same else None,
        peak_shift=peak_shift(cams[0], cams[1], before.input_hw, after.input_hw),
        shapes=(cams[0].shape, cams[1].shape),
        layer_shape=shape,
        maps=MapPair(cams[0], cams[1], source),
    )


def _kept_cam(data: ImageData, name: str) -> np.ndarray | None:
    printed = data.fingerprint.layers.get(name) if data.fingerprint is not None else None
    return None if printed is None else printed.cam


def _output_maps(name: str, sides, before: ImageData, after: ImageData) -> MapPair | None:
    """What the diff picture draws: the layer's channel-summed output at full resolution
    when both runs saved the tensor (laid out as each run's report says), else the
    fingerprints' area means."""
    from hookviz.explaining.summaries import channel_sum

    base, new = sides
    layouts = [data.layers[name].layout for data in (before, after)]
    if base.full is not None and new.full is not None and None not in layouts:
        maps = channel_sum(base.full, layouts[0]), channel_sum(new.full, layouts[1])
        if maps[0] is not None and maps[1] is not None and maps[0].shape == maps[1].shape:
            return MapPair(maps[0], maps[1], "tensors")
    maps = [None if side.summary is None else side.summary.map for side in sides]
    if maps[0] is None or maps[1] is None or maps[0].shape != maps[1].shape:
        return None
    return MapPair(maps[0], maps[1], "fingerprint")


def _probability_change(before: ImageData, after: ImageData) -> float | None:
    """P_after(the baseline's target) - P_before(it): from the new target when it is the
    same class, else from the new top-5, else from the new logits, made probabilities as the new
    run made them (report.json's ``prediction.probabilities``: softmax, or a SigLIP's sigmoid)."""
    target = before.report.target
    if target is None or target.probability is None:
        return None
    index, p_before = target.index, target.probability
    for score in (after.report.target, *after.report.top5):
        if score is not None and score.index == index and score.probability is not None:
            return score.probability - p_before
    logits = None if after.fingerprint is None else after.fingerprint.logits
    if logits is None or not isinstance(index, int) or not 0 <= index < logits.size or not np.isfinite(logits).all():
        return None
    logits = logits.astype(np.float64)
    if after.report.prediction.get("probabilities") == "sigmoid":
        return float(1.0 / (1.0 + np.exp(-logits[index]))) - p_before
    shifted = np.exp(logits - logits.max())
    return float(shifted[index] / shifted.sum()) - p_before


# ----------------------------------------------------------------------------- findings and notes


def _findings(image: ImageDiff, tolerances: Tolerances) -> tuple[Finding, ...]:
    """The drift findings of one image, each naming the layer (``None``: the whole model) and
    figure, in the order the computation runs: the first forward one is where it changed."""
    found = []

    def add(layer, figure, detail):
        found.append(Finding("drift", image.image, layer, detail, figure))

    def model(tensor):
        drift = tensor.drift(tolerances)
        if drift:
            add(None, f"{tensor.name}.{drift[0]}", f"{tensor.name.replace('_', ' ')}: {drift[1]}")

    if image.target_changed:
        add(None, "target", f"target {_label(image.target[0])} -> {_label(image.target[1])}")
    model(image.model_input)  # then the layers in the order the forward pass called them
    for layer in image.layers:
        for tensor in layer.tensors:
            drift = tensor.drift(tolerances)
            if drift:
                add(layer.name, f"{tensor.name}.{drift[0]}", f"{tensor.name}: {drift[1]}")
        if layer.cam is not None and layer.cam.corr is not None and layer.cam.corr < tolerances.min_cam_corr:
            add(layer.name, "cam.corr", f"CAM correlation {layer.cam.corr:.4f} < {tolerances.min_cam_corr:g}")
    model(image.logits)
    for name in image.only_in_base:
        add(name, "layer", "recorded by the baseline only")
    for name in image.only_in_new:
        add(name, "layer", "recorded by this run only, not by the baseline")
    return tuple(found)


def _label(score: dict) -> str:
    return f"{score.get('name') or 'class'} ({score.get('index')})"


# ----------------------------------------------------------------------------- files


def save_diff(diff: RunDiff, path: Path) -> RunDiff:
    """Write ``diff.json`` at ``path``.

    Raises:
        OutputError: it cannot be written there.
    """
    try:
        write_json(path, diff.to_json())
    except OSError as exc:
        raise OutputError(
            f"{arg('out', display_path(path))}: cannot write there ({exc.strerror or first_line(exc)}); choose another place"
        ) from None
    return diff


def _draw(new_path: Path, image: ImageDiff) -> ImageDiff:
    from hookviz.render import render_png
    from hookviz.render.kinds import picture_kind

    kind = picture_kind("diff")
    folder = new_path / image.output
    layers, written = [], []
    try:
        try:
            for layer in image.layers:
                data = render_png(kind, image, layer)
                if data is not None:
                    written.append(atomic_write(folder / kind.file_name(layer.stem), data).name)
                    layer = replace(layer, picture=written[-1])
                layers.append(layer)
        finally:  # those written, even where a later one failed: the folder's next save removes them
            list_files(folder, written)
    except OSError as exc:
        raise OutputError(
            f"{display_path(folder)}: cannot write the diff pictures there "
            f"({exc.strerror or first_line(exc)}); draw none with {arg('pictures', 'none')}"
        ) from None
    return replace(image, layers=tuple(layers))


def _real(path) -> Path:
    """``path`` with every link followed, as ``Path.resolve`` gives it, but a link to itself
    (``ln -s loop loop``) given back as far as it goes instead of raising RuntimeError: the
    folder is then refused as no run's, in one line."""
    return Path(os.path.realpath(path))


def diff_runs(base, new, *, out=None, tolerances: Tolerances = Tolerances(), fail_on=(), pictures: bool = True) -> RunDiff:
    """``hookviz diff BASE NEW``: compare two runs' output folders and write ``diff.json``
    (``NEW/diff.json``, or ``out``), the ``<layer>.diff.png`` pictures into NEW's image
    folders, and NEW's gallery again, with the comparison. BASE is only read.

    Args:
        fail_on: ``("drift",)`` to make the findings a failure (``RunDiff.checked``).

    Raises:
        ComparisonError: a folder that is not a run's output, a missing or corrupt file,
            or no image in common. UsageError: ``out`` inside BASE, or a check other than drift.
    """
    from hookviz.explaining.checks import parse_checks

    checks = parse_checks(fail_on)
    if any(name != "drift" for name in checks):
        raise UsageError(f"{arg('fail_on', ','.join(checks))}: a diff checks drift only; the others are checks of `hookviz run`")
    same = _real(base) == _real(new)  # refused below, by name: one hold, not two that clash
    with _held(base, "base"), contextlib.nullcontext() if same else _held(new, "new"):
        return _diffed(open_run(base, "base"), open_run(new, "new"), out, tolerances, checks, pictures)


def _diffed(before: RunFolder, after: RunFolder, out, tolerances: Tolerances, checks, pictures: bool) -> RunDiff:
    if _real(before.path) == _real(after.path):
        raise ComparisonError(f"{before.named} and {after.named} are the same folder; compare two runs")
    path = Path(out) if out is not None else after.path / DIFF
    if _real(before.path) in (_real(path), *_real(path).parents):
        raise UsageError(
            f"{arg('out', display_path(path))}: inside {before.named}, which a diff never writes into; choose another place"
        )
    diff = save_diff(compare(before, after, tolerances, "drift" in checks, pictures=pictures), path)
    if pictures:
        from hookviz.runs.gallery import write_gallery

        write_gallery(after.path, after.run, diff=diff.to_json())
    return diff


@contextlib.contextmanager
def _held(folder, argument: str) -> Iterator[None]:
    """Hold a run's folder while a diff reads it (and writes into NEW): beside a run still
    writing there, the diff would compare its previous run.json, and its pictures go stale."""
    from hookviz.store.outfolder import FolderLock

    lock = FolderLock(Path(folder))
    try:
        if Path(folder).is_dir():
            lock.acquire(create=False)
    except OutputError:
        raise ComparisonError(
            f"{arg(argument, display_path(Path(folder)))}: a hookviz run is writing into it now; compare it once that run has ended"
        ) from None
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class Baseline:
    """A run's ``--baseline``: the earlier run's folder, read before the run does any work,
    and the checks (``CheckOptions``) the run ends by making against it."""

    folder: RunFolder
    checks: CheckOptions

    @classmethod
    def open(cls, checks, options) -> Baseline:
        """Read ``checks.baseline`` for a run with these ``RunOptions``.

        Raises:
            UsageError: with ``--shard``, or the baseline overlaps the run's output or log folder.
            ComparisonError: not a run's output, or its files are missing or corrupt.
        """
        baseline, out = checks.baseline, options.out
        if options.shard is not None:
            raise UsageError(
                f"{arg('baseline')} compares a whole run; once every shard ({arg('shard')}, torchrun's processes "
                "or a Slurm array's tasks) has finished, "
                f"run `hookviz diff {display_path(baseline)} {display_path(out)}`"
            )
        base, mine = _real(baseline), _real(out)
        if base == mine or base in mine.parents or mine in base.parents:
            raise UsageError(
                f"{arg('baseline', display_path(baseline))}: overlaps {arg('out', display_path(out))}; "
                f"a run never writes into its baseline: choose another {arg('out')}"
            )
        logs = options.tensorboard
        if logs is not None and (_real(logs) == base or base in _real(logs).parents):
            raise UsageError(
                f"{arg('tensorboard', display_path(logs))}: is inside {arg('baseline', display_path(baseline))}; "
                f"a run never writes into its baseline: choose another {arg('tensorboard')} folder"
            )
        return cls(open_run(baseline, "baseline"), checks)

    def compare(self, summary, document: RunRecord, out: Path, pictures: bool):
        """Compare the finished run (``summary``, a ``runner.RunSummary``; ``document``, its
        run.json; its files in ``out``) with the baseline: ``out/diff.json``, the diff pictures
        (with ``pictures``) and, with ``--fail-on drift``, findings that fail the run.

        Returns:
            The summary and the run's description, with the comparison's findings and notes.
        """
        checks = replace(document.checks, baseline=display_path(self.folder.path), tolerances=self.checks.tolerances.to_json())
        if not summary.count("done") + summary.count("skipped"):
            note = f"{arg('baseline')}: no image finished, nothing to compare"
            return replace(summary, notes=(*summary.notes, note)), replace(document, checks=checks, notes=(*document.notes, note))
        checked = "drift" in self.checks.fail_on
        diff = compare_with_baseline(self.folder, out, document, self.checks.tolerances, checked, pictures=pictures)
        findings = (*summary.findings, *(diff.findings if checked else ()))
        notes = tuple(dict.fromkeys((*summary.notes, *diff.notes)))
        document = replace(
            document,
            checks=replace(checks, passed=not findings, findings=findings),
            notes=notes,
            diff=DiffEntry(DIFF, len(diff.images), len(diff.findings)),
        )
        return replace(summary, findings=findings, notes=notes), document


def compare_with_baseline(
    baseline: RunFolder, out: Path, run: RunRecord, tolerances: Tolerances, checked: bool, pictures: bool
) -> RunDiff:
    """What a run (``run``, its run.json record, its output in ``out``) does as it ends
    with ``--baseline``: compare itself with ``baseline`` and write ``out/diff.json`` (and
    the diff pictures, with ``pictures``)."""
    return save_diff(compare(baseline, open_run(out, "out", [run]), tolerances, checked, pictures=pictures), out / DIFF)
