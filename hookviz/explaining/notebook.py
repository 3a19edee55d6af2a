"""The notebook form of ``hookviz run``: ``hookviz.explain(model, image, ...)``, its keywords
(``ExplainArgs``, and the settings methods, tasks and sample kinds declare) turned into the
option groups ``Explainer.create`` takes, and its model (a name, a ``LoadedModel`` or a bare
module) into a ``LoadedModel``; then the one path every explanation takes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from hookviz.errors import UsageError, arg, did_you_mean
from hookviz.explaining.explainer import Explainer, check_named_task
from hookviz.explaining.passes import Explanation
from hookviz.inputs.images import Preprocessing, load_image
from hookviz.models.sources.base import LoadedModel, refuse_torchscript
from hookviz.options import InputOptions, LayerOptions, ModelOptions, TargetOptions, TrustOptions

__all__ = ["ExplainArgs", "explain"]


@dataclass(frozen=True)
class ExplainArgs:
    """``explain()``'s own keywords (the settings methods and tasks declare are keywords too:
    ``hookviz.options.declared``; integrated gradients' ``steps`` and ``ig_baseline``, a
    detector's ``score_threshold``, ``max_detections`` and ``box_objective``, an embedding's
    ``target_image``).

    Attributes:
        objective, cam, topk: as the ``hookviz run`` options of the same names; ``cam`` takes
            several methods as ``"gradcam,eigencam"`` or a list (``result["layer4"].cams``).
        output_key: which entry of the model's output holds the logits, when it returns several.
        task: ``classify``, ``segment``, ``detect`` or ``embed``; by default the model's source
            says, or (for a bare module) what its output looks like.
        layer_types: also record every module of these classes.
        layout: ``nchw`` or ``nhwc``: how to read a map whose shape fits both orders
            (1x96x96x96) when neither the model nor the ops that made it say which; with
            ``auto`` such a map gets no CAM and a note.
        preprocessing: replaces the model's own transform.
        inputs: overrides of the transform (``InputOptions(crop=256)``).
        categories: class names when ``model`` is a bare module.
        faithfulness: also measure each CAM's deletion, insertion and ROAD curves
            (``layer.trust``; a classifier's only).
        sanity: also run the cascading randomisation check on each CAM (``layer.trust.sanity``).
        weights: for a model name: what ``load_model`` loads (``DEFAULT``, ``none``, a file).
        prompts: for the name of a model with a text tower (``open_clip:ViT-B-32``): its
            classes, as ``--prompt`` (``hookviz.options.read_prompts`` reads a file of them);
            for a vision-language model (``hf:FOLDER`` of a LLaVA), the one question about the photo.
        answer, max_new_tokens, tokens, words: a vision-language model's, as the ``hookviz run``
            options of the same names; it returns a ``hookviz.vlm.explain.VlmExplanation``.

    A detector's ``score_threshold`` and ``max_detections`` choose which detections are
    explained, ``box_objective`` what explains each (``score``, or ``score+iou``:
    pytorch-grad-cam's ``FasterRCNNBoxScoreTarget``). An embedding model's ``target_image``
    is a reference photo (a path, a folder of photos averaged into one concept, an image as
    ``image`` takes) or a concept's embedding (a (D,) or (1, D) tensor), or a list of them, one
    CAM each; the objective is the cosine similarity to it (``hookviz.tasks.EmbedOptions``).
    """

    objective: str = "logit"
    cam: str | Sequence[str] = "gradcam"
    topk: int = 1
    output_key: str | int | None = None
    task: str = "auto"
    layer_types: Sequence[str] | str = ()
    layout: str = "auto"
    preprocessing: Preprocessing | None = None
    inputs: InputOptions | None = None
    categories: Sequence[str] | None = None
    faithfulness: bool = False
    sanity: bool = False
    weights: str = "DEFAULT"
    prompts: Sequence[str] | str = ()
    answer: str | None = None
    max_new_tokens: int = 16
    tokens: str | None = None
    words: str | None = None


def explain(model, image, layers: Sequence[str] | str | None = None, target: str | int = "top1", **keywords: Any) -> Explanation:
    """Explain one image with ``model``: the notebook form of ``hookviz run``.

    The model is explained in eval mode without gradients for its parameters; its mode,
    its parameters' flags and the process's random state are the same afterwards.

    Example::

        result = hookviz.explain(model, "cat.png", layers=["layer4"], target="tabby")
        result["layer4"].cam, result.figure("layer4", "cam"), result.save("out/")

    Args:
        model: an ``nn.Module``, a ``LoadedModel``, or a model name for ``load_model``.
        image: a photo (a path, a PIL image, an H x W x 3 uint8 array or float one in 0..1, or a uint8 (C, H, W)
            tensor as ``torchvision.io.read_image`` returns it, uint16 for a 16-bit PNG), preprocessed as the model
            expects; or a float (C, H, W) tensor, taken as the model's input as it is (a note
            says so when its values look like raw pixels).
        layers: layer paths or globs; the usual CAM layer when omitted, none where every method asked for maps
            the input (``cam="lrp"``).
        target: ``"top1"``, a class index, or a class name.
        keywords: ``ExplainArgs``' fields, and the settings that methods and tasks declare
            (``steps=8``, ``score_threshold=0.3``, ``target_image=...``).

    Returns:
        An ``Explanation``: tensors, CAMs, top-5; ``.save(dir)`` and ``.figure()``.

    Raises:
        HookvizError: a bad argument (``UsageError``: an unknown keyword names the close ones),
            or an image that cannot be used.
    """
    if isinstance(image, Mapping):  # a model of several inputs: the mapping binds them (``hookviz.samples.multi``)
        if keywords.get("input"):
            raise UsageError(f"{arg('input')}: the image is a mapping of inputs already; give one or the other")
        keywords["input"] = tuple(image.items())
    explain_args = {name: keywords.pop(name) for name in [f.name for f in fields(ExplainArgs)] if name in keywords}
    args = ExplainArgs(**explain_args)
    groups = _option_groups(
        args, layers, target, keywords
    )  # before a named model loads: what no model could take is refused first
    loaded = _model_to_explain(model, args.categories, args.task, args.weights, args.prompts)
    if getattr(loaded, "processor", None) is not None:  # a vision-language model: token by token
        return _explain_answer(loaded, image, args, groups)  # type: ignore[return-value]
    explainer = Explainer.create(loaded, inputs=args.inputs or InputOptions(), preprocessing=args.preprocessing, **groups)
    return explainer.explain(image)


def _option_groups(g: ExplainArgs, layers, target, declared: dict) -> dict:
    """``explain``'s arguments as the option groups ``Explainer.create`` takes (as
    ``run_arguments.option_groups`` turns ``hookviz run``'s options into them)."""
    from hookviz.budget import check_environment
    from hookviz.explaining.trust import check_options as check_trust_options
    from hookviz.options.declared import build, groups, settings_of

    known = [f.name for f in fields(ExplainArgs)] + [s.keyword for group in groups() for s in settings_of(group)]
    unknown = next((name for name in declared if name not in known), None)
    if unknown is not None:
        raise UsageError(f"{arg(unknown)}: explain() takes no such keyword{did_you_mean(unknown, known)}")
    task_options, sample_options = build(declared, "task"), build(declared, "sample kind")
    check_named_task(g.task, task_options)
    if not isinstance(g.cam, (str, list, tuple)):
        raise UsageError(f"{arg('cam', g.cam)}: give a method's name, names separated by commas, or a list of names")
    cam = g.cam if isinstance(g.cam, str) else ",".join(map(str, g.cam))
    output_key = None if g.output_key is None else str(g.output_key)
    target_options = TargetOptions(str(target), g.objective, cam, g.topk, output_key, build(declared, "method"))
    layer_options = LayerOptions(layers=() if layers is None else layers, layer_types=g.layer_types, layout=g.layout)  # type: ignore[arg-type]  # LayerOptions takes one or several
    trust = TrustOptions(faithfulness=g.faithfulness, sanity=g.sanity)
    check_trust_options(target_options, trust)
    check_environment()
    made = {"layers": layer_options, "target": target_options, "task_options": task_options, "trust": trust}
    return {**made, "sample_options": sample_options}


def _model_to_explain(model, categories, task: str, weights: str, prompts) -> LoadedModel:
    """``explain``'s ``model`` as a ``LoadedModel``: a name loaded (with ``weights`` and
    ``prompts``), a ``LoadedModel`` as it is, a bare module wrapped; ``categories`` and
    ``task`` override what it says of itself."""
    import torch.nn as nn

    from hookviz.models.loading import load_model

    if not isinstance(model, str) and (prompts or weights != "DEFAULT"):
        given = arg("prompts", prompts) if prompts else arg("weights", weights)
        raise UsageError(
            f"{given}: the model is built already; pass its name instead (or load it with "
            f"load_model(name, weights=..., prompts=...))"
        )
    if isinstance(model, str):
        loaded = load_model(ModelOptions(model, weights, prompts=prompts))  # type: ignore[arg-type]  # ModelOptions takes one or several
    elif isinstance(model, LoadedModel):
        loaded = model
    elif not isinstance(model, nn.Module):
        raise UsageError(f"{arg('model', type(model).__name__)}: expected a torch.nn.Module, a LoadedModel or a model name")
    else:
        refuse_torchscript(model, arg("model", type(model).__name__))
        loaded = LoadedModel(
            type(model).__name__, model, "as given", tuple(categories) if categories else None, Preprocessing(), task="auto"
        )
    if categories and isinstance(model, LoadedModel):
        loaded = replace(loaded, categories=tuple(categories))
    if task != "auto":
        loaded = replace(loaded, task=ModelOptions(loaded.name, task=task).task)
    return loaded


def _explain_answer(loaded, image, args: ExplainArgs, groups: dict):
    """A vision-language model's answer about ``image`` (a path or a PIL image), explained token
    by token (``hookviz.vlm``), as ``hookviz run`` explains it."""
    from hookviz.vlm.explain import VlmRequest, explain_photo, steps_of

    target = groups["target"]
    prompts = [args.prompts] if isinstance(args.prompts, str) else list(args.prompts)
    if len(prompts) != 1:
        raise UsageError(f"{arg('prompts', prompts)}: a vision-language model answers one prompt; give one")
    request = VlmRequest(
        str(prompts[0]),
        args.answer,
        args.max_new_tokens,
        args.tokens,
        args.words,
        target.methods or ("gradcam",),
        tuple(groups["layers"].layers),
        target.objective,
        steps_of(target.settings),
    )
    photo = load_image(image, (args.inputs or InputOptions()).max_pixels).rgb  # upright, RGB, as any photo is read
    return explain_photo(loaded.module, loaded.processor, photo, request)
