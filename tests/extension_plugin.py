"""A plug-in from outside hookviz that adds one of each extension: a CAM method, a task (with
a presentation of its own) and a picture kind, through the documented extension points only
(``hookviz.methods``, ``hookviz.tasks``, ``hookviz.render.presentation``,
``hookviz.render.kinds``). Importing it registers them all, so naming its factory on the
command line is enough:

    hookviz run --model tests.extension_plugin:brightness_net --cam peak --pictures toy ...

The task, ``regress``, explains a model that returns one number per image (a score, not class
logits); the method, ``peak``, keeps the channel whose activation peaks highest; the picture
kind is tests/picture_plugin.py's ``toy``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from hookviz.methods import register_method
from hookviz.render.presentation import ClassPresentation, register_presentation
from hookviz.tasks import ClassScore, ImagePrediction, Plan, TaskBase, register_task
from hookviz.tasks.base import stacked

from . import picture_plugin  # noqa: F401  (registers the picture kind "toy")


@register_method("peak", needs_gradients=False)
def peak(ctx):
    """The map of the channel whose activation peaks highest, after a ReLU."""
    flat = ctx.activations.flatten(2)
    best = flat.amax(dim=2).argmax(dim=1)
    return ctx.activations[torch.arange(len(best)), best].clamp(min=0)


@dataclass(frozen=True, kw_only=True)
class ValuePrediction(ImagePrediction):
    value: float

    def to_json(self) -> dict:
        return {"value": self.value}


@register_task
class Regress(TaskBase):
    """A model that returns one number per image, (N,) or (N, 1): its value is the objective."""

    name = "regress"
    words = "regression"
    priority = 5  # before classify, which claims whatever no other task does

    def recognises(self, output) -> bool:
        return isinstance(output, torch.Tensor) and (output.dim() == 1 or (output.dim() == 2 and output.shape[1] == 1))

    def preprocessing(self, base, inputs):
        return inputs.apply(base)

    def check(self, options) -> None:
        pass

    def forward(self, module, inputs, device, options=None, task_options=None):
        return stacked(module, inputs, device)

    def plan(self, output, options, categories, count, task_options=None) -> Plan:
        values = output.reshape(count)
        numbers = values.detach().float().cpu().numpy()
        predictions = []
        for i in range(count):
            score = ClassScore(0, "value", float(numbers[i]), float("nan"))
            predictions.append(
                ValuePrediction(target=score, top5=(score,), cam_targets={"value": score}, value=float(numbers[i]))
            )
        return Plan(values.sum(), [("value", None)] if options.cam != "none" else [], predictions, numbers.reshape(count, 1))

    def scorer(self, plan, key, options):
        return lambda output, images: output.reshape(-1)


@register_presentation("regress")
class ValueShown(ClassPresentation):
    """A value is told as a value, not as a class with a probability."""

    def headline(self, explanation) -> str:
        return f"value {explanation.target.logit:.4g}"

    def cam_panel(self, explanation, target):
        return f"value {target.logit:.4g}", None

    def status_line(self, status) -> str:
        return f"{status.image}: value {status.target.get('score'):.4g}"


class BrightnessNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, stride=2, padding=1))
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3))).squeeze(1)


def brightness_net() -> nn.Module:
    torch.manual_seed(0)
    return BrightnessNet()
