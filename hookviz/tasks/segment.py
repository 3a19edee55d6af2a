"""Segmentation: the model's output holds (batch, classes, height, width) logits per pixel
(torchvision's segmentation models return them as ``{"out": ..., "aux": ...}``; the
auxiliary head is left out).

The target is a class of the model's categories, or ``top1``: the class other than
background that covers the most pixels. The objective is the sum of the target's logits
over the pixels predicted as the target, as pytorch-grad-cam's
``SemanticSegmentationTarget`` computes it; when no pixel is, the sum over all pixels,
and the report says so. ``topk`` gives a CAM to each of the K largest classes present.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hookviz.errors import UsageError, arg
from hookviz.tasks.base import ClassScore, ImagePrediction, Plan, targets_of_cam
from hookviz.tasks.computation import TaskBase, register_task
from hookviz.tasks.targets import class_target

__all__ = ["BACKGROUND", "Segment", "SegmentPrediction", "ClassShare", "segmentation_logits"]

BACKGROUND = 0  # torchvision's segmentation categories start with "__background__"


@dataclass(frozen=True)
class ClassShare:
    """A class predicted on some of an image's pixels, and which fraction of them."""

    index: int
    name: str | None
    fraction: float

    def to_json(self) -> dict:
        return {"index": self.index, "name": self.name, "fraction": self.fraction}


@dataclass(frozen=True, kw_only=True)
class SegmentPrediction(ImagePrediction):
    """A segmenter's prediction for one image.

    Attributes:
        mask: the predicted class of each pixel of the model's input (int16).
        classes: the classes predicted anywhere, largest share first.
        objective: what was back-propagated, in words.
    """

    mask: object = field(repr=False)
    classes: tuple[ClassShare, ...]
    objective: str

    def to_json(self) -> dict:
        return {"classes": [share.to_json() for share in self.classes], "objective": self.objective}


def segmentation_logits(output, key: str | None = None):
    """The (N, classes, H, W) logits in a segmentation model's output: its ``out`` (or
    ``key``) entry, or the output itself when it is such a tensor.

    Raises:
        UsageError: no such tensor.
    """
    import torch

    chosen = output
    if isinstance(output, dict):
        chosen = output.get(key or "out")
    if not isinstance(chosen, torch.Tensor) or chosen.dim() != 4:
        shape = "x".join(map(str, chosen.shape)) if isinstance(chosen, torch.Tensor) else type(chosen).__name__
        raise UsageError(
            f"the model's output is {shape}, not (batch, classes, height, width) logits; "
            f"for a segmenter returning a dict, name its entry with {arg('output_key', 'KEY')}"
        )
    return chosen


@register_task
class Segment(TaskBase):
    name = "segment"
    probability = None  # a class over many pixels: no one probability that deleting pixels follows
    class_targets = True
    words = "segmentation"
    priority = 10
    torchvision_module = "torchvision.models.segmentation"

    def recognises(self, output) -> bool:
        import torch

        return isinstance(output, dict) and isinstance(output.get("out"), torch.Tensor) and output["out"].dim() == 4

    def preprocessing(self, base, inputs):
        if inputs.crop is not None or inputs.whole_image:
            which = arg("crop") if inputs.crop is not None else arg("whole_image")
            raise UsageError(
                f"{which}: a segmentation model sees the whole photo, its shorter side resized "
                f"({arg('resize', inputs.resize or base.resize)}); drop {which} or change {arg('resize')}"
            )
        changes = {k: v for k, v in (("resize", inputs.resize), ("mean", inputs.mean), ("std", inputs.std)) if v is not None}
        return replace(base, mode="shorter", **changes)

    def torchvision_preprocessing(self, transform, pretrained: bool):
        """The weights' own: the shorter side resized, nothing cropped (random weights too:
        the model's resolution is part of it)."""
        from hookviz.inputs.images import Preprocessing

        return Preprocessing(
            resize=int(transform.resize_size[0]), mode="shorter", mean=tuple(transform.mean), std=tuple(transform.std)
        )

    def check_output(self, output, options, categories) -> None:
        class_target(options.target, categories, segmentation_logits(output, options.output_key).shape[1])

    def check(self, options) -> None:
        if options.objective != "logit":
            raise UsageError(
                f"{arg('objective', options.objective)}: a segmentation is explained by the target class's "
                f"logits over its pixels; drop {arg('objective')}"
            )

    def objective_words(self, options, task_options=None) -> str:
        return "the target's logits over its pixels"

    def default_root(self, module) -> str | None:
        return "backbone" if hasattr(module, "backbone") else None

    def plan(self, output, options, categories: Sequence[str] | None, count: int, task_options=None) -> Plan:

        logits = segmentation_logits(output, options.output_key)
        classes = logits.shape[1]
        names, fixed = class_target(options.target, categories, classes)
        detached = logits.detach()
        predicted = detached.argmax(dim=1)
        probabilities = detached.float().softmax(dim=1)
        images = [_image(predicted[i], detached[i], fixed, classes, options.topk) for i in range(count)]
        objective = sum(_class_objective(logits[i], predicted[i], image["target"]) for i, image in enumerate(images))
        cams: list[tuple[str, object]] = []
        if options.cam != "none":
            cams.append(("target", None))
            top = max(len(image["present"]) for image in images) if options.topk > 1 else 0
            for k in range(min(options.topk, top)):
                scalar = sum(
                    _class_objective(logits[i], predicted[i], image["present"][k])
                    for i, image in enumerate(images)
                    if k < len(image["present"])
                )
                cams.append((f"top{k + 1}", scalar))
        predictions: list[ImagePrediction] = [
            _prediction(image, predicted[i], detached[i], probabilities[i], names, options) for i, image in enumerate(images)
        ]
        class_means = detached.float().mean(dim=(2, 3)).cpu().numpy()  # per image: each class's mean logit
        return Plan(objective, cams, predictions, class_means)

    def scorer(self, plan: Plan, key: str, options):
        """The mean logit of the class CAM ``key`` explains in each image, over the pixels the
        first pass predicted as that class (all pixels when none was), as its ``ClassScore``
        reports it; the pixels stay those of the first pass, as pytorch-grad-cam's
        ``SemanticSegmentationTarget`` keeps its mask (see ``Task.scorer``)."""
        import torch

        classes, weights = [], []
        for prediction, target in zip(plan.predictions, targets_of_cam(plan, key)):
            assert isinstance(prediction, SegmentPrediction)  # a segmentation's plan holds nothing else
            mask = torch.from_numpy(prediction.mask == (-1 if target is None else target.index))
            if target is not None and not bool(mask.any()):
                mask = torch.ones_like(mask)
            classes.append(0 if target is None else target.index)
            weights.append(mask.double() / max(int(mask.sum()), 1))  # zero weights: nothing to explain
        classes_t, weights_t = torch.tensor(classes), torch.stack(weights)

        def score(output, images):
            logits = segmentation_logits(output, options.output_key)
            rows = images.to(logits.device)
            picked = logits[torch.arange(len(rows), device=logits.device), classes_t.to(logits.device)[rows]]
            return (picked.double() * weights_t.to(logits.device)[rows]).flatten(1).sum(dim=1).float()

        return score


def _image(predicted, logits, fixed: int | None, classes: int, topk: int) -> dict:
    """The classes present in one image (largest first, background last) and its target."""
    import torch

    counts = torch.bincount(predicted.flatten(), minlength=classes)
    order = [int(c) for c in torch.argsort(counts, descending=True, stable=True) if counts[c] > 0]
    present = [c for c in order if c != BACKGROUND] or order
    target = fixed
    if target is None:
        foreground = [c for c in order if c != BACKGROUND]
        if foreground:
            target = foreground[0]
        else:  # only background: the class that comes closest over the whole image
            sums = logits.flatten(1).sum(dim=1)
            sums[BACKGROUND] = -float("inf")
            target = int(sums.argmax()) if classes > 1 else 0
    return {"counts": counts.cpu().numpy(), "present": present, "target": target}


def _class_objective(logits, predicted, index: int):
    """The sum of class ``index``'s logits over its predicted pixels (over all when it has none)."""
    mask = predicted == index
    values = logits[index]
    return (values * mask).sum() if bool(mask.any()) else values.sum()


def _prediction(image: dict, predicted, logits, probabilities, names, options) -> SegmentPrediction:
    import numpy as np

    counts = image["counts"]
    total = float(counts.sum())

    def score(index: int) -> ClassScore:
        mask = predicted == index
        where = mask if bool(mask.any()) else _all_pixels(mask)
        logit = float(logits[index][where].float().mean())
        probability = float(probabilities[index][where].mean())
        return ClassScore(index, names[index] if names else None, logit, probability, float(counts[index]) / total)

    target = score(image["target"])
    name = target.name or f"class {target.index}"
    pixels = int(counts[image["target"]])
    notes = ()
    if pixels:
        objective = f"the sum of {name}'s logits over the {pixels} pixels predicted as {name}"
    else:
        objective = f"the sum of {name}'s logits over all pixels (no pixel is predicted as {name})"
        notes = (f"no pixel is predicted as {name}: its objective is the sum of its logits over all pixels",)
    cam_targets = {"target": target}
    if options.topk > 1:
        cam_targets.update({f"top{k + 1}": score(c) for k, c in enumerate(image["present"][: options.topk])})
    classes = tuple(
        ClassShare(int(c), names[c] if names else None, round(float(counts[c]) / total, 6))
        for c in np.argsort(-counts, kind="stable")
        if counts[c] > 0
    )
    return SegmentPrediction(
        target=target,
        top5=tuple(score(c) for c in image["present"][:5]),
        cam_targets=cam_targets,
        notes=notes,
        mask=predicted.to("cpu").numpy().astype(np.int16),
        classes=classes,
        objective=objective,
    )


def _all_pixels(mask):
    import torch

    return torch.ones_like(mask)
