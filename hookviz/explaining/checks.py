"""Checks for CI smoke runs (``--fail-on``): each looks at one image and names the layers at
fault. Looked up by name in a registry filled by ``register_check``.

A check reads an ``ImageFacts``: the figures it judges, taken from an explanation as it is
made or from the ``report.json`` an earlier run wrote (an image ``--skip-existing`` skips is
judged from it, so a resumed CI run fails where a fresh one does).

``drift`` is the one check made once per run instead of per image: it compares the run
with a baseline (``--baseline``) when the run ends (``hookviz.compare.diffing``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hookviz.errors import UsageError, arg
from hookviz.options.base import answers
from hookviz.registry import Registry

__all__ = [
    "CHECKS",
    "Finding",
    "ImageFacts",
    "LayerFacts",
    "register_check",
    "checked_fail_on",
    "parse_checks",
    "run_checks",
    "report_checks",
    "judge",
    "nonfinite_maps",
    "nonfinite_notes",
]


@dataclass(frozen=True)
class Finding:
    """What a check found: in which image, which layer (``None``: the whole model) and,
    for ``drift``, which compared figure (``output.map``, ``cam.corr``)."""

    check: str
    image: str
    layer: str | None
    detail: str
    figure: str | None = None

    def to_json(self) -> dict:
        return {"check": self.check, "image": self.image, "layer": self.layer, "figure": self.figure, "detail": self.detail}


@dataclass(frozen=True)
class LayerFacts:
    """One layer as the checks see it: per tensor (``output``, ``grad_output``, ...) its
    statistics (``summaries.tensor_stats``, ``None``: not recorded) and shape."""

    name: str
    stats: dict
    shapes: dict


@dataclass(frozen=True)
class ImageFacts:
    """What the checks judge of one image (``image``: how findings name it): its NaN/Inf
    logits, whether it had a target to explain, its layers, and each map of the target that
    is not finite (``nonfinite_maps``' tuples)."""

    image: str
    logits_nonfinite: int
    has_target: bool
    layers: tuple[LayerFacts, ...]
    maps: tuple[tuple[str, str, int, int], ...] = ()

    @classmethod
    def of(cls, explanation) -> ImageFacts:
        """The facts of an explanation just made."""
        return cls(
            explanation.image.source.label,
            int(np.size(explanation.logits) - np.isfinite(explanation.logits).sum()),
            explanation.target is not None,
            tuple(LayerFacts(layer.name, dict(layer.stats), dict(layer.shapes)) for layer in explanation.layers),
            tuple(nonfinite_maps(explanation)),
        )

    @classmethod
    def of_report(cls, report, image: str) -> ImageFacts:
        """The facts an earlier run's ``report.json`` (a ``records.Report``) kept of ``image``."""
        maps = [(layer.name, method, found) for layer in report.layers for method, found in (layer.cams or {}).items()]
        maps += [("input", method, found) for method, found in report.pixel_maps.items()]
        bad_maps = tuple(
            (layer, method, int(found.stats.get("nonfinite") or 0), int(np.prod(found.shape)))
            for layer, method, found in maps
            if found.shape is not None and found.stats.get("nonfinite")
        )
        return cls(
            image,
            report.logits_nonfinite or 0,
            report.target is not None,
            tuple(LayerFacts(layer.name, dict(layer.stats), dict(layer.shapes)) for layer in report.layers),
            bad_maps,
        )


#: Checks made once per run against a baseline, not on each explanation.
BASELINE_CHECKS = ("drift",)
CHECKS: Registry = Registry("fail_on", "check", extra_choices=BASELINE_CHECKS)
register_check = CHECKS.register


@answers("checks")
def checked_fail_on(given) -> tuple[str, ...]:
    """``fail_on``'s names (text or a sequence), parsed and checked (``CheckOptions``).

    Raises:
        UsageError: an unknown name, or a value that names none.
    """
    names = parse_checks(given)
    if given and not names:
        raise UsageError(f"{arg('fail_on', given)}: name a check: {', '.join([*CHECKS.names(), *BASELINE_CHECKS])}")
    return names


def parse_checks(text) -> tuple[str, ...]:
    """``nonfinite,dead`` (or a sequence of names) -> ("nonfinite", "dead").

    Raises:
        UsageError: an unknown name.
    """
    if not text:
        return ()
    parts = text.split(",") if isinstance(text, str) else text
    names = tuple(dict.fromkeys(n.strip() for n in parts if n and n.strip()))
    for name in names:
        if name not in BASELINE_CHECKS:
            CHECKS.get(name)
    return names


def nonfinite_maps(explanation) -> list[tuple[str, str, int, int]]:
    """``(layer, method, NaN/Inf values, values)`` of each map of the target that holds a value
    that is not finite: each layer method's (``layer.cams``), then each input method's (layer
    ``input``)."""
    found = []
    maps = [(layer.name, method, cam) for layer in explanation.layers for method, cam in layer.cams.items()]
    maps += [("input", method, pixel.map) for method, pixel in (explanation.pixel_maps or {}).items()]
    for layer, method, values in maps:
        if values is not None:
            bad = int(values.size - np.isfinite(values).sum())
            if bad:
                found.append((layer, method, bad, int(values.size)))
    return found


def nonfinite_notes(explanation) -> tuple[str, ...]:
    """One note per map of ``explanation`` that is not finite, naming the image, layer and
    method: such a map is otherwise only seen as holes in its picture."""
    image = explanation.image.source.label
    return tuple(
        f"{image}: {layer} ({method}): the map has {bad} NaN/Inf values of {total}, not finite: drawn with holes "
        f"and left out of --faithfulness and --sanity; --fail-on nonfinite fails the run on it"
        for layer, method, bad, total in nonfinite_maps(explanation)
    )


@register_check("nonfinite")
def _nonfinite(facts: ImageFacts, _fraction: float):
    found: list[tuple[str | None, str]] = []
    if facts.logits_nonfinite:
        found.append((None, f"{facts.logits_nonfinite} non-finite logits"))
    for layer in facts.layers:
        for key, stats in layer.stats.items():
            if stats and stats.get("nonfinite"):
                total = int(np.prod(layer.shapes[key]))
                found.append((layer.name, f"{key} has {stats['nonfinite']} NaN/Inf values of {total}"))
    for layer_name, method, bad, total in facts.maps:
        found.append((layer_name, f"{method} map has {bad} NaN/Inf values of {total}"))
    return found


@register_check("dead")
def _dead(facts: ImageFacts, fraction: float):
    found = []
    for layer in facts.layers:
        stats = layer.stats.get("output")
        if stats is not None and stats.get("zero_fraction", 0.0) >= fraction:
            found.append((layer.name, f"output is {stats['zero_fraction']:.1%} zeros (threshold {fraction:.0%})"))
    return found


@register_check("zero-grad")
def _zero_grad(facts: ImageFacts, _fraction: float):
    if not facts.has_target:  # nothing to explain (no detection above the threshold): no gradient is due
        return []
    found = []
    for layer in facts.layers:
        stats = layer.stats.get("grad_output")
        if stats is None:
            found.append((layer.name, "no gradient reaches this layer's output"))
        elif stats.get("zero_fraction") == 1.0:
            found.append((layer.name, "grad_output is all zeros"))
    return found


def run_checks(explanation, names: Sequence[str], dead_fraction: float = 1.0) -> list[Finding]:
    """The findings of the checks ``names`` on an explanation just made."""
    return judge(ImageFacts.of(explanation), names, dead_fraction)


def report_checks(report, image: str, names: Sequence[str], dead_fraction: float = 1.0) -> list[Finding]:
    """The findings of the checks ``names`` on ``image`` as an earlier run's report (a
    ``records.Report``) describes it: an image ``--skip-existing`` skipped."""
    return judge(ImageFacts.of_report(report, image), names, dead_fraction)


def judge(facts: ImageFacts, names: Sequence[str], dead_fraction: float = 1.0) -> list[Finding]:
    """The findings of the checks ``names`` on one image's facts."""
    findings = []
    for name in names:
        if name in BASELINE_CHECKS:
            continue  # made when the run ends, against its baseline
        for layer, detail in CHECKS.get(name)(facts, dead_fraction):
            findings.append(Finding(name, facts.image, layer, detail))
    return findings
