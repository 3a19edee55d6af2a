"""Explaining: one forward and backward pass over a batch, and what it tells about each image.

This is the stage between recording and the pictures: the task (``hookviz.tasks``) reads
the model's output and says what to explain, the objective is back-propagated, each layer
is reduced to its summaries and CAMs, and one frozen ``Explanation`` per image comes back,
holding numpy arrays only. The caller's model is left as it was: its mode, its parameters'
gradient flags and the process's precision settings are restored after the pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from hookviz.anatomy.featuremaps import DeclaredLayout, Layout, layout_hint, layout_of, shape_text
from hookviz.errors import OutputError, UsageError, arg
from hookviz.explaining.summaries import TENSOR_KEYS, channel_profile, channel_sum, channel_tiles, histogram, tensor_stats
from hookviz.inputs.images import PreparedSample, Preprocessing
from hookviz.options import ChannelSelection, PictureOptions
from hookviz.tasks import DEFAULT_TASK, ClassScore, ImagePrediction
from hookviz.trust.records import LayerTrust

__all__ = ["Explanation", "LayerResult", "PixelMap", "ClassScore", "SummaryOptions", "explain_batch", "full_precision"]


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
        maps: each tensor summed over channels into one map, a float32 numpy array (*spatial),
            ``None`` for a tensor absent or without a spatial layout. Every array here is numpy, as
            picture builders get it.
        profiles: each tensor's per-channel means, (C,), ``None`` without a spatial layout
            (what a baseline's fingerprint keeps beside the maps).
        tiles: the channels shown in the grids, for ``output`` and ``grad_output``.
        histograms: value histograms of ``output`` and ``grad_output`` (for TensorBoard).
        cam: the raw map (*spatial, at the layer's resolution) of the target's score, or ``None`` (see ``cam_note``).
        topk_cams: one ``(class, map)`` pair per top class when ``topk`` > 1.
        cams: each layer method's raw map of the target, by method name (``cam`` is the
            first's); ``cam_notes``: per method, why it made no map, or what to know about it.
        notes: what the report should say about this layer (a channel selection cut short).
        trust: how far to trust its CAM (``hookviz.trust``), when measured.
        top_channels: the channels that gave most to the target (``hookviz.concepts.glocal.TopChannels``),
            with ``--top-channels``; else ``None``.
        ranks: each tensor's spatial dimensions as a map (1 for a Conv1d's, 2, 3 for a
            Conv3d's), ``None`` without a spatial layout.
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
    cams: dict = field(default_factory=dict)
    cam_notes: dict = field(default_factory=dict)
    histograms: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    layout: Layout | None = None
    profiles: dict = field(default_factory=dict)
    ranks: dict = field(default_factory=dict)
    trust: LayerTrust | None = None
    top_channels: object = None
    input: np.ndarray | None = None
    output: np.ndarray | None = None
    grad_input: np.ndarray | None = None
    grad_output: np.ndarray | None = None

    def tensors(self) -> dict[str, np.ndarray | None]:
        return {key: getattr(self, key) for key in TENSOR_KEYS}

    def __repr__(self) -> str:
        return f"LayerResult({self.name!r}, {self.module_type}, output {self.shapes.get('output')})"


@dataclass(frozen=True)
class PixelMap:
    """One image's map by a method at the input's resolution (guided backprop, integrated
    gradients), of the target.

    Attributes:
        method: the method's name.
        map: the raw map, (C, H, W) as the model's input (its channels, its resolution), or
            ``None`` (see ``note``).
        note: why there is no map.
        layer: the layer whose CAM it used (guided Grad-CAM), else ``None``.
        figures: figures the method gave about this map (relevance propagation's
            conservation: ``relevance``, ``score``, ``conservation``), else ``None``.
        trust: the trust measures of its relevance map (``hookviz.trust.pixel_trust``), with
            ``--faithfulness`` or ``--sanity``; else ``None``.
        inputs: a sample of several inputs' (``hookviz.samples.multi``): each other input's map
            by name, at its own shape (a vector's, one value per feature), where the method maps them.
    """

    method: str
    map: np.ndarray | None
    note: str | None = None
    layer: str | None = None
    figures: dict | None = None
    trust: LayerTrust | None = None
    inputs: dict | None = None

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.map.shape)) if self.map is not None else self.note
        return f"PixelMap({self.method!r}, {shape})"


@dataclass(frozen=True)
class Explanation:
    """Everything hookviz learned about one image. Save it with ``.save(dir)``.

    Attributes:
        target: what the main CAM explains (``None`` when there is nothing to explain, such
            as an image without detections).
        prediction: what the model predicted, as its task says it (``hookviz.tasks``): a
            ``ClassPrediction``, a ``SegmentPrediction`` (mask and class fractions), a
            ``DetectPrediction`` (detections).
        task: what the model does: a task's name (``classify``, ``segment``, ``detect``).
        layer_choice: why the layer was chosen, when hookviz chose it.
        skipped_layers: selected by a pattern or type, but never called by the forward pass.
        asked: the target options and the task's own it was explained with (report.json keeps them).
        notes: what the report says about the image and the pass (first frame of an
            animation used, model explained in eval mode, ...).
        declared_layout: what the model declares about its token and channel layout
            (``None``: nothing, every layout was guessed).
        weights_sha256: the SHA-256 of the weights file, when a file was loaded.
        cam_method: the main CAM method (the first that maps layers: ``LayerResult.cam``),
            or ``none``; ``cam_methods``: every method asked for, in order.
        pixel_maps: per method of ``cam_methods`` that maps the input, its ``PixelMap``.
        trust: the ``TrustOptions`` its CAMs were measured with, as JSON (``{}``: none).
        prompts: the text prompts of a model with a text tower (its classes); ``()``: none.
        references: the ``identity.ReferenceIdentity`` of each reference an embedding was compared with.
        cams_as_panels: every CAM of the image is a panel of ``layer.topk_cams`` (a detector's, one
            per detection; the task's ``cams_as_panels``), none the main one with the top-K beside it.
    """

    image: PreparedSample
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
    task: str = DEFAULT_TASK
    prediction: ImagePrediction | None = field(default=None, repr=False)
    asked: dict = field(default_factory=dict, repr=False)
    layer_choice: str | None = None
    skipped_layers: tuple[str, ...] = ()
    declared_layout: DeclaredLayout | None = None
    weights_sha256: str | None = None
    cam_methods: tuple[str, ...] = ()
    pixel_maps: dict = field(default_factory=dict)
    trust: dict = field(default_factory=dict, repr=False)
    prompts: tuple[str, ...] = ()
    references: tuple = field(default=(), repr=False)
    cams_as_panels: bool = False

    def __getitem__(self, name: str) -> LayerResult:
        for layer in self.layers:
            if name in (layer.name, layer.requested):
                return layer
        raise KeyError(f"{name!r} not among " + ", ".join(repr(l.name) for l in self.layers))

    def __repr__(self) -> str:
        layers = ", ".join(layer.name for layer in self.layers)
        target = self.target.label if self.target is not None else None
        return f"Explanation({self.image.source.label!r}, model={self.model!r}, target={target!r}, layers=[{layers}])"

    def save(
        self,
        directory,
        pictures: PictureOptions | Sequence[str] | str | None = None,
        *,
        save_tensors: bool = False,
        **picture_options,
    ):
        """Write the pictures, ``report.json`` and (with ``save_tensors``) ``tensors.npz`` into ``directory``.

        Args:
            pictures: a ``PictureOptions``, or the names of the pictures (``("summary", "cam")``,
                ``"none"``; by default ``summary``, ``channels`` and ``cam``), with ``channels``,
                ``scale``, ``grad_channels`` as keywords.

        Returns:
            The list of files written, report last.
        """
        from hookviz.store.files import save_explanation

        if not str(directory).strip():  # a path reads '' as the working folder
            raise UsageError(f"{arg('directory', directory)}: give a folder name, such as 'out'")
        if pictures is None:
            pictures = PictureOptions(**picture_options)
        elif not isinstance(pictures, PictureOptions):
            pictures = PictureOptions(pictures=pictures, **picture_options)
        folder = Path(directory)
        if not folder.exists():
            try:
                folder.mkdir(parents=True)
            except OSError as exc:
                raise OutputError(
                    f"{arg('directory', folder)}: cannot create it ({exc.strerror}); choose another folder"
                ) from None
        return save_explanation(self, folder, pictures, save_tensors=save_tensors)

    def figure(self, layer: str | None = None, kind: str = "summary", **options):
        """A matplotlib ``Figure`` for one layer (the first by default) of a picture kind
        (``hookviz.render.kinds``): ``summary``, ``channels``, ``grad_channels``, ``cam``,
        ``cam_topk`` or a registered one's; ``None`` where it does not apply (a CAM of a layer
        without spatial layout). ``figure("cam")`` is the first layer's CAM, unless a layer is
        called ``cam``."""
        from hookviz.render.kinds import kinds, picture_kind

        if layer in {k.name for k in kinds()} and not any(layer in (l.name, l.requested) for l in self.layers):
            kind, layer = layer, None
        picture = picture_kind(kind)
        if picture.compares:
            raise UsageError(f"{arg('kind', kind)}: drawn from two runs compared (hookviz.diff_runs), not from one explanation")
        if layer is None and not self.layers:
            raise UsageError(
                f"{arg('kind', kind)}: no layer was recorded ({', '.join(self.cam_methods)} maps the input); "
                "save() draws its maps, and explain(..., layers=...) records a layer to draw"
            )
        chosen = self[layer] if layer is not None else self.layers[0]
        return picture.figure(self, chosen, **options)

    def _repr_html_(self) -> str:
        """What a notebook shows for ``hookviz.explain(...)`` as a cell's last line: the
        prediction, and per layer thumbnails of the summary and CAM pictures, embedded."""
        from hookviz.render.notebook import explanation_html

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


def explain_batch(explainer, images: Sequence[PreparedSample], summaries: SummaryOptions = SummaryOptions()) -> list[Explanation]:
    """Run one forward and backward pass over ``images`` (samples: ``hookviz.samples``) and explain each of them.

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

    from hookviz.explaining.cams import cam_gradients, layer_maps, pixel_maps, sources_for
    from hookviz.explaining.contrast import contrast_sources
    from hookviz.explaining.recording import Recording
    from hookviz.modelstate import evaluation, frozen_parameters

    module, options, methods = explainer.model.module, explainer.target, explainer.methods
    _refuse_inference_parameters(module)
    samples = explainer.batch(images)
    # Gradients are needed even when the caller's code runs under torch.no_grad or inference_mode.
    with (
        torch.inference_mode(False),
        torch.enable_grad(),
        full_precision(explainer.device),
        evaluation(module) as was_training,
        frozen_parameters(module),
    ):
        recorded = bool(explainer.layers)  # none: the methods' own passes are the run's (a plain pass reads the plan)
        with Recording(module, explainer.layers) as recording, _followed(module, recorded) as orders:
            with _measured(module, methods, samples) as measure, _graphed(recorded):  # what a row costs the passes after
                output = samples.forward()
            skipped = recording.check_complete()
            plan = explainer.task.plan(output, options, explainer.model.categories, len(images), explainer.task_options)
            wants_gradients = any(m.needs_gradients for m in methods)
            # Contrast scores (Finer-CAM's) are back-propagated through the same graph, later: it is kept only for them.
            contrast = contrast_sources(recording, explainer, plan, output) if any(m.needs_contrast for m in methods) else None
            extra = [(key, scalar) for key, scalar in plan.cams if scalar is not None] if wants_gradients else []
            recording.backward(plan.objective, retain_graph=bool(extra) or contrast is not None)
            captures = recording.captures
            _check_batch_first(captures, len(images))
            gradients = cam_gradients(recording, captures, plan, extra, keep=contrast is not None) if wants_gradients else None
            input_hw = tuple(samples.samples[0].tensor.shape[1:])  # (H, W); (L,) for a signal, (T, H, W) for a clip
            layouts = [_layouts(capture, orders, input_hw, explainer.declared_layout) for capture in captures]
        # Out of the recording: a method that re-scores runs the bare model, with no hook on it.
        sources = sources_for(explainer, methods, plan, samples, gradients, measure.cost, contrast)
        layer_methods = [m for m in methods if m.resolution == "layer"]  # the main one first
        layer_cams = [layer_maps(layer_methods, c, sources, n, layouts[n]["output"]) for n, c in enumerate(captures)]
        inputs = [m for m in methods if m.resolution == "input"]
        pixels = pixel_maps(inputs, captures, [found["output"] for found in layouts], sources)
        layer_cams, pixels = _smoothed(explainer, plan, samples, sources, layouts, layer_cams, pixels)
    made = _Made(captures, layouts, layer_cams, pixels, plan, skipped, was_training)
    return [_image_explanation(explainer, image, i, made, summaries) for i, image in enumerate(images)]


def _followed(module, recorded: bool):
    """Each op's channel order followed through the pass (``ChannelOrders``), where a layer is recorded."""
    from hookviz.anatomy.dataflow import ChannelOrders

    return ChannelOrders(module) if recorded else contextlib.nullcontext()


def _graphed(recorded: bool):
    """The main pass keeps its graph where a layer's gradients are read from it; else it reads only the plan."""
    import torch

    return contextlib.nullcontext() if recorded else torch.no_grad()


def _smoothed(explainer, plan, samples, sources, layouts, layer_cams, pixels):
    """The maps, each gradient method's made again on noisy copies and aggregated where ``--smooth``
    asks (``hookviz.explaining.smoothing``); else as they are."""
    smoothing = _smoothing(explainer.target)
    if smoothing is None:
        return layer_cams, pixels
    from hookviz.explaining.smoothing import smooth_maps

    return smooth_maps(explainer, smoothing, plan, samples, sources, layouts, layer_cams, pixels)


@dataclass(frozen=True)
class _Made:
    """What one pass made of its batch, for each image's ``Explanation``."""

    captures: list
    layouts: list
    layer_cams: list
    pixels: object
    plan: object
    skipped: list
    was_training: bool


def _smoothing(options):
    """The run's ``SmoothOptions`` when it asks for ``--smooth``, else ``None``."""
    from hookviz.methods.smoothing import SmoothOptions

    found = next((group for group in options.settings if isinstance(group, SmoothOptions)), None)
    return found if found is not None and found.smooth != "none" else None


def _refuse_inference_parameters(module) -> None:
    if any(parameter.is_inference() for parameter in module.parameters()):
        raise UsageError(
            "the model's parameters were made under torch.inference_mode, so no gradient can flow through "
            "them; build or load the model outside inference_mode"
        )


def _image_explanation(explainer, image, i: int, made: _Made, summaries: SummaryOptions) -> Explanation:
    """Image ``i``'s ``Explanation``, with the pass's notes and its input-resolution maps."""
    from hookviz.modelstate import TRAIN_MODE_NOTE

    notes = list(explainer.notes)
    if made.was_training:
        notes.append(TRAIN_MODE_NOTE)
    if made.skipped:
        notes.append(_skipped_note(made.skipped))
    found = _explanation(explainer, image, i, made.captures, made.layouts, made.layer_cams, made.plan, summaries, tuple(notes))
    found = replace(
        found, skipped_layers=tuple(spec.label for spec in made.skipped), pixel_maps=_image_pixels(made.pixels, i, made.plan)
    )
    return _noted(found, explainer.methods, explainer.target)


def _measured(module, methods, samples):
    """Measures the main forward pass when a method makes passes of many rows after it."""
    from hookviz.budget import measuring

    if not any(m.needs_rescoring or m.needs_input_gradients or m.needs_hessian or m.needs_layer_gradients for m in methods):
        return contextlib.nullcontext(SimpleNamespace(cost=None))
    row = sum(tensor.numel() * tensor.element_size() for tensor in samples.samples[0].tensors.values())
    return measuring(module, len(samples), row)


def _noted(explanation: Explanation, methods, options) -> Explanation:
    """``explanation`` with a note for each of its maps that is not finite, each caveat its
    input methods have about their map of this image (``Method.caveat``), and each relevance
    map that conserves its score badly (``relevance.conservation_note``)."""
    from hookviz.explaining.checks import nonfinite_notes
    from hookviz.methods.relevance import conservation_note

    notes = list(nonfinite_notes(explanation))
    label, given = explanation.image.source.label, explanation.image.tensor[None]  # type: ignore[index]
    for method in methods:
        found = explanation.pixel_maps.get(method.name)
        caveat = method.note(given, options) if found and found.map is not None else None
        notes += [f"{label}: {method.name}: {caveat}"] if caveat else []
        unconserved = conservation_note(found.figures) if found and found.figures else None
        notes += [f"{label}: {method.name}: {unconserved}"] if unconserved else []
    return replace(explanation, notes=(*explanation.notes, *notes)) if notes else explanation


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


def _explanation(explainer, image, i: int, captures, layouts, layer_cams, plan, summaries, notes) -> Explanation:
    from hookviz.explaining.cams import image_cams

    prediction = plan.predictions[i]
    keys = [key for key, _ in plan.cams]
    # The CAMs drawn as panels: every one (a detector's, one per detection), or those beyond the main one (top-K).
    as_panels = explainer.task.cams_as_panels
    panels = keys if as_panels else keys[1:]
    declared = explainer.declared_layout
    unmapped = _no_layer_method(explainer.target.cam)
    layers = tuple(
        _layer_result(capture, i, image_cams(cams, i, prediction, keys, panels), summaries, found, unmapped)
        for capture, found, cams in zip(captures, layouts, layer_cams)
    )
    main = explainer.method
    return Explanation(
        image=image,
        model=explainer.model.name,
        weights=explainer.model.weights,
        weights_sha256=explainer.model.weights_sha256,
        preprocessing=explainer.preprocessing,
        objective=explainer.task.objective_name(explainer.target, explainer.task_options),
        cam_method=main.name if main is not None else "none",
        cam_methods=explainer.target.methods,
        logits=np.array(plan.logits[i], dtype=np.float32),
        target=prediction.target,
        top5=prediction.top5,
        layers=layers,
        notes=tuple(dict.fromkeys((*image.source.notes, *notes, *prediction.notes))),
        task=explainer.task.name,
        prediction=prediction,
        asked=explainer.asked,
        prompts=explainer.model.prompts,
        references=explainer.references,
        layer_choice=explainer.layer_choice,
        declared_layout=declared,
        cams_as_panels=as_panels,
    )


def _image_pixels(pixels, i: int, plan) -> dict:
    """Image ``i``'s share of the batch's input-resolution maps, by method."""
    from hookviz.explaining.cams import NOTHING_TO_EXPLAIN

    keys = [key for key, _ in plan.cams]
    nothing = not keys or plan.predictions[i].cam_targets.get(keys[0]) is None
    found = {}
    for name in pixels.order:
        layer = pixels.layers.get(name)
        if name in pixels.notes:
            found[name] = PixelMap(name, None, pixels.notes[name])
        elif nothing:
            found[name] = PixelMap(name, None, NOTHING_TO_EXPLAIN, layer)
        else:
            figures = pixels.figures[name][i] if name in pixels.figures else None
            others = pixels.inputs[name][i] if name in pixels.inputs else None
            found[name] = PixelMap(name, pixels.maps[name][i].copy(), layer=layer, figures=figures, inputs=others)
    return found


def _no_layer_method(cam: str) -> str:
    """The CAM note of every layer when no asked method maps layers."""
    return arg("cam", "none") if cam == "none" else f"no CAM: {arg('cam', cam)} maps the input, not the layer"


def _layer_result(capture, i: int, cams, summaries: SummaryOptions, layouts: dict, unmapped: str) -> LayerResult:
    arrays = {key: _one(getattr(capture, key), i) for key in TENSOR_KEYS}
    tiles, layer_notes = {}, []
    unread = [which for which in ("input", "output") if layouts[which] is not None and not layouts[which].spatial]
    if unread:
        shapes = " and ".join(f"{which} {shape_text(arrays[which].shape)}" for which in unread)
        layer_notes.append(
            f"{capture.name}: {shapes} fit{'s' if len(unread) == 1 else ''} channels first and last alike, so "
            f"{'it is' if len(unread) == 1 else 'they are'} drawn as no map; {layout_hint()}"
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
        ranks={
            k: layouts[k].rank if v is not None and layouts[k] is not None and layouts[k].spatial else None
            for k, v in arrays.items()
        },
        tiles=tiles,
        cam=cams.cam,
        cam_note=cams.cam_note if cams.cams or cams.cam_notes else unmapped,
        topk_cams=cams.topk_cams,
        cams=cams.cams,
        cam_notes=cams.cam_notes,
        histograms={k: histogram(arrays[k]) for k in ("output", "grad_output")} if summaries.histograms else {},
        notes=tuple(dict.fromkeys(layer_notes)),
        layout=layouts["output"],
        **(arrays if summaries.keep_tensors else {}),
    )


def _one(tensor, i: int) -> np.ndarray | None:
    """Image ``i`` of a batch tensor as a float32 array with a batch dimension of 1."""
    if tensor is None:
        return None
    return tensor[i : i + 1].detach().float().cpu().numpy().copy()
