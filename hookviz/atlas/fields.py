"""Receptive fields, computed from the model: which input pixels a unit of a layer sees.

Once per layer: random inputs go through the model, the layer's output at its grid's centre
(every channel) is differentiated with respect to the input, and the support of that
gradient (where it is not zero, over a few random inputs) is the centre unit's receptive
field. The grid's stride (input size over grid size) moves it to any other unit; the box is
then cut to the input. Nothing is assumed of the layers (kernel sizes, padding, dilation,
attention): what the gradient reaches is what the unit sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hookviz.hooks import HookSet

__all__ = ["ReceptiveField", "receptive_field"]

_PROBES = 4  # random inputs whose gradients' supports are joined (a ReLU may hide a part in one)


@dataclass(frozen=True)
class ReceptiveField:
    """Per axis of the grid ((H, W), or (T, H, W) for a clip), the centre unit's receptive
    field relative to its place in the input (``low``, ``high``: its first and past-last input
    index minus the unit's index times the stride), as measured at an input of ``size``."""

    grid: tuple[int, ...]
    size: tuple[int, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    def span(self, position: tuple[int, ...], grid: tuple[int, ...], size: tuple[int, ...]) -> list[tuple[int, int]]:
        """The input span ``[start, stop)`` per axis that the unit at ``position`` of a map of
        ``grid`` over an input of ``size`` sees, cut to the input."""
        spans = []
        for index, cells, side, low, high in zip(position, grid, size, self.low, self.high):
            anchor = index * side / cells
            start, stop = int(np.floor(anchor + low)), int(np.ceil(anchor + high))
            start = min(max(0, start), side - 1)
            spans.append((start, min(side, max(stop, start + 1))))
        return spans

    def _stride(self, axis: int) -> float:
        return self.size[axis] / self.grid[axis]

    def to_json(self) -> dict:
        """The centre unit's field in input pixels, and the stride, per axis."""
        return {
            "size": [round(h - lo, 3) for lo, h in zip(self.low, self.high)],
            "stride": [round(self._stride(axis), 3) for axis in range(len(self.grid))],
        }


def receptive_field(module, spec, inputs: tuple, main: int = 0) -> ReceptiveField:
    """The receptive field of layer ``spec`` (a ``LayerSpec``) of ``module``, measured on random
    inputs shaped as ``inputs`` (the model's arguments for one sample, a batch of one; the
    ``main``-th is the one whose pixels count). The caller's random stream is left as it was."""
    import torch

    generator = torch.Generator().manual_seed(0)
    probe = inputs[main]
    x = torch.randn((_PROBES, *probe.shape[1:]), generator=generator, dtype=probe.dtype).to(probe.device)
    x.requires_grad_(True)
    others = [t.expand(_PROBES, *t.shape[1:]) if torch.is_tensor(t) else t for t in inputs]
    others[main] = x
    with torch.enable_grad():
        output = _layer_output(module, spec, others)
        grid = tuple(output.shape[2:])
        centre = tuple(side // 2 for side in grid)
        objective = output[(slice(None), slice(None)) + centre].sum()
        (grad,) = torch.autograd.grad(objective, x)
    support = grad.detach().abs().sum(dim=(0, 1)).cpu().numpy() > 0  # over the probes and the input's channels
    size = tuple(x.shape[2:])
    low, high = [], []
    for axis, (cells, side) in enumerate(zip(grid, size)):
        others_axes = tuple(a for a in range(len(size)) if a != axis)
        hit = np.flatnonzero(support.any(axis=others_axes)) if others_axes else np.flatnonzero(support)
        anchor = centre[axis] * side / cells
        first, last = (hit[0], hit[-1] + 1) if hit.size else (anchor, anchor + side / cells)
        low.append(float(first - anchor))
        high.append(float(last - anchor))
    return ReceptiveField(grid, size, tuple(low), tuple(high))


def _layer_output(module, spec, args: list):
    """The layer's output (the call ``spec`` names) in a forward pass of ``module`` on ``args``."""
    import torch

    seen: list = []

    def keep(_module, _args, output):
        tensor = output if torch.is_tensor(output) else next(t for t in output if torch.is_tensor(t))
        seen.append(tensor)

    layer = dict(module.named_modules())[spec.path]
    with HookSet() as hooks:
        hooks.add(layer.register_forward_hook(keep))
        module(*args)
    return seen[spec.call or 0]
