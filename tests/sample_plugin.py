"""A plug-in from outside hookviz that adds a sample kind and a task for a model of two inputs,
through the documented extension points only (``hookviz.samples``, ``hookviz.tasks``):

    HOOKVIZ_PLUGINS=tests.sample_plugin hookviz run photos/ --model tests.sample_plugin:pair_net \
        --task pair-classify ...

One sample, ``photo+vector``, is a photo ``a.png`` and the four numbers of ``a.npy`` beside it;
the model, ``PairNet``, takes both (``forward(image, vector)``) and names the kind in its
``hookviz_sample_kind``; the task, ``pair-classify``, explains its three class logits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from hookviz.errors import ImageError, display_path
from hookviz.inputs.images import load_image, prepare
from hookviz.samples import Sample, SampleKindBase, register_sample_kind
from hookviz.tasks import ClassScore, ImagePrediction, Plan, TaskBase, register_task

#: How many numbers a sample's vector holds.
WIDTH = 4


@register_sample_kind
class PhotoAndVector(SampleKindBase):
    """A photo and the vector of the ``.npy`` file of the same name beside it."""

    name = "photo+vector"
    words = "a photo and the vector of its .npy file"

    def files(self, path: Path) -> list[Path]:
        return [path, path.with_suffix(".npy")]

    def load(self, path: Path, max_pixels: int, settings):
        vector_file = path.with_suffix(".npy")
        if not vector_file.is_file():
            raise ImageError(
                f"{display_path(vector_file)}: no such file; each photo needs its vector of {WIDTH} numbers beside it"
            )
        vector = np.load(vector_file).astype(np.float32).reshape(-1)
        if vector.shape != (WIDTH,):
            raise ImageError(f"{display_path(vector_file)}: holds {vector.size} numbers, not {WIDTH}")
        photo = load_image(path, max_pixels)
        return replace(photo, identity=self.identity(path)), vector

    def prepare(self, loaded, preprocessing, max_pixels: int, settings) -> Sample:
        photo, vector = loaded
        image = prepare(photo, preprocessing, max_pixels)
        tensors = {"image": image.tensor, "vector": torch.from_numpy(vector)}
        return Sample(image.source, tensors, image.shown, image.whole)

    def blank(self, preprocessing, settings) -> tuple:
        return torch.zeros(1, 3, *preprocessing.trace_size), torch.zeros(1, WIDTH)


@dataclass(frozen=True)
class PairPrediction(ImagePrediction):
    """What report.json keeps of the prediction (a render worker, unpickling it, imports this
    module and so registers the task it draws with)."""

    def to_json(self) -> dict:
        return {"top": [score.to_json() for score in self.top5]}


@register_task
class PairClassify(TaskBase):
    """Three class logits of a photo and a vector; the target is the top class."""

    name = "pair-classify"
    words = "classification of a photo and a vector"
    priority = 1
    probability = "the target class's probability (softmax)"

    def recognises(self, output) -> bool:
        return False  # chosen by --task only: other models' logits stay classify's

    def preprocessing(self, base, inputs):
        return inputs.apply(base)

    def check(self, options) -> None:
        pass

    def forward(self, module, inputs, device, options=None, task_options=None):
        dtype = next(module.parameters()).dtype
        return module(inputs.stacked("image", device, dtype), inputs.stacked("vector", device, dtype))

    def plan(self, output, options, categories, count, task_options=None) -> Plan:
        logits = output.detach().float()
        probabilities = logits.softmax(dim=1).cpu().numpy()
        ranked = logits.argsort(dim=1, descending=True).cpu().numpy()
        targets = torch.as_tensor(ranked[:, 0], device=output.device)
        predictions = []
        for i in range(count):
            top = tuple(ClassScore(int(k), f"class {k}", float(logits[i, k]), float(probabilities[i, k])) for k in ranked[i])
            predictions.append(PairPrediction(target=top[0], top5=top, cam_targets={"target": top[0]}))
        objective = output[torch.arange(count), targets].sum()
        return Plan(objective, [("target", None)] if options.cam != "none" else [], predictions, logits.cpu().numpy())

    def scorer(self, plan, key, options):
        classes = torch.tensor([prediction.cam_targets[key].index for prediction in plan.predictions])
        return lambda output, images: output[torch.arange(len(output)), classes[images.cpu()].to(output.device)]

    def probability_scorer(self, targets, options, task_options=None):
        classes = torch.tensor([target.index for target in targets])

        def score(output, images):
            chosen = classes[images.cpu()].to(output.device)
            return output.float().softmax(dim=1)[torch.arange(len(output)), chosen]

        return score


class PairNet(nn.Module):
    """A photo's features and a vector's, side by side, into three logits."""

    hookviz_sample_kind = "photo+vector"

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU()
        )
        self.vector = nn.Linear(WIDTH, 4)
        self.head = nn.Linear(8, 3)

    def forward(self, image, vector):
        pooled = self.features(image).mean(dim=(2, 3))
        return self.head(torch.cat([pooled, self.vector(vector)], dim=1))


def pair_net() -> nn.Module:
    torch.manual_seed(0)
    return PairNet()
