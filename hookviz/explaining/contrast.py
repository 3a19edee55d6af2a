"""Contrast gradients: each recorded layer's gradient of a task's contrast score (Finer-CAM's
objective, ``hookviz.tasks.base.Contrast``), from the main pass's own graph.

The pass keeps its graph only when a method asks for them (``Method.needs_contrast``), so the
main pass costs no more for any other method; each contrast score asked is one more backward
pass of the batch, down to the earliest recorded layer, whatever the number of layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ContrastGradients", "contrast_sources", "layer_contrast"]


@dataclass
class ContrastGradients:
    """``gradients(spec)``: per recorded call, d(the task's contrast score of CAM ``key``'s
    target)/d(the call's output), or ``None`` for every call where the model has fewer than 2
    classes. Each ``spec`` is back-propagated once and kept for the other layers."""

    recording: Any
    task: Any
    output: Any
    plan: Any
    key: str
    options: Any
    found: dict = field(default_factory=dict)

    def __call__(self, spec) -> list | None:
        if spec not in self.found:
            score = self.task.contrast(self.output, self.plan, self.key, self.options, spec)
            pairs = None if score is None else self.recording.gradients(score, inputs=False, retain_graph=True)
            self.found[spec] = None if pairs is None else [grad_output for _, grad_output in pairs]
        return self.found[spec]


def contrast_sources(recording, explainer, plan, output) -> dict:
    """Per CAM key of the plan, its ``ContrastGradients`` (nothing computed until a method asks)."""
    return {key: ContrastGradients(recording, explainer.task, output, plan, key, explainer.target) for key, _ in plan.cams}


def layer_contrast(gradients: ContrastGradients, position: int, layout):
    """``MethodContext.contrast_gradient`` at recorded call ``position``, read in ``layout`` as
    the call's activations; it raises ``NoMap`` where the score does not reach the call."""
    from hookviz.anatomy.featuremaps import reshape
    from hookviz.methods import NoMap

    def contrast_gradient(spec):
        found = gradients(spec)
        if found is None:
            return None
        grads = reshape(found[position], layout)
        if grads is None:
            raise NoMap("the contrast score does not depend on this layer")
        return grads.detach().float()

    return contrast_gradient
