"""Explaining: one forward and backward pass over a batch, and what it tells about each image.

This is the stage between recording and the pictures: the task (``hookviz.tasks``) reads
the model's output and says what to explain, the objective is back-propagated, each layer
is reduced to its summaries and CAMs, and one frozen ``Explanation`` per image comes back,
holding numpy arrays only. The caller's model is left as it was: its mode, its parameters'
gradient flags and the process's precision settings are restored after the pass.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .errors import UsageError, arg
from .featuremaps import DeclaredLayout, Layout, ambiguity, layout_of, reshape
from .images import PreparedImage, Preprocessing
from .options import PICTURE_GROUPS, ChannelSelection, PictureOptions
from .summaries import TENSOR_KEYS, channel_profile, channel_sum, channel_tiles, histogram, tensor_stats
from .tasks.base import ClassScore, ImagePrediction

__all__ = ["Explanation", "LayerResult", "ClassScore", "SummaryOptions", "explain_batch", "full_precision"]


@dataclass(frozen=True)
class SummaryOptions:
    """What each layer is reduced to, decided by what the pictures and files need.

    Attributes:
        channels: the channels of the grids.
        grad_tiles: also keep the tiles of ``grad_output`` (its channel grid).
        keep_tensors: keep the full arrays (``tensors.npz``, ``Explanation`` in a notebook).
        histograms: value histograms of output and gradient (only TensorBoard shows them;
            about 3 ms per image and layer on a CPU).
    """

    channels: ChannelSelection = field(default_factory=ChannelSelection)
    grad_tiles: bool = True
    keep_tensors: bool = True
    histograms: bool = True


@dataclass(frozen=True)
class LayerResult:
    """One recorded layer call for one image.

    Attributes:
        shapes: the shape of each of the four tensors (batch dimension 1), ``None`` if absent.
        stats: min/max/mean/std/nonfinite/zero_fraction of each tensor.
        maps: each tensor summed over channels into one map.
        profiles: each tensor's per-channel means, (C,), ``None`` without a spatial layout
            (what a baseline's fingerprint keeps beside the maps).
        tiles: the channels shown in the grids, for ``output`` and ``grad_output``.
        histograms: value histograms of ``output`` and ``grad_output`` (for TensorBoard).
        cam: the raw map (h, w) for the target's logit, or ``None`` (see ``cam_note``).
        topk_cams: one ``(class, map)`` pair per top class when ``topk`` > 1.
        notes: what the report should say about this layer (a channel selection cut short).
        layout: how the output was read as a map (tokens on a grid, channels last), and its
            basis: declared by the model, read from the ops that made it (``data flow``) or
            guessed from the shape; ``ambiguous`` when its shape reads both ways and nothing
            says which (it is then drawn as no map); ``None`` without a spatial layout.
        input, output, grad_input, grad_output: the full arrays (batch dimension 1), kept
            unless the caller asked only for summaries.
    """

    name: str
    requested: str
    module_type: str
    shapes: dict
    stats: dict
    maps: dict
    tiles: dict
    cam: np.ndarray | None = None
    cam_note: str | None = None
    topk_cams: tuple[tuple[ClassScore, np.ndarray], ...] = ()
    histograms: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    layout: Layout | None = None
    profiles: dict = field(default_factory=dict)
    input: np.ndarray | None = None
    output: np.ndarray | None = None
    grad_input: np.ndarray | None = None
    grad_output: np.ndarray | None = None

    def tensors(self) -> dict[str, np.ndarray | None]:
        return {key: getattr(self, key) for key in TENSOR_KEYS}

    def __repr__(self) -> str:
        return f"LayerResult({self.name!r}, {self.module_type}, output {self.shapes.get('output')})"


@dataclass(frozen=True)
class Explanation:
    """Everything hookviz learned about one image. Save it with ``.save(dir)``.

    Attributes:
        target: what the main CAM explains (``None`` when there is nothing to explain, such
            as an image without detections).
        prediction: what the model predicted: the top-5, a segmentation's mask and class
            fractions, a detector's detections.
        task: what the model does (``classify``, ``segment``, ``detect``).
        layer_choice: why the layer was chosen, when hookviz chose it.
        skipped_layers: selected by a pattern or type, but never called by the forward pass.
        asked: the target options it was explained with (report.json keeps them).
        notes: what the report says about the image and the pass (first frame of an
            animation used, model explained in eval mode, ...).
        declared_layout: what the model declares about its token and channel layout
            (``None``: nothing, every layout was guessed).
        weights_sha256: the SHA-256 of the weights file, when a file was loaded.
    """

    image: PreparedImage
    model: str
    weights: str
    preprocessing: Preprocessing
    objective: str
    cam_method: str
    logits: np.ndarray
    target: ClassScore | None
    top5: tuple[ClassScore, ...]
    layers: tuple[LayerResult, ...]
    notes: tuple[str, ...] = field(default=())
    task: str = "classify"
    prediction: ImagePrediction | None = field(default=None, repr=False)
    asked: dict = field(default_factory=dict, repr=False)
    layer_choice: str | None = None
    skipped_layers: tuple[str, ...] = ()
    declared_layout: DeclaredLayout | None = None
    weights_sha256: str | None = None

    def __getitem__(self, name: str) -> LayerResult:
        for layer in self.layers:
            if name in (layer.name, layer.requested):
                return layer
        raise KeyError(f"{name!r} not among " + ", ".join(repr(l.name) for l in self.layers))

    def __repr__(self) -> str:
        layers = ", ".join(layer.name for layer in self.layers)
        target = self.target.label if self.target is not None else None
        return f"Explanation({self.image.source.label!r}, model={self.model!r}, target={target!r}, layers=[{layers}])"

    def save(self, directory, pictures: PictureOptions | Sequence[str] | str = PICTURE_GROUPS, *, save_tensors: bool = False, **picture_options):
        """Write the pictures, ``report.json`` and (with ``save_tensors``) ``tensors.npz`` into ``directory``.

        Args:
            pictures: a ``PictureOptions``, or the names of the pictures (``("summary", "cam")``,
                ``"none"``), with ``channels``, ``scale``, ``grad_channels`` as keywords.

        Returns:
            The list of files written, report last.
        """
        from .outputs import save_explanation

        if not isinstance(pictures, PictureOptions):
            pictures = PictureOptions(pictures=pictures, **picture_options)
        return save_explanation(self, Path(directory), pictures, save_tensors=save_tensors)

    def figure(self, layer: str | None = None, kind: str = "summary", **options):
        """A matplotlib ``Figure`` for one layer (the first by default): ``summary``,
        ``channels``, ``grad_channels``, ``cam`` or ``cam_topk``; ``None`` where it does not
        apply (a CAM of a layer without spatial layout). ``figure("cam")`` is the first
        layer's CAM, unless a layer is called ``cam``."""
        from .pictures import KINDS, picture_kind

        if layer in {k.name for k in KINDS} and not any(layer in (l.name, l.requested) for l in self.layers):
            kind, layer = layer, None
        picture = picture_kind(kind)
        if picture.compares:
            raise UsageError(f"{arg('kind', kind)}: drawn from two runs compared (hookviz.diff_runs), not from one explanation")
        chosen = self[layer] if layer is not None else self.layers[0]
        return picture.figure(self, chosen, **options)

    def _repr_html_(self) -> str:
        """What a notebook shows for ``hookviz.explain(...)`` as a cell's last line: the
        prediction, and per layer the summary and CAM pictures, as embedded PNGs."""
        from .notebook import explanation_html

        return explanation_html(self)


# ----------------------------------------------------------------------------- the pass


@contextlib.contextmanager
def full_precision(device: str) -> Iterator[None]:
    """Compute in full float32 on CUDA (not TF32), so a GPU run matches the CPU's; the
    process's flags are restored after the block."""
    import torch

    if not str(device).startswith("cuda"):
        yield
        return
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def explain_batch(explainer, images: Sequence[PreparedImage], summaries: SummaryOptions = SummaryOptions()) -> list[Explanation]:
    """Run one forward and backward pass over ``images`` and explain each of them.

    Each image gets its own target (``top1`` is per image). Parameters get no gradients;
    back-propagation stops at the earliest recorded tensor. Each layer is reduced to its
    summaries (statistics, channel sums, grid tiles, CAMs) as soon as its gradients exist;
    ``keep_tensors=False`` then drops the full arrays, so memory stays flat in long runs.

    Args:
        explainer: an ``Explainer`` (model, preprocessing, layers, target options).

    Raises:
        TargetError: the target does not exist for this model.
        UnknownLayerError: a layer named by its path is not called by the forward pass.
        Exception: whatever the model itself raises on this batch.
    """
    import torch

    from .dataflow import ChannelOrders
    from .modelstate import TRAIN_MODE_NOTE, evaluation, frozen_parameters
    from .recording import Recording

    module, task, options, method = explainer.model.module, explainer.task, explainer.target, explainer.method
    if any(parameter.is_inference() for parameter in module.parameters()):
        raise UsageError(
            "the model's parameters were made under torch.inference_mode, so no gradient can flow through "
            "them; build or load the model outside inference_mode"
        )
    tensors = [image.tensor for image in images]
    # Gradients are needed even when the caller's code runs under torch.no_grad or inference_mode.
    with torch.inference_mode(False), torch.enable_grad(), full_precision(explainer.device), \
            evaluation(module) as was_training, frozen_parameters(module):
        with Recording(module, explainer.layers) as recording, ChannelOrders(module) as orders:
            output = task.forward(module, tensors, explainer.device, options)
            skipped = recording.check_complete()
            plan = task.plan(output, options, explainer.model.categories, len(images))
            wants_gradients = method is not None and method.needs_gradients
            extra = [(key, scalar) for key, scalar in plan.cams if scalar is not None] if wants_gradients else []
            recording.backward(plan.objective, retain_graph=bool(extra))
            captures = recording.captures
            _check_batch_first(captures, len(images))
            gradients = _cam_gradients(recording, captures, plan, extra) if wants_gradients else None
            input_hw = tuple(tensors[0].shape[-2:])
            layouts = [_layouts(capture, orders, input_hw, explainer.declared_layout) for capture in captures]
        # Out of the recording: a method that re-scores runs the bare model, with no hook on it.
        sources = _cam_sources(explainer, method, plan, tensors, gradients)
        layer_cams = [
            _layer_cams(method, capture, sources, position, layouts[position]["output"])
            for position, capture in enumerate(captures)
        ]
    notes = list(explainer.notes)
    if was_training:
        notes.append(TRAIN_MODE_NOTE)
    if skipped:
        notes.append(_skipped_note(skipped))
    skipped_labels = tuple(spec.label for spec in skipped)
    return [
        replace(_explanation(explainer, image, i, captures, layouts, layer_cams, plan, summaries, tuple(notes)),
                skipped_layers=skipped_labels)
        for i, image in enumerate(images)
    ]


def _check_batch_first(captures, count: int) -> None:
    """Refuse a layer whose tensors do not hold one row per photo (a detector's per-proposal
    head, an attention block's windows): its first row is not the first photo's."""
    for capture in captures:
        for name in ("output", "input"):
            tensor = getattr(capture, name)
            if tensor is not None and tensor.dim() > 0 and tensor.shape[0] != count:
                raise UsageError(
                    f"{arg('layers', capture.requested)}: {capture.name}'s {name} has {tensor.shape[0]} rows for "
                    f"{count} photo{'s' if count != 1 else ''} (proposals or windows, not photos); "
                    "record a layer of the backbone instead"
                )


def _skipped_note(skipped) -> str:
    paths = [spec.label for spec in skipped]
    shown = ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")
    return (
        f"skipped {len(paths)} selected modules that the forward pass never calls (auxiliary heads?) "
        f"or that return no single feature map (a feature pyramid): {shown}"
    )


def _layouts(capture, orders, input_hw, declared) -> dict[str, Layout | None]:
    """How each of a call's four tensors lies: its output's and its gradient's alike, as its
    input's and the input's gradient, from the model's declaration, the data flow, the shape."""
    found = {}
    for tensor, keys in ((capture.input, ("input", "grad_input")), (capture.output, ("output", "grad_output"))):
        layout = None if tensor is None else layout_of(tuple(tensor.shape), input_hw, declared, orders.kind(tensor))
        found.update(dict.fromkeys(keys, layout))
    return found


def _shape_text(shape) -> str:
    return "x".join(map(str, (1, *shape[1:])))


def _how_to_say_it() -> str:
    return f"pass {arg('layout', 'nhwc')} or {arg('layout', 'nchw')} to say it"


def _explanation(explainer, image, i: int, captures, layouts, layer_cams, plan, summaries, notes) -> Explanation:
    prediction = plan.predictions[i]
    keys = [key for key, _ in plan.cams]
    declared = explainer.declared_layout
    layers = tuple(
        _layer_result(capture, i, cams, prediction, keys, summaries, found)
        for capture, found, cams in zip(captures, layouts, layer_cams)
    )
    return Explanation(
        image=image,
        model=explainer.model.name,
        weights=explainer.model.weights,
        weights_sha256=explainer.model.weights_sha256,
        preprocessing=explainer.preprocessing,
        objective=explainer.target.box_objective if explainer.task.name == "detect" else explainer.target.objective,
        cam_method=explainer.target.cam,
        logits=np.array(plan.logits[i], dtype=np.float32),
        target=prediction.target,
        top5=prediction.top5,
        layers=layers,
        notes=tuple(dict.fromkeys((*image.source.notes, *notes, *prediction.notes))),
        task=explainer.task.name,
        prediction=prediction,
        asked=asdict(explainer.target),
        layer_choice=explainer.layer_choice,
        declared_layout=declared,
    )


def _layer_result(capture, i: int, cams, prediction, keys, summaries: SummaryOptions, layouts: dict) -> LayerResult:
    maps_by_key, reason, zero_notes = cams
    main = keys[0] if keys else None
    note = reason
    if maps_by_key and prediction.focus.get(main) is None:
        maps_by_key, note = None, "no CAM: nothing to explain in this image"
    elif maps_by_key and zero_notes[i]:
        note = zero_notes[i]
    arrays = {key: _one(getattr(capture, key), i) for key in TENSOR_KEYS}
    tiles, layer_notes = {}, []
    unread = [which for which in ("input", "output") if layouts[which] is not None and not layouts[which].spatial]
    if unread:
        shapes = " and ".join(f"{which} {_shape_text(arrays[which].shape)}" for which in unread)
        layer_notes.append(
            f"{capture.name}: {shapes} fit{'s' if len(unread) == 1 else ''} channels first and last alike, so "
            f"{'it is' if len(unread) == 1 else 'they are'} drawn as no map; {_how_to_say_it()}"
        )
    for which, wanted in (("output", True), ("grad_output", summaries.grad_tiles)):
        if wanted:
            tiles[which], tile_note = channel_tiles(
                arrays[which], layouts[which], summaries.channels, by_magnitude=which != "output"
            )
            if tile_note:
                layer_notes.append(f"{capture.name}: {tile_note}")
    return LayerResult(
        name=capture.name,
        requested=capture.requested,
        module_type=capture.module_type,
        shapes={k: (tuple(v.shape) if v is not None else None) for k, v in arrays.items()},
        stats={k: tensor_stats(v) for k, v in arrays.items()},
        maps={k: channel_sum(v, layouts[k]) for k, v in arrays.items()},
        profiles={k: channel_profile(v, layouts[k]) for k, v in arrays.items()},
        tiles=tiles,
        cam=maps_by_key[main][i].copy() if maps_by_key else None,
        cam_note=note,
        topk_cams=_each_cam(maps_by_key, prediction, keys, i),
        histograms={k: histogram(arrays[k]) for k in ("output", "grad_output")} if summaries.histograms else {},
        notes=tuple(dict.fromkeys(layer_notes)),
        layout=layouts["output"],
        **(arrays if summaries.keep_tensors else {}),
    )


def _each_cam(maps_by_key, prediction, keys, i: int) -> tuple:
    """The CAMs beyond the main one: each top class's (``topk``), or every detection's (the
    first included: a detector's picture shows one panel per detection)."""
    if not maps_by_key:
        return ()
    wanted = keys if prediction.detections else keys[1:]
    return tuple((prediction.focus[k], maps_by_key[k][i].copy()) for k in wanted if prediction.focus.get(k) is not None)


@dataclass(frozen=True)
class _CamSources:
    """What the pass hands the CAM method, per CAM key of the plan (the main one first):
    only what the method declares it needs, ``None`` otherwise.

    Attributes:
        gradients: per key, per recorded call, d(key's score)/d(output).
        scores: per key, the ``score`` callable that re-runs the model (``tasks.base.Rescoring``).
        batch: the model's input batch (N, C, H, W), on its device, in its dtype (re-scoring
            a layer's output runs on it; ``needs_input`` hands it to the method).
        options: the run's ``TargetOptions``.
    """

    keys: tuple[str, ...]
    module: Any
    gradients: Any = None
    scores: Any = None
    batch: Any = None
    options: Any = None

def _cam_gradients(recording, captures, plan, extra) -> dict:
    """Per CAM key, each call's gradient of the key's score: the objective's own (already
    recorded) where the key's scalar is the objective, else one more backward pass each."""
    gradients = {key: [c.grad_output for c in captures] for key, scalar in plan.cams if scalar is None}
    for n, (key, scalar) in enumerate(extra):
        pairs = recording.gradients(scalar, inputs=False, retain_graph=n < len(extra) - 1)
        gradients[key] = [grad_output for _, grad_output in pairs]
    return {key: gradients[key] for key, _ in plan.cams}  # the plan's order: its first key is the main CAM


def _cam_sources(explainer, method, plan, tensors, gradients) -> _CamSources:
    import torch

    from .methods import RESCORING_BATCH
    from .tasks.base import Rescoring, model_dtype

    module = explainer.model.module
    keys = tuple(key for key, _ in plan.cams)
    sources = _CamSources(keys, module, gradients, options=explainer.target)
    if method is None:
        return sources
    batch = None
    if method.needs_input or method.needs_rescoring:
        batch = torch.stack(list(tensors)).to(device=explainer.device, dtype=model_dtype(module))
    scores = None
    if method.needs_rescoring:
        task, options = explainer.task, explainer.target
        scores = {key: Rescoring(task, module, explainer.device, options, task.scorer(plan, key, options), RESCORING_BATCH)
                  for key in keys}
    return replace(sources, batch=batch, scores=scores)


def _layer_cams(method, capture, sources: _CamSources, position: int, layout: Layout | None):
    """One layer's CAMs for the whole batch, its output read in ``layout``.

    Returns:
        ``({key: (N, h, w) maps} or None, why there is none, per image the note to give
        when the main CAM's gradient is all zero, else None)``.
    """
    if method is None:
        return None, arg("cam", "none"), None
    if not sources.keys:  # the task found nothing to explain in this batch (no detections)
        return None, "no CAM: nothing to explain in this image", None
    if layout is not None and not layout.spatial:
        shape = _shape_text(capture.output.shape)
        return None, f"no CAM: output {shape} {ambiguity((1, *capture.output.shape[1:]))}; {_how_to_say_it()}", None
    activation = reshape(capture.output, layout)
    if activation is None:
        shape = "none" if capture.output is None else _shape_text(capture.output.shape)
        return None, f"no CAM: output {shape} has no spatial layout", None
    zero_notes: list = [None] * activation.shape[0]
    if method.needs_gradients:
        raw = sources.gradients[sources.keys[0]][position]
        gradient = reshape(raw, layout)
        if gradient is None:
            return None, "no CAM: the target's logit does not depend on this layer", None
        zero = (~gradient.flatten(1).any(dim=1)).cpu().tolist()
        reached = raw.flatten(1).any(dim=1).cpu().tolist()  # with the class token, which the map drops
        zero_notes = [_zero_gradient_note(capture.name, sources.module) if empty and token else ZERO_GRADIENT_NOTE if empty else None
                      for empty, token in zip(zero, reached)]
    context = _method_context(method, capture, activation, sources)
    blank = np.zeros((activation.shape[0], *activation.shape[2:]), dtype=np.float32)
    maps = {}
    for key in sources.keys:
        grads = reshape(sources.gradients[key][position], layout) if method.needs_gradients else None
        if method.needs_gradients and grads is None:
            maps[key] = blank  # this key's score does not reach the layer
            continue
        given = replace(context, gradients=None if grads is None else grads.float(),
                        score=sources.scores[key] if method.needs_rescoring else None,
                        score_layer=_layer_rescoring(sources.scores[key], sources.batch, context, layout)
                        if method.needs_rescoring else None)
        maps[key] = _computed(method, given)
    return maps, None, zero_notes


ZERO_GRADIENT_NOTE = "the target's logit has zero gradient at every position of this layer, so its CAM is zero"
_FIRST_NORMS = ("ln_1", "norm1", "layernorm_before")  # torchvision's, timm's and transformers' ViT blocks


def _zero_gradient_note(name: str, module) -> str:
    """The note for a layer whose patch tokens get no gradient while its class token does:
    the head reads the class token, and after the last block no patch token reaches it."""
    path = name.split(":")[0]
    norms = [p for p, _ in module.named_modules() if p.rsplit(".", 1)[-1] in _FIRST_NORMS and p != path]
    where = f"try {arg('layers', norms[-1])}, the last block's first norm" if norms else "try the last block's first norm"
    return (
        "the target's logit has zero gradient at every patch token of this layer (after the last block only the "
        f"class token reaches the head), so its CAM is zero; {where}"
    )


def _method_context(method, capture, activation, sources: _CamSources):
    from .methods import MethodContext

    path = re.sub(r":\d+$", "", capture.name)  # a module called several times: its K-th call
    inputs = sources.batch if method.needs_input else None
    return MethodContext(activation.detach().float(), None, sources.module.get_submodule(path), capture.name, inputs,
                         options=sources.options)


def _layer_rescoring(rescoring, batch, context, layout):
    """``score_layer`` for the layer of ``context``: its output (in ``layout``) replaced."""
    from .probing import LayerRescoring

    call = re.search(r":(\d+)$", context.layer)
    return LayerRescoring(rescoring, batch, context.module, int(call[1]) if call else 0, layout)


def _computed(method, context) -> np.ndarray:
    """The method's map, checked to be one (N, *spatial) map per image, as float32 numpy."""
    import torch

    result = method.compute(context)
    expected = (context.activations.shape[0], *context.activations.shape[2:])
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != expected:
        got = "x".join(map(str, result.shape)) if isinstance(result, torch.Tensor) else type(result).__name__
        raise UsageError(
            f"{arg('cam', method.name)}: the method returned {got} at {context.layer}, not one map per image "
            f"({'x'.join(map(str, expected))}); fix the method or choose another"
        )
    return result.detach().float().cpu().numpy()


def _one(tensor, i: int) -> np.ndarray | None:
    """Image ``i`` of a batch tensor as a float32 array with a batch dimension of 1."""
    if tensor is None:
        return None
    return tensor[i : i + 1].detach().float().cpu().numpy().copy()
