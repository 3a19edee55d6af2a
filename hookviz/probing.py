"""Probing: the extra passes a CAM method may ask the pass for, beyond re-scoring altered
inputs (``tasks.base.Rescoring``): re-scoring with a layer's output replaced (Ablation-CAM).

Each runs the caller's model as the pass left it (eval mode, parameters frozen) and puts
back what it changes: the hooks it adds are removed when it returns, on error too, and
nothing of the model is replaced or copied.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .featuremaps import Layout, reshape
from .hooks import HookSet
from .recording import _first_float, _replace_first

__all__ = ["LayerRescoring"]


@dataclass(frozen=True)
class LayerRescoring:
    """``score_layer(activations, images)``: the target's score of image ``images[row]``'s
    input with the layer's output replaced by ``activations[row]`` (channels first).

    Attributes:
        rescoring: the key's ``Rescoring`` (the model, the task, the target's scorer).
        inputs: the batch's inputs (N, C, H, W), on the model's device.
        layer: the layer's module, and ``call``, which of its calls in a forward pass.
        layout: how the layer's output lies (the map ``activations`` are read back into).
    """

    rescoring: Any
    inputs: Any
    layer: Any
    call: int
    layout: Layout

    def __call__(self, activations, images):
        import torch

        rows = torch.as_tensor(images, dtype=torch.long).flatten().cpu()
        if len(rows) != len(activations):
            raise ValueError(f"score_layer: {len(activations)} maps but {len(rows)} image indices")
        scores = []
        chunk = self.rescoring.chunk
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            with _replaced_output(self.layer, self.call, self.layout, activations[start : start + chunk]):
                scores.append(self.rescoring(self.inputs[part.to(self.inputs.device)], part))
        return torch.cat(scores) if scores else torch.zeros(0)


@contextlib.contextmanager
def _replaced_output(layer, call: int, layout: Layout, replacement) -> Iterator[None]:
    """For one forward pass, the ``call``-th output of ``layer`` becomes ``replacement``
    (channels first) laid out as the layer lays its output, in a copy; the rest of the
    output (a class token, a tuple's other items) stays as the layer made it."""
    seen = [0]

    def hook(_module, _args, output):
        index = seen[0]
        seen[0] += 1
        tensor = _first_float(output) if index == call else None
        if tensor is None:
            return None
        copy = tensor.clone()
        view = reshape(copy, layout)
        if view is None or tuple(view.shape) != tuple(replacement.shape) or not _shares(view, copy):
            raise ValueError(f"score_layer: maps of shape {tuple(replacement.shape)} do not fit this layer's output")
        view.copy_(replacement)
        return _replace_first(output, tensor, copy)

    with HookSet() as hooks:
        hooks.add(layer.register_forward_hook(hook))
        yield


def _shares(view, tensor) -> bool:
    """Whether writing into ``view`` writes into ``tensor`` (a layout's reading is a view)."""
    return view.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
