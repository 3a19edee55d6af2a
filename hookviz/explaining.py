"""Explaining: one forward and backward pass over a batch, and what it tells about each image.

This is the stage between recording and the pictures: it picks each image's target,
back-propagates the objective, computes the CAMs and hands back one frozen
``Explanation`` per image, holding numpy arrays only.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import TargetError, UsageError, did_you_mean
from .images import Preprocessing, PreparedImage
from .layers import LayerSpec
from .featuremaps import as_feature_map
from .summaries import TENSOR_KEYS, channel_sum, channel_tiles, histogram, tensor_stats

OBJECTIVES = ("logit", "ce")


@dataclass(frozen=True)
class ExplainOptions:
    """What to explain and how (validated by ``ExplainOptions.checked``).

    Attributes:
        target: ``top1``, a class index, or a class name.
        objective: ``logit`` (back-propagate the target's logit) or ``ce`` (cross-entropy).
        cam: a method of ``hookviz.cams`` or ``none``.
        topk: how many top classes get a CAM of their own (1: the target only).
    """

    target: str = "top1"
    objective: str = "logit"
    cam: str = "gradcam"
    topk: int = 1

    def checked(self) -> "ExplainOptions":
        from .cams import get_cam

        if self.objective not in OBJECTIVES:
            raise UsageError(f"--objective {self.objective}: choose logit or ce")
        if self.cam != "none":
            get_cam(self.cam)
        if self.topk < 1:
            raise UsageError(f"--topk {self.topk}: must be 1 or more")
        return self


@dataclass(frozen=True)
class ClassScore:
    index: int
    name: str | None
    logit: float
    probability: float

    def to_json(self) -> dict:
        """As JSON; a non-finite score (NaN weights) becomes null."""
        finite = lambda v: v if math.isfinite(v) else None  # noqa: E731
        return {"index": self.index, "name": self.name, "score": finite(self.logit), "probability": finite(self.probability)}

    @property
    def label(self) -> str:
        return f"{self.name or 'class'} ({self.index})"


@dataclass(frozen=True)
class LayerResult:
    """One recorded layer call for one image.

    Attributes:
        shapes: the shape of each of the four tensors (batch dimension 1), ``None`` if absent.
        stats: min/max/mean/std/nonfinite/zero_fraction of each tensor.
        maps: each tensor summed over channels (the seeds' pictures).
        tiles: the channels shown in the grids, for ``output`` and ``grad_output``.
        histograms: value histograms of ``output`` and ``grad_output`` (for TensorBoard).
        cam: the raw map (h, w) for the target's logit, or ``None`` (see ``cam_note``).
        topk_cams: one ``(class, map)`` pair per top class when ``topk`` > 1.
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
    input: np.ndarray | None = None
    output: np.ndarray | None = None
    grad_input: np.ndarray | None = None
    grad_output: np.ndarray | None = None

    def tensors(self) -> dict[str, np.ndarray | None]:
        return {key: getattr(self, key) for key in TENSOR_KEYS}


@dataclass(frozen=True)
class Explanation:
    """Everything hookviz learned about one image. Save it with ``.save(dir)``."""

    image: PreparedImage
    model: str
    weights: str
    preprocessing: Preprocessing
    objective: str
    cam_method: str
    logits: np.ndarray
    target: ClassScore
    top5: tuple[ClassScore, ...]
    layers: tuple[LayerResult, ...]
    notes: tuple[str, ...] = field(default=())

    def __getitem__(self, name: str) -> LayerResult:
        for layer in self.layers:
            if name in (layer.name, layer.requested):
                return layer
        raise KeyError(f"{name!r} not among " + ", ".join(repr(l.name) for l in self.layers))

    def save(self, directory, pictures: Sequence[str] = ("summary", "channels", "cam"), **options):
        """Write the pictures, ``report.json`` and ``tensors.npz`` into ``directory``.

        Returns:
            The list of files written.
        """
        from .outputs import save_explanation

        return save_explanation(self, Path(directory), pictures=pictures, **options)

    def figure(self, layer: str | None = None, kind: str = "summary"):
        """A matplotlib ``Figure`` for one layer (the first by default): summary, channels or cam."""
        from . import rendering

        chosen = self[layer] if layer is not None else self.layers[0]
        return rendering.FIGURES[kind](self, chosen)


# ----------------------------------------------------------------------------- targets


def parse_target(text: str, categories: Sequence[str] | None) -> int | None:
    """``top1`` -> None; an index -> int; a class name -> its index.

    Raises:
        TargetError: unknown name (with suggestions) or an index outside the categories.
    """
    text = text.strip()
    if text.lower() in ("top1", "top-1", "top"):
        return None
    if re.fullmatch(r"-?\d+", text):
        index = int(text)
        if index < 0 or (categories is not None and index >= len(categories)):
            count = f"0..{len(categories) - 1}" if categories else "0 or more"
            raise TargetError(f"--target {text}: class index out of range (the model has {count})")
        return index
    if not categories:
        raise TargetError(f"--target {text}: this model has no class names; pass a class index")
    wanted = _normal(text)
    for index, name in enumerate(categories):
        if _normal(name) == wanted:
            return index
    raise TargetError(f"--target {text}: not a class name of this model{did_you_mean(text, categories)}")


def _normal(name: str) -> str:
    return name.lower().replace("_", " ").strip()


# ----------------------------------------------------------------------------- the pass


@contextlib.contextmanager
def frozen_parameters(model):
    """Switch parameter gradients off for the block, and restore each flag after it."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def logits_of(output):
    """The (N, classes) logits in a model's output (a tensor, a tuple's first, a dict's ``out``)."""
    import torch

    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    if isinstance(output, dict):
        output = output.get("out", output.get("logits", next(iter(output.values()), None)))
    if not isinstance(output, torch.Tensor) or output.dim() != 2:
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise UsageError(f"the model's output is {shape}, not (batch, classes) logits; hookviz needs a classifier")
    return output


def explain_batch(
    module,
    images: Sequence[PreparedImage],
    layers: Sequence[LayerSpec],
    options: ExplainOptions,
    *,
    model_name: str = "model",
    weights: str = "",
    categories: Sequence[str] | None = None,
    preprocessing: Preprocessing = Preprocessing(),
    device: str = "cpu",
    keep_tensors: bool = True,
    channels: str | int | Sequence[int] = 64,
    grad_tiles: bool = True,
    histograms: bool = True,
) -> list[Explanation]:
    """Run one forward and backward pass over ``images`` and explain each of them.

    Each image gets its own target (``top1`` is per image). Parameters get no gradients;
    back-propagation stops at the earliest recorded tensor. Each layer is reduced to its
    summaries (statistics, channel sums, grid tiles, CAMs) as soon as its gradients exist;
    ``keep_tensors=False`` then drops the full arrays, so memory stays flat in long runs.
    ``histograms`` (only TensorBoard shows them) costs ~3 ms per image and layer on a CPU.

    Raises:
        TargetError: the target does not exist for this model.
        UnknownLayerError: a selected layer is not called by the forward pass.
    """
    import torch

    from .cams import get_cam
    from .recording import Recording

    batch = torch.stack([image.tensor for image in images]).to(device)
    fixed_target = parse_target(options.target, categories)
    with frozen_parameters(module), Recording(module, layers) as recording:
        logits = logits_of(module(batch))
        recording.check_complete()
        count = logits.shape[1]
        names = list(categories) if categories is not None and len(categories) == count else None
        if fixed_target is not None and fixed_target >= count:
            raise TargetError(f"--target {options.target}: class index out of range (the model has 0..{count - 1})")
        targets = logits.detach().argmax(dim=1) if fixed_target is None else torch.full(
            (len(images),), fixed_target, dtype=torch.long, device=logits.device
        )
        rows = torch.arange(len(images), device=logits.device)
        target_logit = logits[rows, targets].sum()
        if options.objective == "ce":
            objective = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        else:
            objective = target_logit
        top_indices = logits.detach().topk(min(max(5, options.topk), count), dim=1).indices
        # A CAM always explains a logit: the target's (the recorded gradients already are
        # that when it is the objective) and, with --topk, each top class's.
        cam_objectives: list[tuple[object, object]] = []
        if options.cam != "none":
            if options.objective != "logit":
                cam_objectives.append(("target", target_logit))
            if options.topk > 1:
                cam_objectives += [(k, logits[rows, top_indices[:, k]].sum()) for k in range(min(options.topk, count))]
        recording.backward(objective, retain_graph=bool(cam_objectives))
        captures = recording.captures
        grads_for = {"target": [c.grad_output for c in captures]}
        for n, (key, cam_objective) in enumerate(cam_objectives):
            pairs = recording.gradients(cam_objective, inputs=False, retain_graph=n < len(cam_objectives) - 1)
            grads_for[key] = [grad_output for _, grad_output in pairs]
        input_hw = tuple(batch.shape[-2:])
        cam_fn = get_cam(options.cam) if options.cam != "none" else None
        topk_keys = [key for key, _ in cam_objectives if key != "target"]
        layer_cams = [
            _layer_cams(cam_fn, capture, grads_for, position, topk_keys, input_hw)
            for position, capture in enumerate(captures)
        ]

        probabilities = logits.detach().softmax(dim=1).cpu().numpy()
        logits_np = logits.detach().float().cpu().numpy()
        top_indices = top_indices.cpu().numpy()

    def score(i: int, index: int) -> ClassScore:
        return ClassScore(
            index=int(index),
            name=names[index] if names else None,
            logit=float(logits_np[i, index]),
            probability=float(probabilities[i, index]),
        )

    results = []
    for i, image in enumerate(images):
        layer_results = []
        for capture, (cams, reason, zero_grad, topk_maps) in zip(captures, layer_cams):
            topk_cams = tuple((score(i, int(top_indices[i, k])), maps[i]) for k, maps in enumerate(topk_maps))
            note = reason
            if cams is not None and zero_grad[i]:
                note = (
                    "the target's logit has zero gradient at every position of this layer, so its CAM is zero"
                    " (for a transformer's last block, try the block's ln_1)"
                )
            arrays = {key: _one(getattr(capture, key), i) for key in TENSOR_KEYS}
            tiles = {"output": channel_tiles(arrays["output"], input_hw, channels)}
            if grad_tiles:
                tiles["grad_output"] = channel_tiles(arrays["grad_output"], input_hw, channels, by_magnitude=True)
            layer_results.append(
                LayerResult(
                    name=capture.name,
                    requested=capture.requested,
                    module_type=capture.module_type,
                    shapes={k: (tuple(v.shape) if v is not None else None) for k, v in arrays.items()},
                    stats={k: tensor_stats(v) for k, v in arrays.items()},
                    maps={k: channel_sum(v, input_hw) for k, v in arrays.items()},
                    tiles=tiles,
                    cam=None if cams is None else cams[i].copy(),
                    cam_note=note,
                    topk_cams=topk_cams,
                    histograms={k: histogram(arrays[k]) for k in ("output", "grad_output")} if histograms else {},
                    **(arrays if keep_tensors else {}),
                )
            )
        results.append(
            Explanation(
                image=image,
                model=model_name,
                weights=weights,
                preprocessing=preprocessing,
                objective=options.objective,
                cam_method=options.cam,
                logits=logits_np[i].copy(),
                target=score(i, int(targets[i])),
                top5=tuple(score(i, int(j)) for j in top_indices[i, :5]),
                layers=tuple(layer_results),
                notes=image.source.notes,
            )
        )
    return results


def _layer_cams(cam_fn, capture, grads_for: dict, position: int, topk_keys: list, input_hw):
    """One layer's CAMs for the whole batch.

    Returns:
        ``(cams (N, h, w) or None, why there is none, per-image "gradient is all zero" flags,
        one (N, h, w) array per top class)``.
    """
    if cam_fn is None:
        return None, "--cam none", None, []
    activation = as_feature_map(capture.output, input_hw)
    if activation is None:
        shape = "none" if capture.output is None else "x".join(map(str, (1, *capture.output.shape[1:])))
        return None, f"no CAM: output {shape} has no spatial layout", None, []
    gradient = as_feature_map(grads_for["target"][position], input_hw)
    if gradient is None:
        return None, "no CAM: the target's logit does not depend on this layer", None, []

    def cam(grads):
        return cam_fn(activation.float(), grads.float()).detach().cpu().numpy()

    zero_grad = (~gradient.flatten(1).any(dim=1)).cpu().numpy()
    topk = []
    for key in topk_keys:
        grads = as_feature_map(grads_for[key][position], input_hw)
        blank = np.zeros((activation.shape[0], *activation.shape[2:]), dtype=np.float32)
        topk.append(cam(grads) if grads is not None else blank)
    return cam(gradient), None, zero_grad, topk


def _one(tensor, i: int) -> np.ndarray | None:
    """Image ``i`` of a batch tensor as a float32 array with a batch dimension of 1."""
    if tensor is None:
        return None
    return tensor[i : i + 1].detach().float().cpu().numpy().copy()


# ----------------------------------------------------------------------------- notebook API


def explain(
    model,
    image,
    layers: Sequence[str] | None = None,
    target: str | int = "top1",
    *,
    objective: str = "logit",
    cam: str = "gradcam",
    topk: int = 1,
    preprocessing: Preprocessing | None = None,
    categories: Sequence[str] | None = None,
) -> Explanation:
    """Explain one image with ``model``: the notebook form of ``hookviz run``.

    Args:
        model: an ``nn.Module``, a ``LoadedModel``, or a model name for ``load_model``.
        image: a path, a PIL image, or a preprocessed (3, H, W) tensor.
        layers: layer paths; the usual CAM layer when omitted.
        target: ``"top1"``, a class index, or a class name.
        objective, cam, topk: as the CLI options of the same names.
        preprocessing: overrides the model's own transform.
        categories: class names when ``model`` is a bare module.

    Returns:
        An ``Explanation``: tensors, CAMs, top-5; ``.save(dir)`` and ``.figure()``.
    """
    import torch

    from .images import LoadedImage, load_image, prepare
    from .layers import default_layer, resolve_layers
    from .models import LoadedModel, load_model

    if isinstance(model, str):
        model = load_model(model)
    if isinstance(model, LoadedModel):
        loaded = model
    else:
        loaded = LoadedModel(
            type(model).__name__, model, "as given", tuple(categories) if categories else None, Preprocessing()
        )
    preprocessing = preprocessing or loaded.preprocessing
    if isinstance(image, torch.Tensor):
        tensor = image.detach().float().cpu()
        if tensor.dim() == 4 and tensor.shape[0] == 1:
            tensor = tensor[0]
        shown = _denormalised(tensor, preprocessing)
        from PIL import Image

        prepared = PreparedImage(LoadedImage(None, Image.fromarray(shown)), tensor, shown)
    else:
        prepared = prepare(load_image(image), preprocessing)
    size = tuple(prepared.tensor.shape[-2:])
    specs = resolve_layers(loaded.module, list(layers)) if layers else [default_layer(loaded.module, size)]
    options = ExplainOptions(target=str(target), objective=objective, cam=cam, topk=topk).checked()
    return explain_batch(
        loaded.module,
        [prepared],
        specs,
        options,
        model_name=loaded.name,
        weights=loaded.weights,
        categories=categories or loaded.categories,
        preprocessing=preprocessing,
        device=str(next(loaded.module.parameters(), torch.zeros(0)).device),
    )[0]


def _denormalised(tensor, preprocessing: Preprocessing) -> np.ndarray:
    mean = np.asarray(preprocessing.mean, dtype=np.float32)[:, None, None]
    std = np.asarray(preprocessing.std, dtype=np.float32)[:, None, None]
    pixels = tensor.numpy() * std + mean
    return (np.clip(pixels, 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 0)
