"""CAMs: the maps the asked methods make of each recorded layer, from what the pass recorded.

The pass (``hookviz.explaining.passes``) records each layer's output and the gradient of every
CAM key's score; this module hands each method (``hookviz.methods``) only what it
declares and checks what it returns. The main method (the first that maps the layer)
explains every key of the plan (the target, each top class, each detection); the others
explain the target only. A method whose maps are at the input's resolution (guided
backprop, integrated gradients) runs once per batch, for the target, on the context of the
first recorded layer that has a map (``pixel_maps``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hookviz.anatomy.featuremaps import Layout, ambiguity, layout_hint, reshape, shape_text
from hookviz.errors import HookvizError, MethodError, UsageError, arg, describe

__all__ = [
    "Sources",
    "LayerMaps",
    "ImageCams",
    "PixelMaps",
    "cam_gradients",
    "sources_for",
    "layer_maps",
    "image_cams",
    "pixel_maps",
    "method_map",
    "zero_gradient_note",
]

NOTHING_TO_EXPLAIN = "no CAM: nothing to explain in this image"
_FIRST_NORMS = ("ln_1", "norm1", "layernorm_before")  # torchvision's, timm's and transformers' ViT blocks


#: Where ``_computed`` keeps a method's maps of a sample's other inputs, beside its figures.
INPUTS = "inputs"


@dataclass(frozen=True)
class Sources:
    """What the pass can hand a method, per CAM key of the plan (the main one first); what
    no asked method needs is ``None``.

    Attributes:
        gradients: per key, per recorded call, d(key's score)/d(output).
        scores: per key, the ``score`` callable that re-runs the model (``tasks.base.Rescoring``).
        batch: the model's main input batch (N, C, *spatial), on its device, in its dtype (re-scoring
            a layer's output runs on it; ``needs_input`` hands it to the method).
        input_gradients: per key, the ``input_gradient`` callable (``extra_passes.InputGradients``).
        options: the run's ``TargetOptions``.
        attention: per key, the ``attention`` callable (``hookviz.explaining.attention.AttentionPass``).
        objective: what is back-propagated, in words (the task's ``objective_words``).
        hessians: per key, the ``hessian_vector`` callable (``extra_passes.LayerHessian``), not yet at a layer.
        contrast: per key, the ``contrast.ContrastGradients`` of its target (``Method.needs_contrast``).
        others: a sample of several inputs': the names of the inputs besides the main one, which an
            input method must map too; ``()`` for one input.
    """

    keys: tuple[str, ...]
    module: Any
    gradients: Any = None
    scores: Any = None
    batch: Any = None
    input_gradients: Any = None
    options: Any = None
    objective: str = "the target's logit"
    attention: Any = None
    hessians: Any = None
    contrast: Any = None
    others: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayerMaps:
    """One layer's maps for the whole batch.

    Attributes:
        order: the layer methods' names, the main one first.
        maps: per method that made maps, ``{key: (N, *spatial)}`` (the main method: every
            key; the others: the main key).
        reasons: per method that made none, why.
        zero_notes: per image, the note for a gradient method whose target has zero gradient
            at this layer, else ``None``.
        gradient_methods: the methods the zero-gradient note applies to.
    """

    order: tuple[str, ...]
    maps: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    zero_notes: tuple = ()
    gradient_methods: frozenset = frozenset()


@dataclass(frozen=True)
class ImageCams:
    """One image's share of a ``LayerMaps``: what ``LayerResult`` keeps.

    Attributes:
        cam: the main method's map of the target, or ``None``; ``cam_note`` why, or what to know.
        topk_cams: the main method's ``(class or detection, map)`` pairs beyond the target's.
        cams: every layer method's map of the target; ``cam_notes`` per method, why it has none
            or what to know about it.
    """

    cam: np.ndarray | None
    cam_note: str | None
    topk_cams: tuple
    cams: dict
    cam_notes: dict


def cam_gradients(recording, captures, plan, extra, keep: bool = False) -> dict:
    """Per CAM key, each call's gradient of the key's score: the objective's own (already
    recorded) where the key's scalar is the objective, else one more backward pass each; ``keep``:
    the graph is kept after them (contrast scores are back-propagated through it later)."""
    gradients = {key: [c.grad_output for c in captures] for key, scalar in plan.cams if scalar is None}
    for n, (key, scalar) in enumerate(extra):
        pairs = recording.gradients(scalar, inputs=False, retain_graph=keep or n < len(extra) - 1)
        gradients[key] = [grad_output for _, grad_output in pairs]
    return {key: gradients[key] for key, _ in plan.cams}  # the plan's order: its first key is the main CAM


def sources_for(explainer, methods, plan, samples, gradients, cost=None, contrast=None) -> Sources:
    """What ``methods`` need of this batch (a ``samples.SampleBatch``), beyond the recorded
    tensors; their passes of many rows keep to the memory budget (``hookviz.budget``), given
    ``cost``, what a row of the main pass cost (a ``RowCost``; ``None``: ``RESCORING_BATCH`` rows a pass);
    ``contrast``: per key, its ``contrast.ContrastGradients``, where a method needs them."""
    from hookviz.budget import RowCost
    from hookviz.explaining.extra_passes import InputGradients, LayerHessian
    from hookviz.input_format import formats_for
    from hookviz.methods import RESCORING_BATCH
    from hookviz.tasks.base import Rescoring

    module, task, options, device = explainer.model.module, explainer.task, explainer.target, explainer.device
    keys = tuple(key for key, _ in plan.cams)
    objective = task.objective_words(options, explainer.task_options)
    sources = Sources(keys, module, gradients, options=options, objective=objective, contrast=contrast)
    batch = None
    if any(
        m.needs_input or m.needs_rescoring or m.needs_input_gradients or m.needs_hessian or m.resolution == "input"
        for m in methods
    ):
        batch = samples.main_input()
    scores = None
    cost = cost or RowCost()
    if any(m.needs_rescoring for m in methods):
        chunk, formats = cost.rows(device, RESCORING_BATCH, gradients=False), formats_for(module)
        scores = {key: Rescoring(samples, task.scorer(plan, key, options), chunk, formats) for key in keys}
    input_gradients = None
    if any(m.needs_input_gradients or m.needs_layer_gradients for m in methods):  # each key's, computed when called
        chunk = cost.rows(device, RESCORING_BATCH, gradients=True)
        input_gradients = {key: InputGradients(samples, task.scorer(plan, key, options), chunk) for key in keys}
    hessians = None
    if any(m.needs_hessian for m in methods):  # a pass with a graph and a second backward through it: half the rows
        chunk = max(1, cost.rows(device, RESCORING_BATCH, gradients=True) // 2)
        hessians = {key: LayerHessian(samples, task.scorer(plan, key, options), chunk, batch) for key in keys}
    attention = _attention_passes(explainer, methods, plan, samples, keys)
    found = replace(sources, batch=batch, scores=scores, input_gradients=input_gradients, attention=attention)
    return replace(found, hessians=hessians, others=_other_inputs(samples, methods))


def _other_inputs(samples, methods) -> tuple[str, ...]:
    """The names of a sample of several inputs' inputs besides the main one, where an input method is asked."""
    several = samples.samples and getattr(samples.samples[0], "positional", None) is not None
    if not several or not any(m.resolution == "input" for m in methods):
        return ()
    return tuple(name for name in samples.inputs().rows if name != samples.main)


def _attention_passes(explainer, methods, plan, samples, keys) -> dict | None:
    """Per key, the attention pass of the methods that read attention (one shared forward pass
    for the probabilities alone), or ``None`` when no method does."""
    asking = [m for m in methods if m.needs_attention]
    if not asking:
        return None
    from hookviz.anatomy.attention import attention_sites, has_class_token
    from hookviz.explaining.attention import AttentionPass

    module, task, options = explainer.model.module, explainer.task, explainer.target
    sites = attention_sites(module, asking[0].name, explainer.model.declared_attention)
    declared = explainer.declared_layout
    prefix = declared.prefix if declared is not None and declared.patch is not None else None
    batch = samples.main_input()
    shared: dict = {}
    return {
        key: AttentionPass(samples, task.scorer(plan, key, options), sites, batch, prefix, has_class_token(module), shared)
        for key in keys
    }


def layer_maps(methods, capture, sources: Sources, position: int, layout: Layout | None) -> LayerMaps:
    """One layer's maps by each layer method (the main one first), its output read in ``layout``;
    a method that raises ``NoMap`` has none of this layer, for the reason it gives."""
    from hookviz.methods import NoMap

    order = tuple(m.name for m in methods)
    common = _no_map(capture, sources, layout)
    if common is not None:
        return LayerMaps(order, reasons=dict.fromkeys(order, common))
    activation = reshape(capture.output, layout)
    zero_notes: tuple = ()
    maps, reasons = {}, {}
    for rank, method in enumerate(methods):
        if method.needs_gradients:
            raw = sources.gradients[sources.keys[0]][position]
            if reshape(raw, layout) is None:
                reasons[method.name] = f"no CAM: {sources.objective} does not depend on this layer"
                continue
            zero_notes = zero_notes or _zero_gradient_notes(capture.name, sources, raw, layout)
        keys = sources.keys if rank == 0 else sources.keys[:1]
        context = _method_context(method, capture, activation, sources)
        try:
            maps[method.name] = {key: _key_map(method, context, sources, key, position, layout) for key in keys}
        except NoMap as declined:  # the method has no map of this layer, and says why
            reasons[method.name] = f"no CAM: {declined}"
    gradient_methods = frozenset(m.name for m in methods if m.needs_gradients)
    return LayerMaps(order, maps, reasons, zero_notes, gradient_methods)


def image_cams(found: LayerMaps, i: int, prediction, keys, panels) -> ImageCams:
    """Image ``i``'s maps of one layer; ``panels``: the keys whose main maps are drawn as
    panels (every one for a detector, those beyond the target's for the top-K)."""
    main_key = keys[0] if keys else None
    nothing = bool(keys) and prediction.cam_targets.get(main_key) is None
    cams, notes = {}, {}
    for name in found.order:
        if name in found.maps and nothing:
            notes[name] = NOTHING_TO_EXPLAIN
        elif name in found.maps:
            cams[name] = found.maps[name][main_key][i].copy()
            if name in found.gradient_methods and found.zero_notes and found.zero_notes[i]:
                notes[name] = found.zero_notes[i]
        else:
            notes[name] = found.reasons[name]
    if not found.order:
        return ImageCams(None, None, (), cams, notes)
    main = found.order[0]
    topk = () if nothing else _each_cam(found.maps.get(main), prediction, panels, i)
    return ImageCams(cams.get(main), notes.get(main), topk, cams, notes)


@dataclass(frozen=True)
class PixelMaps:
    """The batch's maps at the input's resolution, of the target.

    Attributes:
        order: the input methods' names, as asked.
        maps: per method that made maps, (N, C, *spatial) as the main input.
        notes: per method that made none, why.
        layers: per method that used a layer's map (guided Grad-CAM), which.
        figures: per method that gave figures about its maps (``MapFigures``), one dict per image.
        inputs: per method that mapped a sample's other inputs too, one dict per image (input name to map).
    """

    order: tuple[str, ...] = ()
    maps: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    layers: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)


def pixel_maps(methods, captures, layouts, sources: Sources) -> PixelMaps:
    """Each input-resolution method's maps of the batch, given the context of the first
    recorded layer that has a map (``layouts``: each capture's output layout)."""
    from hookviz.methods import ExtraPasses

    order = tuple(m.name for m in methods)
    if not sources.keys:
        return PixelMaps(order, notes=dict.fromkeys(order, NOTHING_TO_EXPLAIN))
    key = sources.keys[0]
    position = next((p for p, c in enumerate(captures) if _no_map(c, sources, layouts[p]) is None), None)
    maps: dict = {}
    notes: dict = {}
    layers: dict = {}
    figures: dict = {}
    for method in methods:
        context, why = _pixel_context(method, captures, layouts, sources, position)
        if context is None:
            notes[method.name] = why
            continue
        passes = ExtraPasses(
            input_gradient=sources.input_gradients[key] if method.needs_input_gradients else None,
            score=sources.scores[key] if method.needs_rescoring else None,
            score_layer=_pixel_layer_rescoring(method, context, sources, layouts[position] if position is not None else None),
            layers=_every_layer(method, captures, layouts, sources) if method.needs_gradients else (),
            hessian_vector=_hessian_at(method, sources, key, context, layouts[position]) if position is not None else None,
        )
        given = replace(context, passes=passes)
        maps[method.name] = _computed(method, given, tuple(sources.batch.shape), figures)
        _check_every_input(method, sources, figures)
        if method.needs_gradients:
            layers[method.name] = context.layer
    inputs = {key[0]: figures.pop(key) for key in [k for k in figures if isinstance(k, tuple)]}
    return PixelMaps(order, maps, notes, layers, figures, inputs)


def _check_every_input(method, sources: Sources, figures: dict) -> None:
    """Refuse an input method that mapped the main input alone of a sample of several inputs: its
    maps would say the other inputs do not matter (``methods.base.InputGradient``: map them all)."""
    mapped = figures.get((method.name, INPUTS))
    missing = [name for name in sources.others if not mapped or any(name not in row for row in mapped)]
    if missing:
        raise UsageError(
            f"{arg('cam', method.name)} mapped the main input only, but the model takes {', '.join(missing)} too; "
            "an input method maps every input of such a model (MapFigures' inputs, from ctx.input_gradient.others() "
            "and .along(): docs/extending.md); choose integrated-gradients or guided-backprop"
        )


def _pixel_layer_rescoring(method, context, sources: Sources, layout):
    """An input method's ``score_layer``: at the layer it was given, where it was given one."""
    if not method.needs_rescoring or not context.layer:
        return None
    return _layer_rescoring(sources.scores[sources.keys[0]], sources.batch, context, layout)


def _pixel_context(method, captures, layouts, sources: Sources, position: int | None):
    """The context an input method is given, or ``(None, why)``."""
    from hookviz.methods import MethodContext

    if position is None:
        if method.needs_gradients:
            return None, "no map: no recorded layer has a map to take its CAM from"
        inputs = sources.batch if method.needs_input else None
        # no layer to give: activations None, as MethodContext's docstring says an input method may get
        settings = method.settings(sources.options)
        context = MethodContext(None, None, sources.module, "", inputs, settings, sources.module)  # type: ignore[arg-type]
        return context, None
    capture, layout = captures[position], layouts[position]
    context = _method_context(method, capture, reshape(capture.output, layout), sources)
    if not method.needs_gradients:
        return context, None
    grads = reshape(sources.gradients[sources.keys[0]][position], layout)
    if grads is None:
        return None, f"no map: {sources.objective} does not depend on {capture.name}, the first layer with a map"
    return replace(context, gradients=grads.float()), None


def _every_layer(method, captures, layouts, sources: Sources) -> tuple:
    """The context of every recorded layer that has a map and a gradient (``MethodContext.layers``)."""
    found = []
    for position, capture in enumerate(captures):
        if _no_map(capture, sources, layouts[position]) is None:
            context, _ = _pixel_context(method, captures, layouts, sources, position)
            if context is not None:
                found.append(context)
    return tuple(found)


def _no_map(capture, sources: Sources, layout: Layout | None) -> str | None:
    """Why no method can map this layer, or ``None``."""
    if not sources.keys:  # the task found nothing to explain in this batch (no detections)
        return NOTHING_TO_EXPLAIN
    if layout is not None and not layout.spatial:
        shape = shape_text(capture.output.shape)
        return f"no CAM: output {shape} {ambiguity((1, *capture.output.shape[1:]))}; {layout_hint()}"
    if reshape(capture.output, layout) is None:
        shape = "none" if capture.output is None else shape_text(capture.output.shape)
        return f"no CAM: output {shape} has no spatial layout"
    return None


def _each_cam(maps_by_key, prediction, panels, i: int) -> tuple:
    """The CAMs drawn as panels (``panels``, their keys): each top class's (``topk``), or every
    detection's (the first included: a detector's picture shows one panel per detection)."""
    if not maps_by_key:
        return ()
    return tuple(
        (prediction.cam_targets[k], maps_by_key[k][i].copy()) for k in panels if prediction.cam_targets.get(k) is not None
    )


def zero_gradient_note(objective: str) -> str:
    """The note for a gradient method whose ``objective`` (in words) has zero gradient at
    every position of a layer."""
    return f"{objective} has zero gradient at every position of this layer, so its CAM is zero"


def _zero_gradient_notes(name: str, sources: Sources, raw, layout) -> tuple:
    """Per image, the note for a target whose gradient is zero at every position of the map."""
    gradient = reshape(raw, layout)
    zero = (~gradient.flatten(1).any(dim=1)).cpu().tolist()
    reached = raw.flatten(1).any(dim=1).cpu().tolist()  # with the class token, which the map drops
    return tuple(
        _token_note(name, sources) if empty and token else zero_gradient_note(sources.objective) if empty else None
        for empty, token in zip(zero, reached)
    )


def _token_note(name: str, sources: Sources) -> str:
    """The note for a layer whose patch tokens get no gradient while its class token does:
    the head reads the class token, and after the last block no patch token reaches it."""
    path = name.split(":")[0]
    norms = [p for p, _ in sources.module.named_modules() if p.rsplit(".", 1)[-1] in _FIRST_NORMS and p != path]
    where = f"try {arg('layers', norms[-1])}, the last block's first norm" if norms else "try the last block's first norm"
    return (
        f"{sources.objective} has zero gradient at every patch token of this layer (after the last block only the "
        f"class token reaches the head), so its CAM is zero; {where}"
    )


def method_map(method, capture, sources: Sources, key: str, position: int, layout) -> np.ndarray:
    """``method``'s maps of one key's score at one recorded layer (``capture``, the ``position``-th,
    its output read in ``layout``), as ``layer_maps`` makes them (smoothing's noisy copies use it)."""
    context = _method_context(method, capture, reshape(capture.output, layout), sources)
    return _key_map(method, context, sources, key, position, layout)


def _key_map(method, context, sources: Sources, key: str, position: int, layout) -> np.ndarray:
    """``method``'s maps of one key's score (zeros where that score does not reach the layer)."""
    from hookviz.explaining.contrast import layer_contrast
    from hookviz.methods import ExtraPasses

    grads = reshape(sources.gradients[key][position], layout) if method.needs_gradients else None
    if method.needs_gradients and grads is None:
        return np.zeros((context.activations.shape[0], *context.activations.shape[2:]), dtype=np.float32)
    passes = ExtraPasses(
        score=sources.scores[key] if method.needs_rescoring else None,
        score_layer=_layer_rescoring(sources.scores[key], sources.batch, context, layout) if method.needs_rescoring else None,
        input_gradient=sources.input_gradients[key] if method.needs_input_gradients else None,
        attention=sources.attention[key] if method.needs_attention else None,
        hessian_vector=_hessian_at(method, sources, key, context, layout),
        contrast_gradient=layer_contrast(sources.contrast[key], position, layout) if method.needs_contrast else None,
        layer_gradient=_layer_gradients(sources.input_gradients[key], context, layout) if method.needs_layer_gradients else None,
    )
    return _computed(method, replace(context, gradients=None if grads is None else grads.float(), passes=passes))


def _hessian_at(method, sources: Sources, key: str, context, layout):
    """``hessian_vector`` of ``key``'s score at the layer of ``context``, for a method that needs it."""
    if not method.needs_hessian or not context.layer:
        return None
    call = re.search(r":(\d+)$", context.layer)
    return sources.hessians[key].at(context.module, int(call[1]) if call else 0, layout)


def _layer_gradients(input_gradients, context, layout):
    """``layer_gradient`` at the layer of ``context``, with the passes of ``input_gradients`` (its samples, scorer, rows a pass)."""
    from hookviz.explaining.extra_passes import LayerGradients

    call = re.search(r":(\d+)$", context.layer)
    return LayerGradients(input_gradients, context.module, int(call[1]) if call else 0, layout)


def _method_context(method, capture, activation, sources: Sources):
    from hookviz.methods import MethodContext

    path = re.sub(r":\d+$", "", capture.name)  # a module called several times: its K-th call
    inputs = sources.batch if method.needs_input else None
    return MethodContext(
        activation.detach().float(),
        None,
        sources.module.get_submodule(path),
        capture.name,
        inputs,
        method.settings(sources.options),
        sources.module,
    )


def _layer_rescoring(rescoring, batch, context, layout):
    """``score_layer`` for the layer of ``context``: its output (in ``layout``) replaced."""
    from hookviz.explaining.extra_passes import LayerRescoring

    call = re.search(r":(\d+)$", context.layer)
    return LayerRescoring(rescoring, batch, context.module, int(call[1]) if call else 0, layout)


def _computed(method, context, expected: tuple | None = None, figures: dict | None = None) -> np.ndarray:
    """The method's map, checked to be one map per image, as float32 numpy: (N, *spatial)
    for a layer method, ``expected`` (the input's shape) for an input method, whose figures
    about its maps (``MapFigures``), one per image, go into ``figures`` under its name."""
    import torch

    from hookviz.methods import MapFigures

    given: dict[str, torch.Tensor] = {}
    for name in ("activations", "gradients", "inputs"):
        tensor = getattr(context, name, None)
        if isinstance(tensor, torch.Tensor):
            given[name] = tensor
    versions = {name: tensor._version for name, tensor in given.items()}
    try:
        result = method.compute(context)
    except HookvizError:
        raise
    except Exception as exc:  # a method of one's own is foreign code, as the model is
        raise MethodError(f"{arg('cam', method.name)}: the method failed at {context.layer} ({describe(exc)})") from exc
    if isinstance(result, MapFigures) and figures is not None and len(result.figures) == len(result.maps):
        figures[method.name] = tuple(result.figures)
    if isinstance(result, MapFigures) and figures is not None and len(result.inputs) == len(result.maps):
        figures[(method.name, INPUTS)] = tuple(result.inputs)  # each other input's map, per image
    result = result.maps if isinstance(result, MapFigures) else result
    changed = [name for name, version in versions.items() if given[name]._version != version]
    if changed:  # these are the recorded tensors themselves: reports and pictures would show the change
        raise UsageError(
            f"{arg('cam', method.name)}: the method changed ctx.{changed[0]} in place at {context.layer}, which would "
            f"change what hookviz recorded; work on a copy (ctx.{changed[0]}.clone()) or use ops without a trailing _"
        )
    if expected is None:
        expected = (context.activations.shape[0], *context.activations.shape[2:])
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != expected:
        got = (
            ("x".join(map(str, result.shape)) or "a single number") if isinstance(result, torch.Tensor) else type(result).__name__
        )
        raise UsageError(
            f"{arg('cam', method.name)}: the method returned {got} at {context.layer or 'the input'}, not one map per image "
            f"({'x'.join(map(str, expected))}); fix the method or choose another"
        )
    return result.detach().float().cpu().numpy()
