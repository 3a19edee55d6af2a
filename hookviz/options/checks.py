"""The ``--fail-on`` checks of a CI smoke run, the baseline it is compared with (``CheckOptions``), and how far
a compared figure may move before it counts as drift (``Tolerances``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hookviz.errors import UsageError, arg
from hookviz.options.base import ask, set_field

__all__ = ["Tolerances", "CheckOptions"]


@dataclass(frozen=True)
class Tolerances:
    """How far a run may move from its baseline before ``drift`` reports it.

    A forward tensor (the model's input, a layer's input or output, the logits) drifts
    where ``max |after - before| > atol + rtol * max |before|``, over the full tensors when
    both runs saved them, and over the fingerprints' maps and channel means and the
    statistics otherwise. A CAM drifts where its correlation with the baseline's falls
    below ``min_cam_corr``.

    Measured (``bench/drift.py``, README "Regression checks"): another thread count, batch
    size or CPU (AVX2 instead of AVX-512) moved forward tensors by at most 3.2e-6 of their
    largest value (6.4e-6 in the fingerprints) and CAMs to a correlation of 0.999998;
    scaling one convolution's weights by 1 + 1e-3 moved every forward tensor after it by at
    least 4e-4 (2.2e-4 in the fingerprints) and none before it. ``rtol`` sits 8x above that
    noise and 4x below that change. CAMs come from gradients, which the same change reaches
    at every layer before it too: it took some early, sparse CAMs to a correlation of
    0.984. ``min_cam_corr`` stays well below that, so it flags a CAM that looks different,
    not a small change; the forward tensors say where a change happened.
    """

    rtol: float = 5e-5
    atol: float = 1e-7
    min_cam_corr: float = 0.9

    def __post_init__(self):
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < math.inf:
                raise UsageError(f"{arg(name, value)}: must be a number, 0 or more")
            set_field(self, name, float(value))
        value = self.min_cam_corr
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 <= value <= 1.0:
            raise UsageError(f"{arg('min_cam_corr', value)}: a correlation, from -1 to 1")
        set_field(self, "min_cam_corr", float(value))

    def to_json(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "min_cam_corr": self.min_cam_corr}


@dataclass(frozen=True)
class CheckOptions:
    """The checks that make a run exit 3 (``--fail-on``), their threshold, and the baseline.

    Attributes:
        fail_on: names from ``hookviz.explaining.checks.CHECKS`` (``nonfinite``, ``dead``, ``zero-grad``),
            or ``drift`` (differs from ``baseline`` beyond ``tolerances``).
        dead_fraction: ``dead`` means at least this fraction of an output is zero.
        baseline: an earlier run's output folder: the run ends by comparing itself with it
            (``OUT/diff.json``), whether or not ``drift`` is a check.
        tolerances: what counts as drift.
    """

    fail_on: tuple[str, ...] = ()
    dead_fraction: float = 1.0
    baseline: Path | None = None
    tolerances: Tolerances = field(default_factory=Tolerances)

    def __post_init__(self):
        set_field(self, "fail_on", ask("checks", self.fail_on))
        fraction = self.dead_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 1.0:
            raise UsageError(f"{arg('dead_fraction', fraction)}: must be above 0 and at most 1 (1: all zeros)")
        if self.baseline is not None:
            if not str(self.baseline).strip():
                raise UsageError(f"{arg('baseline', repr(str(self.baseline)))}: give the output folder of an earlier run")
            set_field(self, "baseline", Path(self.baseline))
        elif "drift" in self.fail_on:
            raise UsageError(f"{arg('fail_on', 'drift')} compares the run with a baseline: add {arg('baseline', 'BASE')}")
        if not isinstance(self.tolerances, Tolerances):
            raise UsageError(f"{arg('tolerances', self.tolerances)}: give a Tolerances(rtol=..., atol=..., min_cam_corr=...)")
