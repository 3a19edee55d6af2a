"""Checks for CI smoke runs (``--fail-on``): each looks at one explanation and names
the layers at fault. Looked up by name in a registry filled by ``register_check``.

``drift`` is the one check made once per run instead of per image: it compares the run
with a baseline (``--baseline``) when the run ends (``hookviz.compare.diffing``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hookviz.registry import Registry

__all__ = ["CHECKS", "Finding", "register_check", "parse_checks", "run_checks", "nonfinite_maps", "nonfinite_notes"]


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


#: Checks made once per run against a baseline, not on each explanation.
BASELINE_CHECKS = ("drift",)
CHECKS: Registry = Registry("fail_on", "check", extra_choices=BASELINE_CHECKS)
register_check = CHECKS.register


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
def _nonfinite(explanation, _fraction: float):
    found: list[tuple[str | None, str]] = []
    bad = int(np.size(explanation.logits) - np.isfinite(explanation.logits).sum())
    if bad:
        found.append((None, f"{bad} non-finite logits"))
    for layer in explanation.layers:
        for key, stats in layer.stats.items():
            if stats and stats["nonfinite"]:
                total = int(np.prod(layer.shapes[key]))
                found.append((layer.name, f"{key} has {stats['nonfinite']} NaN/Inf values of {total}"))
    for layer, method, bad, total in nonfinite_maps(explanation):
        found.append((layer, f"{method} map has {bad} NaN/Inf values of {total}"))
    return found


@register_check("dead")
def _dead(explanation, fraction: float):
    found = []
    for layer in explanation.layers:
        stats = layer.stats.get("output")
        if stats is not None and stats["zero_fraction"] >= fraction:
            found.append((layer.name, f"output is {stats['zero_fraction']:.1%} zeros (threshold {fraction:.0%})"))
    return found


@register_check("zero-grad")
def _zero_grad(explanation, _fraction: float):
    if explanation.target is None:  # nothing to explain (no detection above the threshold): no gradient is due
        return []
    found = []
    for layer in explanation.layers:
        stats = layer.stats.get("grad_output")
        if stats is None:
            found.append((layer.name, "no gradient reaches this layer's output"))
        elif stats["zero_fraction"] == 1.0:
            found.append((layer.name, "grad_output is all zeros"))
    return found


def run_checks(explanation, names: Sequence[str], dead_fraction: float = 1.0) -> list[Finding]:
    image = explanation.image.source.label
    findings = []
    for name in names:
        if name in BASELINE_CHECKS:
            continue  # made when the run ends, against its baseline
        for layer, detail in CHECKS.get(name)(explanation, dead_fraction):
            findings.append(Finding(name, image, layer, detail))
    return findings
