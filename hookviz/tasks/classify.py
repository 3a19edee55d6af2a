"""Classification: the model's output holds (batch, classes) logits.

The target is each image's top class, or one class for all (an index or a name). The
objective is the target's logit (or the cross-entropy against it); CAMs always explain a
logit: the target's, and with ``topk`` each of the top classes'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.tasks.base import ClassScore, Contrast, ImagePrediction, Plan, targets_of_cam
from hookviz.tasks.computation import TaskBase, register_task
from hookviz.tasks.targets import class_target

__all__ = ["Classify", "ClassPrediction", "SigmoidScores", "SoftmaxScores", "logits_of"]


@dataclass(frozen=True, kw_only=True)
class ClassPrediction(ImagePrediction):
    """A classifier's prediction for one image (its top-5 is ``top5``).

    Attributes:
        objective: what was back-propagated, in words.
        probabilities: how its probabilities were made from the logits: ``softmax`` over the
            classes, or ``sigmoid``, each class on its own (a SigLIP, a binary classifier's one logit).
    """

    objective: str
    probabilities: str = "softmax"

    def to_json(self) -> dict:
        return {"objective": self.objective, "probabilities": self.probabilities}


@dataclass(frozen=True)
class SigmoidScores:
    """What ``Classify.bind`` makes of a model whose source declares its probabilities
    sigmoids, each class on its own (SigLIP's image-text scores: ``LoadedModel.probabilities``),
    and ``plan`` and ``probability_scorer`` read; a softmax classifier binds nothing."""

    def asked(self) -> dict:
        return {}  # the model's own, not the caller's: nothing asked


@dataclass(frozen=True)
class SoftmaxScores:
    """What ``Classify.bind`` makes of a model whose source declares its probabilities a
    softmax over the classes (a CLIP's over its prompts): one class is then no binary
    classifier's one logit, whose sigmoid would score a single prompt (0.52 for a cat)."""

    def asked(self) -> dict:
        return {}  # the model's own, not the caller's: nothing asked


def _kind(logits, task_options) -> str:
    """As the model declares it (``SigmoidScores``, ``SoftmaxScores``); undeclared, ``sigmoid``
    for one logit (a binary classifier's), else ``softmax``."""
    if isinstance(task_options, (SigmoidScores, SoftmaxScores)):
        return "sigmoid" if isinstance(task_options, SigmoidScores) else "softmax"
    return "sigmoid" if logits.shape[1] == 1 else "softmax"


def _probabilities(logits, task_options):
    """Per class, its probability (see ``_kind``)."""
    return logits.sigmoid() if _kind(logits, task_options) == "sigmoid" else logits.softmax(dim=1)


# ----------------------------------------------------------------------------- the output


def _shape(tensor) -> str:
    return "x".join(map(str, tensor.shape))


def _describe(output) -> str:
    """What a model returned, in a few words: ``a tuple of 2 tensors (1x32, 1x10)``."""
    import torch

    if isinstance(output, torch.Tensor):
        return f"a {_shape(output)} tensor" if output.dim() else "a scalar tensor"
    if isinstance(output, dict):
        parts = [f"{k!r} {_shape(v) if isinstance(v, torch.Tensor) else type(v).__name__}" for k, v in output.items()]
        return f"a {type(output).__name__} with " + (", ".join(parts[:6]) or "no entries")
    if isinstance(output, (tuple, list)):
        parts = [_shape(v) if isinstance(v, torch.Tensor) else type(v).__name__ for v in output]
        return f"a {type(output).__name__} of {len(output)} (" + ", ".join(parts[:6]) + ")"
    return f"a {type(output).__name__}"


def _select(output, key: str):
    """``output[key]``: a dict key, a namedtuple field, or an index into a tuple or list."""
    if isinstance(output, dict):
        if key in output:
            return output[key]
    elif isinstance(output, (tuple, list)):
        if hasattr(output, "_fields") and key in output._fields:
            return getattr(output, key)
        if re.fullmatch(r"-?\d+", key) and -len(output) <= int(key) < len(output):
            return output[int(key)]
    raise UsageError(f"{arg('output_key', key)}: the model returned {_describe(output)}; no such entry")


def logits_of(output, key: str | None = None):
    """The (N, classes) logits in a model's output.

    A tensor is taken as it is; from a dict (or ``ModelOutput``) or a namedtuple, its
    ``logits`` or ``out``; from any container holding exactly one tensor, that one. When
    several tensors could be the logits, ``key`` says which (a key or an index).

    Raises:
        UsageError: the output holds several candidates and no ``key``, or no (N, classes) tensor.
    """
    import torch

    chosen = output
    if key is not None:
        chosen = _select(output, key)
    elif not isinstance(output, torch.Tensor):
        chosen = _named_logits(output)
        if chosen is None:
            tensors = _tensors(output)
            if not tensors:
                raise UsageError(_not_logits(output))
            if len(tensors) != 1:
                choices = " or ".join(arg("output_key", k) for k in _keys(output)[:4])
                raise UsageError(
                    f"the model returned {_describe(output)}, and hookviz cannot tell which holds the logits; "
                    f"choose with {choices or arg('output_key', 'KEY')}"
                )
            chosen = tensors[0]
    if isinstance(chosen, torch.Tensor) and chosen.dim() == 1:
        chosen = chosen[:, None]  # one score per image: a binary classifier's logit
    if not isinstance(chosen, torch.Tensor) or chosen.dim() != 2:
        raise UsageError(_not_logits(chosen))
    if not chosen.is_floating_point():
        raise UsageError(
            f"the model's output is {_describe(chosen)} of {str(chosen.dtype).replace('torch.', '')} (class indices?), "
            "not scores a gradient can flow from; return the logits"
        )
    return chosen


def _not_logits(output) -> str:
    return (
        f"the model's output is {_describe(output)}, not (batch, classes) logits; for a segmentation or "
        f"detection model, pass {arg('task', 'segment')} or {arg('task', 'detect')}"
    )


def _named_logits(output):
    for name in ("logits", "out"):
        if isinstance(output, dict) and name in output:
            return output[name]
        if isinstance(output, tuple) and hasattr(output, "_fields") and name in output._fields:
            return getattr(output, name)
    return None


def _tensors(output) -> list:
    import torch

    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    return [v for v in values if isinstance(v, torch.Tensor)]


def _keys(output) -> list[str]:
    import torch

    if isinstance(output, dict):
        return [str(k) for k, v in output.items() if isinstance(v, torch.Tensor)]
    if isinstance(output, (tuple, list)):
        return [str(i) for i, v in enumerate(output) if isinstance(v, torch.Tensor)]
    return []


# ----------------------------------------------------------------------------- the plan


@register_task
class Classify(TaskBase):
    name = "classify"
    probability = "the target class's probability (softmax; a binary classifier's or SigLIP's sigmoid)"
    class_targets = True
    contrasts = True
    words = "classification"
    priority = 0  # tried last: it claims what no other task does
    torchvision_module = "torchvision.models"

    def recognises(self, output) -> bool:
        return True  # what no other task claims

    def torchvision_preprocessing(self, transform, pretrained: bool):
        from hookviz.inputs.images import IMAGENET_MEAN, IMAGENET_STD, Preprocessing

        if not pretrained:
            return Preprocessing()  # random or foreign weights: the usual ImageNet transform
        try:
            resize = int(transform.resize_size[0])
            size = int(transform.crop_size[0])
            interpolation = getattr(transform.interpolation, "value", "bilinear")  # efficientnet's weights resize bicubic
            return Preprocessing(
                resize=resize, size=size, mean=tuple(transform.mean), std=tuple(transform.std), interpolation=interpolation
            )
        except (AttributeError, IndexError, TypeError):
            return Preprocessing(mean=IMAGENET_MEAN, std=IMAGENET_STD)

    def check_output(self, output, options, categories: Sequence[str] | None) -> None:
        class_target(options.target, categories, logits_of(output, options.output_key).shape[1])

    def bind(self, task_options, model, prepare, device: str, options):
        declared = {"sigmoid": SigmoidScores, "softmax": SoftmaxScores}.get(model.probabilities or "")
        return task_options if declared is None else declared()

    def plan(self, output, options, categories: Sequence[str] | None, count: int, task_options=None) -> Plan:
        import torch

        logits = logits_of(output, options.output_key)
        classes = logits.shape[1]
        names, fixed = class_target(options.target, categories, classes)
        rows = torch.arange(count, device=logits.device)
        detached = logits.detach()
        # NaN sorts last (not first, as argmax would put it), so the target is the top-5's first.
        ranked = detached.float().nan_to_num(nan=-float("inf")).sort(dim=1, descending=True, stable=True).indices
        targets = ranked[:, 0] if fixed is None else torch.full((count,), fixed, device=logits.device)
        target_logit = logits[rows, targets].sum()
        if options.objective == "ce":
            objective = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        else:
            objective = target_logit
        topk = min(options.topk, classes)
        top = ranked[:, : min(max(5, topk), classes)]
        # A CAM always explains a logit: the target's (the recorded gradients already are
        # that when it is the objective) and, with topk, each top class's.
        cams: list[tuple[str, object]] = []
        if options.cam != "none":
            cams.append(("target", None if options.objective == "logit" else target_logit))
            if options.topk > 1:
                cams += [(f"top{k + 1}", logits[rows, top[:, k]].sum()) for k in range(topk)]
        probabilities = _probabilities(detached.float(), task_options).cpu().numpy()
        logits_np = detached.float().cpu().numpy()
        notes = ()
        if options.topk > classes:
            notes = (f"{arg('topk', options.topk)}: the model has {classes} classes; showing all of them",)
        if not bool(torch.isfinite(detached).all()):
            notes += ("the model's logits are not all finite (NaN or Inf): its target and top-5 are not meaningful",)

        def score(i: int, index: int) -> ClassScore:
            index = int(index)
            return ClassScore(index, names[index] if names else None, float(logits_np[i, index]), float(probabilities[i, index]))

        predictions = []
        for i in range(count):
            cam_targets = {"target": score(i, targets[i])}
            cam_targets.update({f"top{k + 1}": score(i, top[i, k]) for k in range(topk)} if options.topk > 1 else {})
            predictions.append(
                ClassPrediction(
                    target=cam_targets["target"],
                    top5=tuple(score(i, j) for j in top[i, :5]),
                    cam_targets=cam_targets,
                    notes=notes,
                    objective=_OBJECTIVES[options.objective],
                    probabilities=_kind(detached, task_options),
                )
            )
        return Plan(objective, cams, predictions, logits_np)

    def scorer(self, plan: Plan, key: str, options):
        """The logit of the class CAM ``key`` explains in each image (see ``Task.scorer``)."""
        import torch

        classes = torch.tensor([-1 if target is None else target.index for target in targets_of_cam(plan, key)])

        def score(output, images):
            logits = logits_of(output, options.output_key)
            chosen = classes.to(logits.device)[images.to(logits.device)]
            values = logits.gather(1, chosen.clamp(min=0)[:, None])[:, 0]
            return values.where(chosen >= 0, values.new_zeros(()))

        return score

    def contrast(self, output, plan: Plan, key: str, options, spec: Contrast):
        """The logit of the class CAM ``key`` explains in each image set against the classes whose
        logits are nearest it (``Contrast``), summed over the images; ``None`` for fewer than 2 classes."""
        import torch

        logits = logits_of(output, options.output_key)
        if logits.shape[1] < 2:
            return None
        explained = targets_of_cam(plan, key)
        rows = torch.tensor([i for i, found in enumerate(explained) if found is not None], dtype=torch.long, device=logits.device)
        chosen = logits[rows]
        targets = torch.tensor([found.index for found in explained if found is not None], device=logits.device)[:, None]
        target = chosen.gather(1, targets)
        distances = (chosen.detach() - target.detach()).abs().scatter(1, targets, float("inf"))
        nearest = distances.topk(min(spec.comparisons, logits.shape[1] - 1), dim=1, largest=False).indices
        compared = chosen.gather(1, nearest)
        if spec.weighting == "mean":
            return (target[:, 0] - spec.alpha * compared.mean(dim=1)).sum()
        weights = chosen.softmax(dim=1).gather(1, nearest)  # the gradient flows through the weights too, as pgc's
        return ((weights * (target - spec.alpha * compared)).sum(dim=1) / (weights.sum(dim=1) + 1e-9)).sum()

    def probability_scorer(self, targets, options, task_options=None):
        """The probability of each image's target class, as ``plan`` reports it (softmax, or
        the sigmoid of a binary classifier's one logit or of a model that declares it); 0 for
        an image without target."""
        import torch

        classes = torch.tensor([-1 if target is None else target.index for target in targets])

        def score(output, images):
            logits = logits_of(output, options.output_key).float()
            probabilities = _probabilities(logits, task_options)
            chosen = classes.to(logits.device)[images.to(logits.device)]
            values = probabilities.gather(1, chosen.clamp(min=0)[:, None])[:, 0]
            return values.where(chosen >= 0, values.new_zeros(()))

        return score


_OBJECTIVES = {
    "logit": "the target class's logit",
    "ce": "the cross-entropy of the logits against the target class",
}
