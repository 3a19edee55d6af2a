"""A task plug-in that changes only what is explained: multi-label classification, each class
whose sigmoid is at least 0.5 a target with a CAM of its own. It writes the computation alone
(``name``, ``words``, ``plan``, ``scorer``: docs/extending.md's example) and registers no
presentation, so hookviz shows it as classes are:

    hookviz run --model tests.multilabel_plugin:multilabel_net --task multilabel cat.png
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from hookviz.tasks import ClassScore, ImagePrediction, Plan, TaskBase, register_task


@register_task
class MultiLabel(TaskBase):
    """Every class whose sigmoid is at least 0.5 is a target, each with its own CAM."""

    name = "multilabel"
    words = "multi-label classification"

    def plan(self, output, options, categories, count, task_options=None):
        logits = output.detach().float().cpu().numpy()
        probabilities = 1 / (1 + np.exp(-logits))
        chosen = [[int(k) for k in (p >= 0.5).nonzero()[0]] or [int(p.argmax())] for p in probabilities]
        keys = [f"label{j + 1}" for j in range(max(map(len, chosen)))]
        predictions = []
        for i, classes in enumerate(chosen):
            scores = [ClassScore(k, None, float(logits[i, k]), float(probabilities[i, k])) for k in classes]
            predictions.append(ImagePrediction(target=scores[0], top5=tuple(scores[:5]), cam_targets=dict(zip(keys, scores))))
        sums = [sum(output[i, c[j]] for i, c in enumerate(chosen) if j < len(c)) for j in range(len(keys))]
        cams = [(keys[0], None), *zip(keys[1:], sums[1:])] if options.cam != "none" else []  # None: the objective's
        return Plan(sums[0], cams, predictions, logits)

    def scorer(self, plan, key, options):
        classes = torch.tensor([p.cam_targets[key].index if key in p.cam_targets else -1 for p in plan.predictions])

        def score(output, images):  # each row's label logit; 0 for an image without that label
            chosen = classes.to(output.device)[images.to(output.device)]
            return output.gather(1, chosen.clamp(min=0)[:, None])[:, 0] * (chosen >= 0)

        return score


class LabelNet(nn.Module):
    """Four labels, the first two above 0.5 for most photos (their biases)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(4, 4)
        with torch.no_grad():
            self.head.bias.copy_(torch.tensor([3.0, 2.0, -3.0, -4.0]))

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def multilabel_net() -> nn.Module:
    torch.manual_seed(0)
    return LabelNet()
