"""Changes: what comparing two runs finds, and the measures it is made of.

The measures: ``compare_arrays`` (max absolute and relative difference, cosine),
``cam_correlation`` and ``peak_shift``. The findings, as frozen dataclasses from the
smallest up: ``Figures`` of two arrays, ``TensorDiff`` (one tensor before and after),
``CamDiff``, ``LayerDiff``, ``ImageDiff`` and ``RunDiff`` (the whole comparison), each with
its ``to_json`` for ``diff.json``. ``hookviz.compare.diffing`` makes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hookviz.explaining.checks import Finding
from hookviz.options import Tolerances

__all__ = [
    "FORMAT",
    "FORWARD",
    "Figures",
    "TensorDiff",
    "CamDiff",
    "MapPair",
    "LayerDiff",
    "ImageDiff",
    "RunDiff",
    "compare_arrays",
    "cam_correlation",
    "peak_shift",
    "nonfinite_maps",
    "finite_json",
]

#: diff.json's own format, bumped when its keys change meaning.
FORMAT = 1
#: The tensors of a layer whose change says where a change happened: a change at one
#: layer reaches the gradients of every layer before it, so gradients cannot say where.
FORWARD = ("input", "output")


# ----------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figures:
    """How far two arrays of the same shape are apart.

    Attributes:
        max_abs: max |after - before| (infinite where one holds a NaN or an infinity the
            other does not have at the same place; such places are otherwise left out).
        max_rel: ``max_abs`` / ``scale`` (0 when both are all zero).
        cosine: of the two arrays as vectors (1 for two zero arrays, 0 for one).
        scale: max |before|.
    """

    max_abs: float
    max_rel: float
    cosine: float
    scale: float

    def passes(self, tolerances: Tolerances) -> bool:
        return self.max_abs <= tolerances.atol + tolerances.rtol * self.scale

    def describe(self, tolerances: Tolerances) -> str:
        if math.isinf(self.max_abs):
            return "NaN or infinite values where the baseline has other values (finite ones, or the reverse)"
        return (
            f"max |after - before| {self.max_abs:.3g} = {self.max_rel:.3g} x max |before| {self.scale:.3g}; "
            f"allowed {tolerances.atol:g} + {tolerances.rtol:g} x {self.scale:.3g}"
        )

    def to_json(self) -> dict:
        return {
            "max_abs": _num(self.max_abs),
            "max_rel": _num(self.max_rel),
            "cosine": _num(self.cosine),
            "scale": _num(self.scale),
        }


def compare_arrays(before, after) -> Figures:
    """``Figures`` of two arrays of the same shape (computed in float64)."""
    a = np.asarray(before, dtype=np.float64).ravel()
    b = np.asarray(after, dtype=np.float64).ravel()
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    scale = float(np.abs(a[finite_a]).max()) if finite_a.any() else 0.0
    if not np.array_equal(finite_a, finite_b) or not np.array_equal(a[~finite_a], b[~finite_b], equal_nan=True):
        return Figures(math.inf, math.inf, math.nan, scale)  # NaN or Inf where the other has another value
    a, b = a[finite_a], b[finite_b]
    if np.array_equal(a, b):
        return Figures(0.0, 0.0, 1.0, scale)  # exactly, where the cosine would round below 1
    max_abs = float(np.abs(b - a).max()) if a.size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    norms = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if norms[0] == 0 or norms[1] == 0:
        cosine = 1.0 if norms[0] == norms[1] else 0.0
    else:
        cosine = float(np.clip(np.dot(a, b) / (norms[0] * norms[1]), -1.0, 1.0))
    return Figures(max_abs, max_rel, cosine, scale)


#: A map whose values spread less than this fraction of its largest magnitude is flat:
#: below float32's noise, a correlation would only measure rounding.
FLAT = 1e-6


def _flat(values: np.ndarray) -> bool:
    return float(np.ptp(values)) <= FLAT * float(np.abs(values).max()) if values.size else True


def cam_correlation(before, after) -> float:
    """The Pearson correlation of two CAMs of the same shape, defined for every pair of
    finite maps: equal maps correlate 1; two flat maps (an all-zero CAM is one) correlate
    1 when their values agree (to 1e-5 relative) and 0 otherwise, as does a flat map with
    a varied one. NaN where either map holds a non-finite value."""
    a = np.asarray(before, dtype=np.float64).ravel()
    b = np.asarray(after, dtype=np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.nan
    if np.array_equal(a, b):
        return 1.0  # exactly, where the formula would round to 0.9999999999999998
    if _flat(a) or _flat(b):
        if not (_flat(a) and _flat(b)):
            return 0.0
        mean_a, mean_b = (float(v.mean()) if v.size else 0.0 for v in (a, b))
        return 1.0 if abs(mean_a - mean_b) <= 1e-5 * max(abs(mean_a), abs(mean_b)) else 0.0
    a, b = a - a.mean(), b - b.mean()
    return float(np.clip(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)), -1.0, 1.0))


def peak_shift(before, after, before_hw, after_hw) -> float | None:
    """How far the CAM's peak moved, in pixels of the model's input (each map's cell
    centre scaled to its run's input size, on each of its one to three axes); ``None`` where
    a map has no peak (flat, or not finite), its rank is not its input size's, or the two
    inputs differ in rank."""
    if before_hw is None or after_hw is None or len(before_hw) != len(after_hw):
        return None  # another rank of input (a clip against a photo): no distance between the peaks
    centres = []
    for cam, hw in ((np.asarray(before), before_hw), (np.asarray(after), after_hw)):
        if hw is None or cam.ndim != len(hw) or not np.isfinite(cam).all() or _flat(cam):
            return None
        cell = np.unravel_index(int(np.argmax(cam)), cam.shape)
        centres.append([(at + 0.5) * side / cells for at, side, cells in zip(cell, hw, cam.shape)])
    return float(math.dist(centres[0], centres[1]))


def _num(value) -> float | None:
    """A number for JSON: ``None`` for a missing, NaN or infinite one."""
    return None if value is None or not math.isfinite(value) else float(value)


def finite_json(value):
    """``value`` (JSON data) with every NaN or infinite number as ``None``: statistics and
    scores come from reports as they were read, and JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    return value


def nonfinite_maps(layers) -> tuple[tuple[str, str, int], ...]:
    """``(layer, map, side)`` for each compared map of ``layers`` (``LayerDiff`` s, their maps
    still held) that holds NaN or Inf values: ``output map`` or ``CAM``; side 0 the baseline's
    only, 1 the new run's only, 2 both."""
    found = []
    for layer in layers:
        pairs = (("output map", layer.maps), ("CAM", None if layer.cam is None else layer.cam.maps))
        for what, pair in pairs:
            if pair is None:
                continue
            holes = [not np.isfinite(values).all() for values in (pair.before, pair.after)]
            if any(holes):
                found.append((layer.name, what, 2 if all(holes) else holes.index(True)))
    return tuple(found)


# ----------------------------------------------------------------------------- what a diff holds


@dataclass(frozen=True)
class TensorDiff:
    """One tensor, before and after.

    Attributes:
        name: ``input``, ``output``, ``grad_input``, ``grad_output``, ``model_input`` or ``logits``.
        checked: whether it can drift (a forward tensor).
        shapes: (before, after), each ``None`` where unknown or not recorded.
        before, after: statistics from the reports (``None`` for the model's input and logits).
        map, channels: ``Figures`` of the fingerprints' channel-summed maps and channel means.
        tensor: ``Figures`` of the full tensors, when both runs saved them.
    """

    name: str
    checked: bool
    shapes: tuple = (None, None)
    before: dict | None = None
    after: dict | None = None
    map: Figures | None = None
    channels: Figures | None = None
    tensor: Figures | None = None

    def drift(self, tolerances: Tolerances) -> tuple[str, str] | None:
        """``(figure, detail)`` of the first compared figure past its tolerance, the most
        exact first (full tensor, map, channel means, statistics), or ``None``."""
        if not self.checked:
            return None
        before, after = self.shapes
        if before is not None and after is not None and list(before) != list(after):
            return "shape", f"shape {_shape(before)} -> {_shape(after)}"
        if (before is None) != (after is None) and self.name in FORWARD:  # a layer's own tensor
            return "presence", f"recorded {'before' if after is None else 'after'} only"
        for source, figures in (("tensor", self.tensor), ("map", self.map), ("channels", self.channels)):
            if figures is not None and not figures.passes(tolerances):
                label = {"tensor": "full tensor", "map": "fingerprint's map", "channels": "fingerprint's channel means"}[source]
                return source, f"{label}: {figures.describe(tolerances)}"
        return _stats_drift(self.before, self.after, tolerances)

    @property
    def change(self) -> float | None:
        """The largest relative difference known: of the full tensors, else of the fingerprints, else of the statistics."""
        if self.tensor is not None:
            return self.tensor.max_rel
        known = [f.max_rel for f in (self.map, self.channels) if f is not None]
        if known:
            return max(known)
        return _stats_change(self.before, self.after)

    def to_json(self) -> dict:
        figures = {name: getattr(self, name) for name in ("tensor", "map", "channels")}
        return {
            "checked": self.checked,
            "shapes": {"before": self.shapes[0], "after": self.shapes[1]},
            "stats": {"before": self.before, "after": self.after},
            **{name: (None if value is None else value.to_json()) for name, value in figures.items()},
            "change": _num(self.change),
        }


def _shape(shape) -> str:
    return "x".join(str(d) for d in shape)


_STATS = ("mean", "std", "min", "max")


def _stats_drift(before: dict | None, after: dict | None, tolerances: Tolerances) -> tuple[str, str] | None:
    before, after = _numbers(before), _numbers(after)
    if before is None or after is None:
        return None
    if before.get("nonfinite") != after.get("nonfinite"):
        return "stats.nonfinite", f"NaN/Inf values: {before.get('nonfinite')} -> {after.get('nonfinite')}"
    scale = _stats_scale(before)
    for name in _STATS:
        x, y = before.get(name), after.get(name)
        if (x is None) != (y is None):
            return f"stats.{name}", f"{name}: {x} -> {y}"
        if x is not None and abs(y - x) > tolerances.atol + tolerances.rtol * scale:
            return f"stats.{name}", (
                f"{name} {x:.6g} -> {y:.6g}; allowed {tolerances.atol:g} + {tolerances.rtol:g} x max |before| {scale:.3g}"
            )
    return None


def _numbers(stats) -> dict | None:
    """A report's statistics with anything that is not a number as ``None`` (a hand-edited
    or foreign report must not stop a comparison)."""
    if not isinstance(stats, dict):
        return None
    number = lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None  # noqa: E731
    numbers = {name: number(stats.get(name)) for name in _STATS}
    nonfinite = number(stats.get("nonfinite"))
    return {**numbers, "nonfinite": None if nonfinite is None else int(nonfinite)}


def _stats_scale(stats: dict) -> float:
    return max(abs(stats.get("min") or 0.0), abs(stats.get("max") or 0.0))


def _stats_change(before: dict | None, after: dict | None) -> float | None:
    before, after = _numbers(before), _numbers(after)
    if before is None or after is None:
        return None
    scale = _stats_scale(before)
    changes = [abs(after[n] - before[n]) for n in _STATS if before.get(n) is not None and after.get(n) is not None]
    if not changes:
        return None
    return max(changes) / scale if scale > 0 else (0.0 if max(changes) == 0 else math.inf)


@dataclass(frozen=True)
class MapPair:
    """Two maps a diff picture draws, before and after; ``source`` says at which
    resolution (``tensors``: the layer's; ``fingerprint``: the fingerprint's area means)."""

    before: np.ndarray = field(repr=False)
    after: np.ndarray = field(repr=False)
    source: str = "fingerprint"


@dataclass(frozen=True)
class CamDiff:
    """One layer's CAM, before and after (raw maps, from the full tensors or the fingerprints).

    Attributes:
        source: ``tensors`` or ``fingerprint``.
        corr: ``cam_correlation``; ``None`` where the maps differ in shape or are not finite.
        peak_shift: ``peak_shift`` in input pixels, or ``None``.
        shapes: the compared maps' shapes, before and after.
        layer_shape: the CAM's shape at the layer's resolution in the new run (a fingerprint
            keeps area means of one larger than ``fingerprints.CAM_SIDE``).
        maps: the two maps, kept only until the diff picture is drawn.
    """

    source: str
    corr: float | None
    peak_shift: float | None
    shapes: tuple = ((), ())
    layer_shape: tuple | None = None
    maps: MapPair | None = field(default=None, repr=False)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "corr": _num(self.corr),
            "peak_shift_pixels": _num(self.peak_shift),
            "compared_shape": {"before": list(self.shapes[0]), "after": list(self.shapes[1])},
            "layer_shape": None if self.layer_shape is None else list(self.layer_shape),
        }


@dataclass(frozen=True)
class LayerDiff:
    """One layer recorded by both runs.

    Attributes:
        stem: its file-name stem in the new run (``layer3.5.relu-1``).
        picture: the ``<stem>.diff.png`` written, once drawn.
    """

    name: str
    stem: str
    module_type: str | None
    tensors: tuple[TensorDiff, ...]
    cam: CamDiff | None = None
    maps: MapPair | None = field(default=None, repr=False)
    picture: str | None = None

    def __getitem__(self, name: str) -> TensorDiff:
        return next(t for t in self.tensors if t.name == name)

    def light(self) -> "LayerDiff":
        """Without the maps only its picture needs: a long comparison keeps every image's
        figures, not their arrays."""
        return replace(self, maps=None, cam=None if self.cam is None else replace(self.cam, maps=None))

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "module_type": self.module_type,
            "picture": self.picture,
            "tensors": {t.name: t.to_json() for t in self.tensors},
            "cam": None if self.cam is None else self.cam.to_json(),
        }


@dataclass(frozen=True)
class ImageDiff:
    """One image in both runs.

    Attributes:
        output: its folder in the new run.
        probability_change: P_after(baseline's target) - P_before(baseline's target), or
            ``None`` where the new run does not say.
        only_in_base, only_in_new: layers recorded for this image by one run only.
        findings: the ``drift`` findings, whether or not drift is checked.
        nonfinite: the maps that hold NaN or Inf values (``nonfinite_maps``).
    """

    output: str
    image: str
    target: tuple[dict, dict]
    top5: tuple[tuple, tuple]
    probability_change: float | None
    model_input: TensorDiff
    logits: TensorDiff
    layers: tuple[LayerDiff, ...]
    only_in_base: tuple[str, ...] = ()
    only_in_new: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    nonfinite: tuple[tuple[str, str, int], ...] = ()

    def __getitem__(self, name: str) -> LayerDiff:
        return next(layer for layer in self.layers if layer.name == name)

    def light(self) -> "ImageDiff":
        return replace(self, layers=tuple(layer.light() for layer in self.layers))

    @property
    def target_changed(self) -> bool:
        return self.target[0].get("index") != self.target[1].get("index")

    @property
    def change(self) -> float:
        """The largest relative change of any compared forward tensor: how images are ranked."""
        values = [t.change for t in self._forward() if t.change is not None]
        values = [math.inf if math.isnan(v) else v for v in values]
        return max(values, default=0.0)

    @property
    def first_change(self) -> Finding | None:
        """The first forward tensor that drifted, in the order the forward pass ran: where
        the computation changed (everything after it changes with it)."""
        forward = {"model_input", "logits", *FORWARD}
        return next((f for f in self.findings if f.figure.split(".")[0] in forward), None)

    @property
    def lowest_cam_corr(self) -> float | None:
        values = [layer.cam.corr for layer in self.layers if layer.cam is not None and layer.cam.corr is not None]
        return min(values, default=None)

    def _forward(self) -> list[TensorDiff]:
        return [self.model_input, self.logits, *(t for layer in self.layers for t in layer.tensors if t.checked)]

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "output": self.output,
            "change": _num(self.change),
            "target_changed": self.target_changed,
            "lowest_cam_corr": _num(self.lowest_cam_corr),
            "first_change": None
            if self.first_change is None
            else {"layer": self.first_change.layer, "figure": self.first_change.figure},
            "target": {"before": self.target[0], "after": self.target[1]},
            "probability_change": _num(self.probability_change),
            "top5": {"before": list(self.top5[0]), "after": list(self.top5[1])},
            "model_input": self.model_input.to_json(),
            "logits": self.logits.to_json(),
            "layers": [layer.to_json() for layer in self.layers],
            "layers_only_in_base": list(self.only_in_base),
            "layers_only_in_new": list(self.only_in_new),
            "notes": list(self.notes),
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class RunDiff:
    """Two runs compared. ``images`` come most changed first: those whose target changed,
    then by ``ImageDiff.change``, then by their lowest CAM correlation.

    Attributes:
        base, new: who wrote each run, with what (``RunFolder.describe``).
        new_path: the new run's folder (where the diff pictures go).
        checked: whether drift is a check (``--fail-on drift``): findings then fail the run.
        only_in_base, only_in_new: images finished by one run only.
        notes: what does not match, or could not be compared, one line each.
    """

    base: dict
    new: dict
    new_path: Path
    tolerances: Tolerances
    checked: bool
    images: tuple[ImageDiff, ...]
    only_in_base: tuple[str, ...] = ()
    only_in_new: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __getitem__(self, output: str) -> ImageDiff:
        return next(image for image in self.images if output in (image.output, image.image))

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Every compared image's drift, and every image the baseline finished that this run
        did not: a run that lost images has changed too."""
        missing = tuple(
            Finding("drift", str(image), None, "finished in the baseline, not in this run", "image.missing")
            for image in self.only_in_base
        )
        return tuple(f for image in self.images for f in image.findings) + missing

    def to_json(self) -> dict:
        from hookviz import __version__

        layers = sorted({layer.name for image in self.images for layer in image.layers})
        return finite_json(
            {
                "hookviz": __version__,
                "format": FORMAT,
                "base": self.base,
                "new": self.new,
                "tolerances": self.tolerances.to_json(),
                "ranking": "images whose target changed first, then by the largest relative change "
                "(max |after - before| / max |before|) of any compared forward tensor",
                "compared": {"images": len(self.images), "layers": layers},
                "only_in_base": {"images": list(self.only_in_base), "layers": layers_only(self.images, "base")},
                "only_in_new": {"images": list(self.only_in_new), "layers": layers_only(self.images, "new")},
                "notes": list(self.notes),
                "drift": {"checked": self.checked, "passed": not self.findings, "findings": [f.to_json() for f in self.findings]},
                "images": [image.to_json() for image in self.images],
            }
        )


def layers_only(images, side: str) -> list[str]:
    return sorted({name for image in images for name in (image.only_in_base if side == "base" else image.only_in_new)})
