"""The explainer: one object that holds a loaded model, its preprocessing, the layers to
record and what to explain, and explains images with them.

``hookviz run`` builds one per run and feeds it batches; ``hookviz.explain``
(``explaining.notebook``) builds one for a single image. Both go through ``Explainer.create``, so layer defaulting, input-size
checks and target checks are written once, and both refuse the same bad values.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any

from hookviz.anatomy.featuremaps import DeclaredLayout
from hookviz.anatomy.layers import LayerSpec, default_layer, resolve_layers
from hookviz.errors import UsageError, arg
from hookviz.explaining.passes import Explanation, SummaryOptions, explain_batch
from hookviz.inputs.images import PreparedSample, Preprocessing
from hookviz.models.sources.base import LoadedModel
from hookviz.options import InputOptions, LayerOptions, TargetOptions, TrustOptions
from hookviz.options.declared import asked_of

__all__ = ["Explainer", "check_named_task"]


@dataclass(frozen=True)
class Explainer:
    """A model ready to explain images. Build it with ``Explainer.create``.

    Attributes:
        model: the loaded model (its module is where it will run).
        preprocessing: the model's own, with the caller's overrides.
        layers: the layers to record, resolved.
        target: what to explain.
        task_options: the task's own option group (``DetectOptions`` for a detector), or
            ``None`` for a task without one.
        layer_choice: why hookviz chose the layer, when the caller named none.
        max_pixels: photos with more pixels than this are refused.
        declared_layout: what the model declares about its tokens and channel order (the
            loaded model's own word, else what ``geometry`` reads from the module).
        trust: how far to trust each CAM: the measures ``hookviz.trust`` adds to each layer.
        sample_settings: the option group of the model's sample kind (``hookviz.samples``), as
            its samples are loaded and prepared with, or ``None`` for a kind without one.
    """

    model: LoadedModel
    preprocessing: Preprocessing
    layers: tuple[LayerSpec, ...]
    target: TargetOptions
    layer_choice: str | None = None
    max_pixels: int = InputOptions().max_pixels
    declared_layout: DeclaredLayout | None = None
    task_options: Any = None
    trust: TrustOptions = TrustOptions()
    sample_settings: Any = None

    @classmethod
    def create(
        cls,
        model: LoadedModel,
        *,
        layers: LayerOptions = LayerOptions(),
        inputs: InputOptions = InputOptions(),
        target: TargetOptions = TargetOptions(),
        preprocessing: Preprocessing | None = None,
        task_options: Sequence = (),
        trust: TrustOptions = TrustOptions(),
        sample_options: Sequence = (),
    ) -> "Explainer":
        """Check the options against the model and resolve its layers.

        Args:
            preprocessing: replaces the model's own before ``inputs`` apply.
            task_options: tasks' own option groups (``DetectOptions(...)``); the model's task
                takes its own (its defaults when none is given); another task's group must
                hold only its defaults.
            trust: the trust measures to add to each CAM (``hookviz.trust``).
            sample_options: sample kinds' option groups; the model's kind takes its own (as
                ``task_options``, ``hookviz.samples.kind_settings``).

        Raises:
            UsageError: a layer, target or input size the model cannot take, or another
                task's or sample kind's options.
        """
        from hookviz.anatomy.geometry import declared_layout
        from hookviz.samples import get_sample_kind, kind_settings, settings_for_model
        from hookviz.tasks import get_task
        from hookviz.tasks.targets import parse_target

        _refuse_raw_yolo(model)
        model = _chosen_kind(_uncompiled(model), sample_options)
        kind = get_sample_kind(model.sample_kind)
        settings = settings_for_model(kind, kind_settings(kind, sample_options, model.name), model)
        processing = _run_processing(model, preprocessing, settings)
        model, dry = _recognised(_chosen_task(model, task_options), inputs.apply(processing), settings)
        task = get_task(model.task)
        task_group = _task_group(task, task_options, model.name)
        _check_asked(task, model, target, trust, dry)
        if not processing.applies_transform:  # the object is applied as it is (inputs.apply refused overrides)
            processing = task.preprocessing(processing, inputs)
        _check_input_size(model, processing, inputs)
        parse_target(target.target, model.categories)  # a class name or index the model lacks fails now
        reader = cls(model, processing, (), target, max_pixels=inputs.max_pixels, sample_settings=settings)
        # bound before the layers' dry pass: it fails fast
        task_group = task.bind(task_group, model, reader.prepare, reader.device, target)
        declared = model.declared_layout if model.declared_layout is not None else declared_layout(model.module)
        declared = _with_layout(declared, layers.layout)
        specs, choice = _chosen_layers(model, task, layers, processing, declared, settings, target)
        return cls(model, processing, specs, target, choice, inputs.max_pixels, declared, task_group, trust, settings)

    # -- what the pass reads

    @property
    def task(self):
        from hookviz.tasks import get_task

        return get_task(self.model.task)

    @property
    def asked(self) -> dict:
        """What was asked of the task, as report.json keeps it (what ``--skip-existing``
        compares): the target options (with the methods' settings under ``settings``, by the
        methods that declare them), the task's own, and the sample kind's under ``sample``."""
        task_options = self.task_options
        asked = {} if task_options is None else asked_of(task_options)
        settings = self.sample_settings
        sample = {} if settings is None else {"sample": asked_of(settings)}
        return {**self.target.asked(), **asked, **sample}

    @property
    def references(self) -> tuple:
        """The identities of the references an embedding is compared with (``EmbedOptions``), or ``()``."""
        return tuple(getattr(self.task_options, "references", ()))

    @property
    def methods(self) -> tuple:
        """Every CAM method asked for (``hookviz.methods.Method``), in order; ``()`` for ``cam='none'``."""
        from hookviz.methods import get_method

        return tuple(get_method(name) for name in self.target.methods)

    @property
    def method(self):
        """The main CAM method: the first that maps the layer (its maps are ``LayerResult.cam``
        and the top-K), or ``None``."""
        return next((m for m in self.methods if m.resolution == "layer"), None)

    @property
    def device(self) -> str:
        import torch

        return str(next(self.model.module.parameters(), torch.zeros(0)).device)

    @property
    def notes(self) -> tuple[str, ...]:
        return self.model.notes

    # -- explaining

    def prepare(self, image) -> PreparedSample:
        """A photo (a path, a PIL image, an H x W x 3 uint8 array or float one in 0..1, a uint8 tensor as
        ``torchvision.io.read_image`` returns it) preprocessed as the model expects, or a float
        (C, H, W) tensor (a signal's (C, L), a clip's (C, T, H, W)) taken as the model's input as it is. A model of another sample kind
        (``hookviz.samples``) takes the path of a sample's key file; a sample is taken as it is.

        Raises:
            ImageError: the file cannot be read or used.
            UsageError: an array or tensor of a shape that is neither, or an array of pixels of another dtype.
        """
        from hookviz.explaining.tensor_inputs import sample_of_tensor, signal_or_clip
        from hookviz.samples.photo import prepared_photo

        if isinstance(image, PreparedSample) or _is_sample(image):
            return image
        if isinstance(image, Mapping):
            return self._inputs(image)
        if self.kind.name != "photo":
            return self._sample(image)
        signal = signal_or_clip(image, self.preprocessing.channels)
        if signal is not None:  # a signal's or a clip's float tensor: the model's input as it is
            return sample_of_tensor(signal, self.preprocessing)
        self.check_photos()
        return prepared_photo(image, self.preprocessing, self.max_pixels)

    def check_photos(self) -> None:
        """Raise UsageError when the model's sample is a photo but the model takes none: its first
        convolution a Conv1d or a Conv3d, and a blank photo fails in it (a model of signals or clips
        given a photo failed in the model's own words, image by image)."""
        from hookviz.modelstate import input_rank

        rank = input_rank(self.model.module)
        if self.kind.name != "photo" or rank == 2 or self._photo_failure is None:
            return
        takes, stem = ("signals, (C, L) tensors", "Conv1d") if rank == 1 else ("clips, (C, T, H, W) tensors", "Conv3d")
        raise UsageError(
            f"{arg('model', self.model.name)} takes {takes} (its first convolution is a {stem}), not photos: a photo "
            f"fails in it ({self._photo_failure}); give hookviz.explain such a tensor, or have the model name a sample "
            "kind that reads its files (hookviz_sample_kind)"
        )

    @functools.cached_property
    def _photo_failure(self) -> str | None:
        from hookviz.anatomy.layers import photo_failure

        return photo_failure(self.model.module, self.preprocessing.trace_size, self.preprocessing.channels)

    def _sample(self, source):
        """A sample of the model's own kind, from the path of its key file (its photo)."""
        import os
        from pathlib import Path

        kind = self.kind
        if not isinstance(source, (str, os.PathLike)):
            raise UsageError(
                f"{arg('image', type(source).__name__)}: {self.model.name} takes {kind.words}, given as the path of "
                "its file (or a sample its kind prepared)"
            )
        loaded = kind.load(Path(source), self.max_pixels, self.sample_settings)
        return kind.prepare(loaded, self.preprocessing, self.max_pixels, self.sample_settings)

    def _inputs(self, given: Mapping):
        """A sample of several inputs from ``given`` (forward argument name or position: a path or a value in memory)."""
        from hookviz.samples import get_sample_kind, settings_for_model
        from hookviz.samples.multi import MULTI, MultiOptions

        if self.model.sample_kind != MULTI:
            raise UsageError(
                f"{arg('image', 'a mapping')}: {self.model.name} takes {self.kind.words}; give explain() the mapping "
                "(or hookviz.run), or bind the inputs with input=..."
            )
        base = self.sample_settings if isinstance(self.sample_settings, MultiOptions) else MultiOptions()
        settings = settings_for_model(get_sample_kind(MULTI), replace(base, input=tuple(given.items()), sources=()), self.model)
        bound = get_sample_kind(MULTI).bind(settings)  # type: ignore[attr-defined]  # the multi kind binds
        return bound.prepare(bound.loaded_in_memory(self.max_pixels), self.preprocessing, self.max_pixels)

    @property
    def kind(self):
        """What one sample of the model is (``hookviz.samples.SampleKind``): a photo unless the model says;
        a kind that binds the run's settings (the multi-input kind's ``--input``) as they bind it."""
        from hookviz.samples import get_sample_kind

        kind = get_sample_kind(self.model.sample_kind)
        bind = getattr(kind, "bind", None)
        return kind if bind is None or self.sample_settings is None else bind(self.sample_settings)

    def batch(self, samples: Sequence):
        """``samples`` as a ``samples.SampleBatch``: the model, its task and this explainer's options,
        which every pass over them (the main one, re-scoring, input gradients, trust) runs with."""
        from hookviz.samples import SampleBatch

        return SampleBatch(samples, self.task, self.model.module, self.device, self.target, self.task_options)

    def explain_batch(self, images: Sequence[PreparedSample], summaries: SummaryOptions = SummaryOptions()) -> list[Explanation]:
        """Explain prepared images in one forward and backward pass (see ``explaining.passes.explain_batch``),
        then measure how far to trust each CAM when ``trust`` asks (``hookviz.trust``)."""
        explanations = explain_batch(self, images, summaries)
        if not self.trust.any:
            return explanations
        from hookviz.explaining.trust import assess

        return assess(self, images, explanations)

    def explain(self, image, summaries: SummaryOptions = SummaryOptions()) -> Explanation:
        """Explain one image (a path, PIL image or tensor)."""
        return self.explain_batch([self.prepare(image)], summaries)[0]

    def __repr__(self) -> str:
        return f"Explainer({self.model!r}, layers={[s.label for s in self.layers]}, target={self.target.target!r})"


def _task_group(task, given: Sequence, model: str):
    """The option group of ``task`` among ``given`` (its defaults when none is).

    Raises:
        UsageError: something else than a task's option group, two of one task's, or another
            task's group with a value of its own (``--score-threshold`` for a classifier).
    """
    from hookviz.tasks import TASKS

    groups = tuple(t.options_type for t in TASKS.values() if t.options_type is not None)
    for options in given:
        if not isinstance(options, groups):
            names = ", ".join(group.__name__ for group in groups)
            raise UsageError(f"{arg('task_options', type(options).__name__)}: expected a task's option group ({names})")
        if task.options_type is None or not isinstance(options, task.options_type):
            _refuse_others(options, task, model)
    if task.options_type is None:
        return None
    of_task = [options for options in given if isinstance(options, task.options_type)]
    if len(of_task) > 1:
        raise UsageError(f"{arg('task_options')}: {len(of_task)} {task.options_type.__name__}s; give one")
    return of_task[0] if of_task else task.options_type()


def _refuse_others(options, task, model: str) -> None:
    """Raise UsageError when another task's option group (``options``) holds a value other
    than its default: ``model``, a ``task`` model, would silently ignore it."""
    from hookviz.tasks import TASKS

    owner = next(t for t in TASKS.values() if t.options_type is not None and isinstance(options, t.options_type))
    for name, value, default in _given_values(options):
        if not _same(value, default):
            shown = arg(name, value) if isinstance(value, (str, int, float)) else arg(name)
            raise UsageError(
                f"{shown}: only {_a(owner.name)} model ({owner.words}) takes it, and {model} is {_a(task.name)} model "
                f"({task.words}); drop {arg(name)} or choose {_a(owner.name)} model"
            )


def _a(word: str) -> str:
    """``word`` with its indefinite article: ``an embed``, ``a detect``."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _given_values(options):
    """``(name, value, default)`` of each field the caller sets in an option group."""
    for entry in fields(options):
        if entry.init and entry.compare:
            default = entry.default_factory() if entry.default is MISSING else entry.default  # type: ignore[misc]
            yield entry.name, getattr(options, entry.name), default


def _same(value, default) -> bool:
    try:
        return bool(value == default)
    except (TypeError, ValueError, RuntimeError):  # tensors compare element by element
        return False


def _chosen_kind(model: LoadedModel, given: Sequence) -> LoadedModel:
    """``model`` made of the multi-input kind when ``given`` binds inputs (``--input``) and it takes photos."""
    from hookviz.samples.multi_bindings import MULTI, given_inputs
    from hookviz.samples.photo import PHOTO

    if model.sample_kind == PHOTO and given_inputs(given) is not None:
        return replace(model, sample_kind=MULTI)
    return model


def _uncompiled(model: LoadedModel) -> LoadedModel:
    """``model`` with the module ``torch.compile`` wrapped in place of the wrapper, named as the
    caller knows it (``ResNet``, not ``OptimizedModule``), and a note; ``model`` when not compiled.
    The caller's wrapper is left as it is: hooks go on the wrapped module's layers, then come off."""
    from hookviz.modelstate import compiled_original

    original = compiled_original(model.module)
    if original is None:
        return model
    name = type(original).__name__ if model.name == type(model.module).__name__ else model.name
    note = (
        f"{name} was given compiled (torch.compile): the module it wraps is explained, eagerly, its layers "
        "named as in that module (layer4, not _orig_mod.layer4)"
    )
    return replace(model, name=name, module=original, notes=(*model.notes, note))


def _refuse_raw_yolo(model: LoadedModel) -> None:
    """An ultralytics model handed over as it is (a factory's, a caller's module): its raw
    output is neither logits nor torchvision's detections; the ``yolo:`` source wraps it."""
    kind = type(model.module)
    if kind.__module__.split(".")[0] == "ultralytics":
        raise UsageError(
            f"{arg('model', model.name)}: an ultralytics {kind.__name__}, which hookviz explains only through "
            f"{arg('model', 'yolo:PATH.pt')} (torch.save it) or {arg('model', 'yolo:CONFIG.yaml')}"
        )


def check_named_task(task: str, given: Sequence) -> None:
    """Raise UsageError when the caller named ``task`` and gave another task's option group
    that would choose its own (``--task classify --target-image``): which one they meant is
    theirs to say, not ours to guess."""
    from hookviz.tasks import TASKS, task_words

    if task not in TASKS:  # auto, or a name ModelOptions refuses
        return
    for options in given:
        chooser = next((t for t in TASKS.values() if t.options_type is not None and isinstance(options, t.options_type)), None)
        if chooser is not None and chooser.name != task and chooser.chosen_by(options):
            raise UsageError(
                f"{arg('task', task)} and {arg('target_image')}: a reference makes it an {task_words(chooser.name)} "
                f"run, not {task_words(task)}; drop {arg('target_image')} to explain the {task} output, or drop "
                f"{arg('task')} to explain the similarity to the reference"
            )


def _chosen_task(model: LoadedModel, given: Sequence) -> LoadedModel:
    """``model`` made the task of an option group that chooses it (``target_image``: an
    embedding's), when its source stated no task or the default one."""
    from hookviz.tasks import DEFAULT_TASK, TASKS

    if model.task not in ("auto", DEFAULT_TASK):
        return model
    for options in given:
        chooser = next((t for t in TASKS.values() if t.options_type is not None and isinstance(options, t.options_type)), None)
        if chooser is not None and chooser.chosen_by(options):
            if model.prompts:  # its output is its logits over the prompts: their cosine similarity means nothing
                raise UsageError(
                    f"{arg('target_image')}: {model.name} is explained by its text prompts, one class each; "
                    f"drop {arg('target_image')} and describe the reference in a prompt"
                )
            return replace(model, task=chooser.name)
    return model


def _run_processing(model: LoadedModel, preprocessing: Preprocessing | None, settings) -> Preprocessing:
    """The preprocessing of this run: the caller's or the model's, one channel for a grayscale
    model, and a clip's frames as the kind settled them (``--frames 8``, not the weights' 16)."""
    from hookviz.modelstate import input_channels

    processing = preprocessing or model.preprocessing
    if input_channels(model.module) == 1 and not processing.applies_transform:  # a transform object makes its own
        processing = replace(processing, channels=1)
    frames = getattr(settings, "frames", None)
    if processing.frames is not None and isinstance(frames, int) and frames != processing.frames:
        processing = replace(processing, frames=frames)
    return processing


def _recognised(model: LoadedModel, processing: Preprocessing, settings=None):
    """``model`` with its task, where it says ``auto``: read from its output on a blank sample (also
    returned; ``None`` when none was needed), probed at the size asked for: some models take only that."""
    from hookviz.samples import get_sample_kind
    from hookviz.tasks import recognise_task
    from hookviz.tasks.embed import Embed, headless

    if model.task == "auto" and headless(model.module):  # its "logits" would be embedding dimensions
        model = replace(model, task=Embed.name)
    if model.task != "auto":
        return model, None
    dry = _dry_output(model.module, get_sample_kind(model.sample_kind), processing, settings)
    return replace(model, task=recognise_task(dry)), dry


def _dry_output(module, kind, preprocessing: Preprocessing, settings=None):
    """A model's output on a blank sample of its ``kind``: what a factory's model does is read from it."""
    from hookviz.anatomy.layers import dry_output

    return dry_output(module, preprocessing.trace_size, preprocessing.channels, blank=kind.blank(preprocessing, settings))


def _chosen_layers(
    model: LoadedModel, task, layers: LayerOptions, processing: Preprocessing, declared, settings=None, target=TargetOptions()
):
    """The layers to record, and why hookviz chose them when the caller named none (else ``None``): none
    where every method asked for maps the input without a layer's CAM (``lrp``), which no layer shows."""
    from hookviz.samples import get_sample_kind

    if layers.given:
        return tuple(resolve_layers(model.module, layers.layers, layers.layer_types)), None
    unlayered = _input_only(target)
    if unlayered:
        maps = "maps" if len(unlayered) == 1 else "map"
        return (), f"no layer recorded, as {', '.join(unlayered)} {maps} the input (name one with {arg('layers')} to record it)"
    if model.default_layers:  # the source knows them (a YOLO's neck outputs)
        specs = resolve_layers(model.module, model.default_layers)
        return tuple(specs), f"{', '.join(s.label for s in specs)}, {model.default_layers_reason}"
    root, blank = task.default_root(model.module), get_sample_kind(model.sample_kind).blank(processing, settings)
    spec, reason = default_layer(model.module, processing.trace_size, processing.channels, declared, root=root, blank=blank)
    return (spec,), f"{spec.label} ({spec.module_type}), {reason}"


def _input_only(target: TargetOptions) -> tuple[str, ...]:
    """The methods asked for, when each maps the input and reads no layer (``lrp``, ``integrated-gradients``;
    not guided Grad-CAM, which takes a layer's CAM); else ``()``."""
    from hookviz.methods import get_method

    methods = [get_method(name) for name in target.methods]
    if methods and all(m.resolution == "input" and not m.needs_gradients for m in methods):
        return tuple(m.name for m in methods)
    return ()


def _with_layout(declared: DeclaredLayout | None, layout: str) -> DeclaredLayout | None:
    """The model's declaration with the caller's word on maps that read both ways (``layout``)."""
    if layout == "auto":
        return declared
    said = f"channels_last={layout == 'nhwc'} as asked ({arg('layout', layout)})"
    base = declared if declared is not None else DeclaredLayout()
    return replace(base, channels_last=layout == "nhwc", origin="; ".join(filter(None, (base.origin, said))))


def _check_input_size(model: LoadedModel, preprocessing: Preprocessing, inputs: InputOptions) -> None:
    if model.input_size is None:
        return
    height, width = model.input_size
    if preprocessing.square and (preprocessing.size, preprocessing.size) != (height, width):
        if inputs.crop is None and inputs.resize is not None:  # the crop shrank to a resize below it
            raise UsageError(
                f"{arg('resize', inputs.resize)}: {model.name} takes {height}x{width} inputs, cropped from a "
                f"shorter side of at least {height}; pass {arg('resize')} {max(height, width)} or more, or leave it out"
            )
        raise UsageError(
            f"{arg('crop', preprocessing.size)}: {model.name} takes {height}x{width} inputs, not "
            f"{preprocessing.size}x{preprocessing.size}; pass {arg('crop', height)} or leave it out"
        )


def _is_sample(value) -> bool:
    """Whether ``value`` is already a sample (``hookviz.samples.Sample``): named tensors and a source."""
    return isinstance(getattr(value, "tensors", None), dict) and hasattr(value, "source") and hasattr(value, "shown")


def _check_asked(task, model: LoadedModel, target: TargetOptions, trust: TrustOptions, dry) -> None:
    """Refuse what the model cannot be asked, before any image: a target, methods or trust
    measures its task cannot take, and (from its ``dry`` output, where one was read) a class
    index or output key the output lacks."""
    from hookviz.explaining.trust import check as check_trust

    if target.objective == "logprob":
        raise UsageError(
            f"{arg('objective', 'logprob')}: only a vision-language model's answer tokens take it; choose logit or ce"
        )
    task.check(target)
    if dry is not None:  # a class index or output key the output lacks fails now, not at the first batch
        task.check_output(dry, target, model.categories)
    for method in target.methods:
        _check_method(method, model, task)
    check_trust(task, target, trust, model.module)


def _check_method(name: str, model, task) -> None:
    """Refuse a model the method cannot explain (guided backprop without a ReLU; attention
    that cannot be reached, as the ``LoadedModel`` declares it or its modules show; a contrast
    of classes for a task without them), before any image."""
    from hookviz.anatomy.attention import attention_sites
    from hookviz.methods import get_method

    method = get_method(name)
    if method.needs_contrast and not getattr(task, "contrasts", False):
        raise UsageError(
            f"{arg('cam', name)} without comparison classes: {model.name} is {_a(task.name)} model ({task.words}), "
            "whose target has no other classes to set it against; choose a classifier or another method"
        )
    if method.needs_attention:
        attention_sites(model.module, name, model.declared_attention)
    if method.check is not None:
        method.check(model.module)
