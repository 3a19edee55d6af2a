"""The extra passes (``methods.base.ExtraPasses``) a CAM method may ask the pass for, beyond re-scoring altered
inputs (``tasks.base.Rescoring``): re-scoring with a layer's output replaced (Ablation-CAM),
and the gradient of the target's score with respect to the input, plain or guided (guided
backprop, integrated gradients), and Hessian-vector products of that score at a layer (ShapleyCAM).

Each runs the caller's model as the pass left it (eval mode, parameters frozen) and puts
back what it changes: the hooks it adds are removed when it returns, on error too, and
nothing of the model is replaced or copied.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from hookviz.anatomy.featuremaps import Layout, reshape
from hookviz.errors import HookvizError
from hookviz.explaining.recording import _first_float, _replace_first
from hookviz.hooks import HookSet
from hookviz.input_format import FORMAT_ERRORS, channels_last_input, formats_for
from hookviz.methods.guided_backprop import check_relus, relu_modules
from hookviz.workload import passed

__all__ = ["LayerRescoring", "InputGradients", "LayerHessian", "LayerGradients", "guided_relus"]


@dataclass(frozen=True)
class LayerRescoring:
    """``score_layer(activations, images)``: the target's score of image ``images[row]``'s
    input with the layer's output replaced by ``activations[row]`` (channels first).

    Every row of one image shares that image's input, so what the model computes before the
    layer is the same for all of them: it is computed once, from the image alone, and the
    layer's output becomes all the image's rows (the *tail* pass; an Ablation-CAM of a late
    layer then costs a fraction of a forward pass per channel, not a whole one). That holds
    for a model whose later code treats each row on its own and broadcasts what it kept from
    before the layer; it is checked for each image (the layer's own output, twice, must
    score as the whole model scores the image), and an image whose check fails (a
    detector's per-image lists, a reshape by the input's batch size) gets whole passes.

    Attributes:
        rescoring: the key's ``Rescoring`` (the model, the task, the target's scorer).
        inputs: the batch's main input (N, C, *spatial), on the model's device.
        layer: the layer's module, and ``call``, which of its calls in a forward pass.
        layout: how the layer's output lies (the map ``activations`` are read back into).
    """

    rescoring: Any
    inputs: Any
    layer: Any
    call: int
    layout: Layout
    tails: dict = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, activations, images):
        import torch

        rows = torch.as_tensor(images, dtype=torch.long).flatten().cpu()
        if len(rows) != len(activations):
            raise ValueError(f"score_layer: {len(activations)} maps but {len(rows)} image indices")
        scores = torch.zeros(len(rows))
        for image in rows.unique().tolist():
            where = (rows == image).nonzero()[:, 0]
            scores[where] = self._scored(activations[where.to(activations.device)], image)
        return scores

    def _scored(self, replacement, image: int):
        """The scores of one image's input with the layer's output replaced by each row."""
        import torch

        count = len(replacement)
        tail = self._tail_works(image)
        chunk = max(count, 1) if tail else self.rescoring.chunk  # a tail pass takes every row it is given
        scores = []
        for start in range(0, count, chunk):
            part = replacement[start : start + chunk]
            rows = torch.full((len(part),), image, dtype=torch.long)
            inputs = self.inputs[[image] * (1 if tail else len(part))]
            with _replaced_output(self.layer, self.call, self.layout, part, rows=len(part)):
                scores.append(self.rescoring.scored(inputs, rows).cpu())
        return torch.cat(scores)

    def _tail_works(self, image: int) -> bool:
        """Whether replacing the layer's output of ``image``'s lone input by several rows
        gives each row's score as whole passes would (checked once per image)."""
        import torch

        if image not in self.tails:
            rows = torch.full((2,), image, dtype=torch.long)
            whole = self.rescoring.scored(self.inputs[[image]], rows[:1]).cpu()
            try:
                with _replaced_output(self.layer, self.call, self.layout, None, rows=2):
                    tail = self.rescoring.scored(self.inputs[[image]], rows).cpu()
                works = tail.shape == (2,) and bool(torch.allclose(tail, whole.expand(2), rtol=1e-4, atol=1e-5))
            except Exception:  # the model's later code needs the input's batch size: whole passes
                works = False
            self.tails[image] = works
        return self.tails[image]


@contextlib.contextmanager
def _replaced_output(layer, call: int, layout: Layout, replacement, rows: int) -> Iterator[None]:
    """For one forward pass, the ``call``-th output of ``layer`` becomes ``rows`` rows, each
    the layer's output of the pass's first input, laid out as the layer lays its output,
    with its map (channels first) replaced by ``replacement``'s row (kept with ``None``);
    the rest of the output (a class token, a tuple's other items) stays as the layer made it.
    A pass of ``rows`` inputs (whole passes) gets each input's own output instead."""

    def replaced(tensor):
        copy = tensor.clone() if len(tensor) == rows else tensor[:1].expand(rows, *tensor.shape[1:]).clone()
        if replacement is not None:
            view = reshape(copy, layout)
            if view is None or tuple(view.shape) != tuple(replacement.shape) or not _shares(view, copy):
                raise ValueError(f"score_layer: maps of shape {tuple(replacement.shape)} do not fit this layer's output")
            view.copy_(replacement)
        return copy

    with _on_call(layer, call, replaced):
        yield


@contextlib.contextmanager
def _on_call(layer, call: int, change: Callable[[Any], Any]) -> Iterator[None]:
    """Within the block, the ``call``-th output of ``layer`` (counted from the block's start)
    has its first float tensor handed to ``change``, which returns the tensor to stand in its
    place (the rest of the output stays as the layer made it) or ``None`` to leave the output
    as it is; an output with no float tensor is left too. The hook is removed when the block
    ends, on error too."""
    seen = [0]

    def hook(_module, _args, output):
        index = seen[0]
        seen[0] += 1
        tensor = _first_float(output) if index == call else None
        copy = None if tensor is None else change(tensor)
        return None if copy is None else _replace_first(output, tensor, copy)

    with HookSet() as hooks:
        hooks.add(layer.register_forward_hook(hook))
        yield


def _shares(view, tensor) -> bool:
    """Whether writing into ``view`` writes into ``tensor`` (a layout's reading is a view)."""
    return view.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()


@dataclass(frozen=True)
class InputGradients:
    """``input_gradient(batch, images=None, guided=False, within=None, from_scores=False, with_scores=False)``:
    d(row's target score)/d(row).

    ``within(model)``, a context manager, is entered around the passes and left after them
    (relevance propagation's rules, which hook or patch the model for their backward pass
    and put it back). With ``from_scores=True`` each row's backward pass starts at the row's
    score instead of 1 (zennit's relevance starts as the target's score); with
    ``with_scores=True`` the call returns ``(gradients, scores)``, the scores (M,) float32 as
    the pass computed them.

    Where ``input_format.channels_last_gradients`` says so (a model with ``BatchNorm2d``) the
    model's 4-D input is made channels-last as its forward begins (a hook removed when the
    passes end), 10% faster on a CPU; the gradients come back as the rows came. A model that
    raises then (a ``RuntimeError``, ``ValueError`` or ``AssertionError``: a ``.view`` of its
    input, a check of its strides) is run again as the input came; where that runs, it is not
    given one again in this process. An error it raises either way is its own.

    Its passes take ``chunk`` rows each: the rows a pass with a graph may hold within the
    memory budget (``hookviz.budget``); each feeds the work it is part of (``hookviz.workload``).

    Attributes:
        samples, scorer, chunk: as ``tasks.base.Rescoring``'s (the rows replace the main input
            of the samples they stand for).
    """

    samples: Any
    scorer: Any
    chunk: int

    @property
    def main(self) -> str:
        """The main input's name (``methods.base.InputGradient``)."""
        return self.samples.main

    def __call__(
        self, batch, images=None, guided: bool = False, within=None, from_scores: bool = False, with_scores: bool = False
    ):
        import torch

        rows = torch.arange(len(batch)) if images is None else torch.as_tensor(images, dtype=torch.long).flatten().cpu()
        if len(rows) != len(batch):
            raise ValueError(f"input_gradient: {len(batch)} inputs but {len(rows)} image indices")
        formats = formats_for(self.samples.module)
        if not formats.expected:  # no BatchNorm2d, or refused by an earlier pass
            return self._passes(batch, rows, guided, within, from_scores, with_scores)
        try:
            return self._passes(batch, rows, guided, within, from_scores, with_scores, channels_last=True)
        except FORMAT_ERRORS as refused:  # what a .view of the input or a check of its strides raises
            if isinstance(refused, HookvizError):
                raise
            found = self._passes(batch, rows, guided, within, from_scores, with_scores)  # an error of its own raises here
        formats.refuse_channels_last()  # the format failed where the input as it came ran: as it came, from now on
        return found

    def _passes(self, batch, rows, guided, within, from_scores, with_scores, channels_last: bool = False):
        import torch

        gradients, scores = [], []
        guide = guided_relus(self.samples.module) if guided else contextlib.nullcontext()
        rules = within(self.samples.module) if within is not None else contextlib.nullcontext()
        layout = channels_last_input(self.samples.module) if channels_last else contextlib.nullcontext()
        with torch.inference_mode(False), torch.enable_grad(), guide, rules, layout:
            for start in range(0, len(batch), self.chunk):
                part = batch[start : start + self.chunk].detach().clone().requires_grad_(True)
                gradient, score = self._gradient(part, rows[start : start + self.chunk], from_scores)
                gradients.append(gradient)
                scores.append(score)
                passed(len(part))
        found = torch.cat(gradients).float() if gradients else torch.zeros(0)
        return (found, torch.cat(scores) if scores else torch.zeros(0)) if with_scores else found

    def others(self) -> dict:
        """The batch's inputs besides the main one, stacked by name on the model's device (``{}``: a sample of one input)."""
        from hookviz.modelstate import model_dtype

        return self.samples.others(self.samples.device, model_dtype(self.samples.module))

    def along(self, main, others: dict, images, guided: bool = False):
        """Each row's score and its gradient with respect to every input, the main one and
        ``others`` (per name, (M, ...)) replaced together (integrated gradients' path through
        a tuple of inputs, as captum's): ``(main gradients, {name: gradients}, scores)``; with
        ``guided``, through guided ReLUs (guided backprop's)."""
        import torch

        rows = torch.as_tensor(images, dtype=torch.long).flatten().cpu()
        found: dict[str, list] = {name: [] for name in (self.samples.main, *others)}
        scores = []
        guide = guided_relus(self.samples.module) if guided else contextlib.nullcontext()
        with torch.inference_mode(False), torch.enable_grad(), guide:
            for start in range(0, len(main), self.chunk):
                end = start + self.chunk
                parts = {self.samples.main: main[start:end], **{n: t[start:end] for n, t in others.items()}}
                parts = {name: part.detach().clone().requires_grad_(True) for name, part in parts.items()}
                main_part = parts.pop(self.samples.main)
                score = self.scorer(self.samples.forward(rows[start:end], main_part, parts), rows[start:end])
                wanted = [main_part, *parts.values()]
                reached = score.requires_grad  # else nothing to explain in these rows: no graph reaches the inputs
                grads = torch.autograd.grad(score, wanted, torch.ones_like(score), allow_unused=True) if reached else ()
                for i, name in enumerate(found):
                    grad = grads[i] if reached else None
                    found[name].append((torch.zeros_like(wanted[i]) if grad is None else grad.detach()).float())
                scores.append(score.detach().float().cpu().flatten())
                passed(len(main_part))
        joined = {name: torch.cat(parts) for name, parts in found.items()}
        return joined.pop(self.samples.main), joined, torch.cat(scores)

    def _gradient(self, part, rows, from_scores: bool = False):
        import torch

        scores = self.scorer(self.samples.forward(rows, part), rows)
        seen = scores.detach().float().cpu().flatten()
        if not scores.requires_grad:  # nothing to explain in these images: no graph reaches the input
            return torch.zeros_like(part), seen
        start = scores.detach() if from_scores else torch.ones_like(scores)
        (gradient,) = torch.autograd.grad(scores, part, grad_outputs=start, allow_unused=True)
        return (torch.zeros_like(part) if gradient is None else gradient.detach()), seen


@dataclass(frozen=True)
class LayerHessian:
    """``hessian_vector(vectors)``: ``(gradients, products)``, for each image ``n`` the gradient
    of its target score (as ``score`` scores it) and ``H_n @ vectors[n]``, ``H_n`` the Hessian of
    that score with respect to the layer's output read as a map (channels first).

    The main pass keeps no graph of its gradients (keeping one would cost every method), so
    this runs its own: a forward pass in which the layer's output is copied from a leaf that
    requires grad, ``g = dS/dleaf`` with ``create_graph=True``, then ``d(g . v)/dleaf``. Where an
    op after the layer has no double backward (torchvision's ``roi_align``, in a detector's
    heads), ``H v`` is the central difference ``(g(A + h v) - g(A - h v)) / 2h`` (two more passes;
    ``h`` the cube root of the float's resolution relative to ``A`` and ``v``; within 1e-3 of its largest value). Its
    passes take ``chunk`` rows, and the hook that makes the leaf is removed when they end.

    Attributes:
        samples, scorer, chunk: as ``InputGradients``' (``chunk``: rows a pass with a graph may hold).
        inputs: the batch's main input (N, C, *spatial), on the model's device.
        layer, call, layout: the layer's module, which of its calls, how its output lies.
    """

    samples: Any
    scorer: Any
    chunk: int
    inputs: Any
    layer: Any = None
    call: int = 0
    layout: Any = None

    def at(self, layer, call: int, layout: Layout) -> LayerHessian:
        """The same products at ``layer``'s ``call``-th call, its output read in ``layout``."""
        return replace(self, layer=layer, call=call, layout=layout)

    def __call__(self, vectors):
        import torch

        if self.layer is None:
            raise ValueError("hessian_vector: no layer to take the Hessian at")
        gradients, products = [], []
        with torch.inference_mode(False), torch.enable_grad():
            for start in range(0, len(vectors), self.chunk):
                rows = torch.arange(start, min(start + self.chunk, len(vectors)))
                gradient, product = self._product(rows, vectors[start : start + self.chunk].detach())
                gradients.append(gradient)
                products.append(product)
                passed(len(rows))
        return torch.cat(gradients).float(), torch.cat(products).float()

    def _product(self, rows, vectors):
        import torch

        zeros = torch.zeros_like(vectors)
        gradient, leaf = self._gradient(rows, vectors, None, create_graph=True)
        if gradient is None:  # nothing to explain in these images, or the score does not reach the layer
            return zeros, zeros
        if not gradient.requires_grad:  # the score is linear in the layer's output after it
            return gradient.detach(), zeros
        try:
            (product,) = torch.autograd.grad(gradient, leaf, grad_outputs=vectors.to(gradient.dtype), allow_unused=True)
        except RuntimeError:  # an op after the layer has no double backward (torchvision's roi_align)
            return gradient.detach(), self._difference(rows, vectors, leaf.detach())
        return gradient.detach(), zeros if product is None else product.detach()

    def _gradient(self, rows, vectors, shift, create_graph: bool):
        """d(score)/d(layer's output) of ``rows``, the output moved by ``shift`` (or not), and its leaf."""
        import torch

        leaves = []  # type: ignore[var-annotated]
        with _leaf_output(self.layer, self.call, self.layout, leaves, shift):
            scores = self.scorer(self.samples.forward(rows, self.inputs[rows]), rows)
        if not leaves or tuple(leaves[0].shape) != tuple(vectors.shape):
            raise ValueError(f"hessian_vector: vectors of shape {tuple(vectors.shape)} do not fit this layer's output")
        if not scores.requires_grad:
            return None, leaves[0]
        (gradient,) = torch.autograd.grad(scores.sum(), leaves[0], create_graph=create_graph, allow_unused=True)
        return gradient, leaves[0]

    def _difference(self, rows, vectors, leaf):
        """``H v`` as the central difference of two gradients, ``(g(A + h v) - g(A - h v)) / 2h``, per
        image, ``A`` the layer's output (``leaf``); ``h`` the cube root of the float's resolution,
        relative to ``A``'s and ``v``'s sizes."""
        import torch

        size = leaf.flatten(1).abs().amax(1).clamp(min=1.0) / vectors.flatten(1).abs().amax(1).clamp(min=1e-30)
        step = (torch.finfo(leaf.dtype).eps ** (1 / 3) * size).reshape(-1, *[1] * (vectors.dim() - 1))
        ahead, _ = self._gradient(rows, vectors, step * vectors, create_graph=False)
        behind, _ = self._gradient(rows, vectors, -step * vectors, create_graph=False)
        if ahead is None or behind is None:
            return torch.zeros_like(vectors)
        return ((ahead - behind) / (2 * step)).detach()


@contextlib.contextmanager
def _leaf_output(layer, call: int, layout: Layout, leaves: list, shift=None) -> Iterator[None]:
    """For one forward pass, the ``call``-th output of ``layer`` becomes a copy whose map
    (channels first, in ``layout``) is written from a new leaf that requires grad, appended to
    ``leaves`` (the map moved by ``shift`` when given); the rest of the output stays as the layer made it."""

    def leafed(tensor):
        copy = tensor.detach().clone()
        view = reshape(copy, layout)
        if view is None or not _shares(view, copy):
            return None
        leaf = (view.detach().clone() if shift is None else view.detach() + shift.to(view.dtype)).requires_grad_(True)
        view.copy_(leaf)  # autograd follows the copy: the layer's output is now a function of the leaf
        leaves.append(leaf)
        return copy

    with _on_call(layer, call, leafed):
        yield


@dataclass(frozen=True)
class LayerGradients:
    """``layer_gradient(batch, images=None)``: for each row of ``batch`` (M, C, *spatial), standing
    for image ``images[row]``, the layer's output (its ``call``-th in a pass) and d(row's target
    score)/d(that output), both read in ``layout`` (channels first), (M, C, *spatial) float32.

    Its passes are those of ``probe`` (an ``InputGradients``: the samples, the key's scorer, the
    rows a pass); the layer's output is watched through a forward hook removed after each pass,
    and what the rest of the model gets is a copy, so an in-place op after the layer leaves it.
    """

    probe: Any
    layer: Any
    call: int
    layout: Layout

    def __call__(self, batch, images=None):
        import torch

        rows = torch.arange(len(batch)) if images is None else torch.as_tensor(images, dtype=torch.long).flatten().cpu()
        if len(rows) != len(batch):
            raise ValueError(f"layer_gradient: {len(batch)} inputs but {len(rows)} image indices")
        activations, gradients = [], []
        with torch.inference_mode(False), torch.enable_grad():
            for start in range(0, len(batch), self.probe.chunk):
                part, part_rows = batch[start : start + self.probe.chunk].detach(), rows[start : start + self.probe.chunk]
                with _watched_output(self.layer, self.call) as seen:
                    scores = self.probe.scorer(self.probe.samples.forward(part_rows, part), part_rows)
                if not seen:
                    raise ValueError(f"layer_gradient: the layer's call {self.call} did not run")
                output = seen[0]
                reached = scores.requires_grad and output.requires_grad
                grads = torch.autograd.grad(scores, output, torch.ones_like(scores), allow_unused=True)[0] if reached else None
                grads = torch.zeros_like(output) if grads is None else grads
                activations.append(reshape(output.detach(), self.layout).float())
                gradients.append(reshape(grads.detach(), self.layout).float())
                passed(len(part))
        return torch.cat(activations), torch.cat(gradients)


@contextlib.contextmanager
def _watched_output(layer, call: int) -> Iterator[list]:
    """For one forward pass, the ``call``-th output of ``layer`` (its first float tensor, made a
    leaf of the graph where nothing before it needs a gradient) is put in the list yielded."""
    seen: list = []
    count = [0]

    def hook(_module, _args, output):
        index = count[0]
        count[0] += 1
        tensor = _first_float(output) if index == call else None
        if tensor is None:
            return None
        if not tensor.requires_grad:
            leaf = tensor.detach().requires_grad_(True)
            output, tensor = _replace_first(output, tensor, leaf), leaf
        seen.append(tensor)
        return _replace_first(output, tensor, tensor.clone())

    with HookSet() as hooks:
        hooks.add(layer.register_forward_hook(hook))
        yield seen


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
