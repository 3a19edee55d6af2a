"""Checks for CI smoke runs (``--fail-on``): each looks at one explanation and names
the layers at fault. Looked up by name in a registry filled by ``register_check``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .registry import Registry

__all__ = ["CHECKS", "Finding", "register_check", "parse_checks", "run_checks"]


@dataclass(frozen=True)
class Finding:
    check: str
    image: str
    layer: str | None
    detail: str

    def to_json(self) -> dict:
        return {"check": self.check, "image": self.image, "layer": self.layer, "detail": self.detail}


CHECKS: Registry = Registry("fail_on", "check")
register_check = CHECKS.register


def parse_checks(text: str | None) -> tuple[str, ...]:
    """``nonfinite,dead`` -> ("nonfinite", "dead"). Raises UsageError for an unknown name."""
    if not text:
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    for name in names:
        CHECKS.get(name)
    return names


@register_check("nonfinite")
def _nonfinite(explanation, _fraction: float):
    found = []
    bad = int(np.size(explanation.logits) - np.isfinite(explanation.logits).sum())
    if bad:
        found.append((None, f"{bad} non-finite logits"))
    for layer in explanation.layers:
        for key, stats in layer.stats.items():
            if stats and stats["nonfinite"]:
                total = int(np.prod(layer.shapes[key]))
                found.append((layer.name, f"{key} has {stats['nonfinite']} NaN/Inf values of {total}"))
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
        for layer, detail in CHECKS.get(name)(explanation, dead_fraction):
            findings.append(Finding(name, image, layer, detail))
    return findings
