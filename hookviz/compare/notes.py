"""What a diff says of two runs besides its figures: one line for each thing that differs
or could not be compared (versions, model, weights, options, images and layers in one run
only, what each run kept for comparison, maps that are not finite)."""

from __future__ import annotations

from hookviz.compare.measures import layers_only
from hookviz.store.runfolder import ImageData, RunFolder, version_tuple

__all__ = ["run_notes", "kind_notes", "target_notes", "image_notes", "layer_notes", "kept_notes"]


def run_notes(base: RunFolder, new: RunFolder, pairs) -> list[str]:
    """What differs between the runs as a whole: versions, model, weights, preprocessing."""
    notes = []
    b, n = base.run, new.run
    if version_tuple(base.version) > version_tuple(new.version):
        notes.append(
            f"{base.named} was written by hookviz {base.version}, newer than {new.version}: comparing what this version reads"
        )
    for folder in (base, new):
        if folder.run.unfinished:
            notes.append(
                f"{folder.named} is an unfinished run (interrupted, or stopped by an error): its missing images are not compared"
            )
    for what, old, now in (
        ("models differ", b.model, n.model),
        ("weights differ", b.weights, n.weights),
        ("tasks differ", b.task, n.task),
    ):
        if old != now:
            notes.append(f"{what}: {old} -> {now}")
    old_sha, new_sha = b.weights_sha256, n.weights_sha256
    if b.weights == n.weights and old_sha and new_sha and old_sha != new_sha:  # a file rewritten in place
        notes.append(f"weights differ: {n.weights} holds other bytes (SHA-256 {old_sha[:12]}... -> {new_sha[:12]}...)")
    for key, old, now in (
        ("torch", b.torch, n.torch),
        ("torchvision", b.torchvision, n.torchvision),
        ("device", b.device, n.device),
    ):
        if old and now and old != now:
            notes.append(f"{key} differs: {old} -> {now}")
    before, after = (files.report.preprocessing for files in pairs[0])
    changed = [
        f"{key} {before.get(key)} -> {after.get(key)}" for key in sorted({*before, *after}) if before.get(key) != after.get(key)
    ]
    if changed:
        notes.append("preprocessing differs: " + "; ".join(changed))
    return notes + kind_notes(base, new, pairs) + target_notes(*(files.report.asked for files in pairs[0]))


def kind_notes(base: RunFolder, new: RunFolder, pairs) -> list[str]:
    """One line for the images of one name that are samples of another kind in each run (a clip
    in one, a photo in the other): their inputs differ in rank, so their maps and CAMs cannot be
    laid over each other; their predictions and statistics are still compared."""
    other = [(b.report.input_hw, n.report.input_hw, n.image) for b, n in pairs]
    other = [(b, n, image) for b, n, image in other if b is not None and n is not None and len(b) != len(n)]
    if not other:
        return []
    before, after, _ = other[0]
    return [
        f"another kind of sample in {base.named} and {new.named} for {some([image for *_, image in other])}: "
        f"{_sized(before)} input against {_sized(after)}; compared on predictions and statistics, "
        "not on maps or CAMs (another rank of map)"
    ]


def _sized(size) -> str:
    return f"{'x'.join(str(side) for side in size)} ({len(size)}-D)"


# what the target options of report.json's ``asked`` are given as on the command line
_TARGET_FLAGS = {
    "cam": "--cam",
    "target": "--target",
    "objective": "--objective",
    "topk": "--topk",
    "output_key": "--output-key",
}


def target_notes(before, after) -> list[str]:
    """The target options (``--cam``, ``--target``, ...), what an embedding was compared with
    (``--target-image``) and a text tower's prompts, when the runs differ in them: another
    method or reference makes other maps, not drift."""
    notes = []
    old, now = before.target or {}, after.target or {}
    changed = [
        f"{flag} {old[key]} -> {now[key]}"
        for key, flag in _TARGET_FLAGS.items()
        if key in old and key in now and old[key] != now[key]
    ]
    changed += _settings_changed(old.get("settings"), now.get("settings"))
    if changed:
        notes.append(f"explained with other options: {'; '.join(changed)} (maps differ by that choice, not by drift)")
    if before.references is not None and after.references is not None:
        old, now = ([(r.name, r.sha256) for r in side.references] for side in (before, after))
        if [name for name, _ in old] != [name for name, _ in now]:
            names = (", ".join(name for name, _ in side) or "none" for side in (old, now))
            notes.append("references differ (--target-image): {} -> {}".format(*names))
        elif old != now:
            changed = [name for (name, a), (_, b) in zip(old, now) if a != b]
            notes.append(f"references differ (--target-image): {', '.join(changed)} holds other photos")
    if before.prompts is not None and after.prompts is not None and tuple(before.prompts) != tuple(after.prompts):
        notes.append(f"prompts differ: {', '.join(before.prompts) or 'none'} -> {', '.join(after.prompts) or 'none'}")
    return notes


def _settings_changed(old, now) -> list[str]:
    """The methods' settings (report.json's ``asked.target.settings``, by the methods that declare
    them) that both runs kept and that differ, as ``--steps 4 -> 8``."""
    if not isinstance(old, dict) or not isinstance(now, dict):
        return []
    from hookviz.errors import command_line_spelling
    from hookviz.options.declared import groups, settings_of

    names = {s.name: s.keyword for group in groups() for s in settings_of(group)}
    with command_line_spelling():
        from hookviz.errors import arg

        return [
            f"{arg(names.get(key) or key)} {before[key]} -> {after[key]}"
            for owner, before in old.items()
            if isinstance(before, dict) and isinstance(after := now.get(owner), dict)
            for key in before
            if key in after and before[key] != after[key]
        ]


def image_notes(images, only_base, only_new, base: RunFolder, new: RunFolder) -> list[str]:
    notes = [note for image in images for note in image.notes]
    if only_base:
        notes.append(f"images in {base.named} only: {some(only_base)}")
    if only_new:
        notes.append(f"images in {new.named} only: {some(only_new)}")
    for folder in (base, new):
        if folder.failed:
            notes.append(f"images {folder.named} failed on, not compared: {some(folder.failed)}")
    for side in ("base", "new"):
        names = layers_only(images, side)
        if names:
            notes.append(f"layers recorded by {(base if side == 'base' else new).named} only: {some(names)}")
    return notes + nonfinite_notes(images, base, new)


def nonfinite_notes(images, base: RunFolder, new: RunFolder) -> list[str]:
    """One line per layer whose maps hold NaN or Inf values, naming the maps and images: such
    a map is compared on its finite values (where both runs have the same NaN and Inf), and a
    figure that is not finite is ``null`` in diff.json."""
    found: dict[tuple[str, int], tuple[dict, dict]] = {}  # (layer, side) -> (its maps, the images)
    for image in images:
        for layer, what, side in image.nonfinite:
            maps, names = found.setdefault((layer, side), ({}, {}))
            maps[what] = names[image.image] = None
    where = (f"{base.named} only", f"{new.named} only", "both runs")
    lines = []
    for (layer, side), (maps, names) in found.items():
        what = " and the ".join(maps)
        lines.append(
            f"{layer}: the {what} hold{'s' if len(maps) == 1 else ''} NaN/Inf values in {where[side]} ({some(names)}): "
            "compared where both are finite, and on where the NaN/Inf lie; figures that are not finite are null in diff.json"
        )
    return lines


def layer_notes(before: ImageData, after: ImageData, layers) -> list[str]:
    notes = []
    for layer in layers:
        cams = [getattr(data.layers[layer.name].cam, "shape", None) for data in (before, after)]
        if layer.cam is None and (cams[0] is None) != (cams[1] is None):
            notes.append(f"{layer.name}: a CAM in one run only (--cam differs?); not compared")
        same_input = len(before.input_hw or ()) == len(after.input_hw or ())
        if same_input and cams[0] is not None and cams[1] is not None and len(cams[0]) != len(cams[1]):
            notes.append(f"{layer.name}: CAMs of another rank ({_sized(cams[0])} -> {_sized(cams[1])}); not compared")
    return notes


def kept_notes(base: RunFolder, new: RunFolder, pairs) -> list[str]:
    """What each run kept for comparison: fingerprints (of a format this version reads) and tensors."""
    from hookviz.store.fingerprints import FORMAT as KNOWN

    notes = []
    for index, folder in enumerate((base, new)):
        formats = {files[index].fingerprint_format for files in pairs}
        if None in formats:
            versions = sorted({str(files[index].report.hookviz) for files in pairs})
            notes.append(
                f"{folder.named} has images without a fingerprint (written by hookviz {', '.join(versions)}): "
                "those are compared on statistics and top-5 only; rerun it to compare maps and CAMs"
            )
        if any(f is not None and f > KNOWN for f in formats):
            notes.append(f"{folder.named} has fingerprints of a format newer than this hookviz reads; compared without them")
    if any(b.has_tensors != n.has_tensors for b, n in pairs):
        notes.append("full-tensor figures need --save-tensors in both runs; elsewhere compared on fingerprints")
    return notes


def some(names, limit: int = 10) -> str:
    names = list(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
