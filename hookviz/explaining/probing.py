"""Probing: the extra passes a CAM method may ask the pass for, beyond re-scoring altered
inputs (``tasks.base.Rescoring``): re-scoring with a layer's output replaced (Ablation-CAM),
and the gradient of the target's score with respect to the input, plain or guided (guided
backprop, integrated gradients).

Each runs the caller's model as the pass left it (eval mode, parameters frozen) and puts
back what it changes: the hooks it adds are removed when it returns, on error too, and
nothing of the model is replaced or copied.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hookviz.anatomy.featuremaps import Layout, reshape
from hookviz.errors import UsageError, arg
from hookviz.explaining.recording import _first_float, _replace_first
from hookviz.hooks import HookSet

__all__ = ["LayerRescoring", "InputGradients", "guided_relus", "relu_modules", "check_relus"]


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


@dataclass(frozen=True)
class InputGradients:
    """``input_gradient(batch, images=None, guided=False)``: d(row's target score)/d(row).

    Attributes:
        task, module, device, options, scorer, chunk, task_options: as ``tasks.base.Rescoring``'s.
    """

    task: Any
    module: Any
    device: str
    options: Any
    scorer: Any
    chunk: int
    task_options: Any = None

    def __call__(self, batch, images=None, guided: bool = False):
        import torch

        rows = torch.arange(len(batch)) if images is None else torch.as_tensor(images, dtype=torch.long).flatten().cpu()
        if len(rows) != len(batch):
            raise ValueError(f"input_gradient: {len(batch)} inputs but {len(rows)} image indices")
        gradients = []
        guide = guided_relus(self.module) if guided else contextlib.nullcontext()
        with torch.inference_mode(False), torch.enable_grad(), guide:
            for start in range(0, len(batch), self.chunk):
                part = batch[start : start + self.chunk].detach().clone().requires_grad_(True)
                output = self.task.forward(self.module, list(part), self.device, self.options, self.task_options)
                scores = self.scorer(output, rows[start : start + self.chunk])
                if scores.requires_grad:
                    (gradient,) = torch.autograd.grad(scores.sum(), part, allow_unused=True)
                else:  # nothing to explain in these images: no graph reaches the input
                    gradient = None
                gradients.append(torch.zeros_like(part) if gradient is None else gradient.detach())
        return torch.cat(gradients).float() if gradients else torch.zeros(0)


def relu_modules(model) -> list:
    """The ``nn.ReLU`` modules of ``model`` (guided backprop guides these)."""
    import torch

    return [module for module in model.modules() if isinstance(module, torch.nn.ReLU)]


def check_relus(model, method: str) -> None:
    """Raise UsageError, naming ``method``, when ``model`` has no ``nn.ReLU`` to guide."""
    if not relu_modules(model):
        raise UsageError(
            f"{arg('cam', method)}: {type(model).__name__} has no nn.ReLU module (its activations are another "
            "function, or F.relu), so guided backprop has nothing to guide; choose integrated-gradients"
        )


@contextlib.contextmanager
def guided_relus(model) -> Iterator[None]:
    """Within the block, every ``nn.ReLU`` of ``model`` passes back only positive gradients
    (guided backprop: d/dx = ReLU(g) where x > 0), through forward hooks removed after it.
    A ``F.relu`` in the model's own code is not guided."""
    check_relus(model, "guided-backprop")  # the method's own check refused such a model already
    with HookSet() as hooks:
        for module in relu_modules(model):
            hooks.add(module.register_forward_hook(_guide))
        yield


def _guide(_module, _args, output):
    return _guided_gradient().apply(output)


@functools.cache
def _guided_gradient():
    import torch

    class GuidedGradient(torch.autograd.Function):
        """The identity on a ReLU's output, whose backward lets only positive gradients
        through where the output is positive (the ReLU's own backward keeps that mask too)."""

        @staticmethod
        def forward(ctx, output):
            ctx.save_for_backward(output > 0)  # a mask, not the output: a later in-place op may change it
            return output.clone()

        @staticmethod
        def backward(ctx, grad):
            (positive,) = ctx.saved_tensors
            return grad.clamp(min=0) * positive

    return GuidedGradient
