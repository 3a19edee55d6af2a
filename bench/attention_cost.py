"""What the attention methods (``rollout``, ``chefer``, ``legrad``) cost per image, beside a
plain pass (``--cam none``: one forward and one backward pass and the summaries) and the bare
model's forward and forward+backward passes: medians of CPU milliseconds on timm's ViT
(random weights) at 224 pixels, one photo, the default layer (the last block's first norm).

    OMP_NUM_THREADS=1 python bench/attention_cost.py [--model vit_tiny_patch16_224] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import timm
import torch

from hookviz.explaining.explainer import Explainer
from hookviz.inputs.images import Preprocessing
from hookviz.models.sources.base import LoadedModel
from hookviz.options import TargetOptions

CAMS = ("none", "gradcam", "rollout", "chefer", "legrad")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="vit_tiny_patch16_224")
    parser.add_argument("--image", default="sample_images/cat.png")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    module = timm.create_model(args.model, pretrained=False).eval()
    loaded = LoadedModel(args.model, module, "seeded", None, Preprocessing())
    image = Explainer.create(loaded).prepare(args.image)
    batch = image.tensor[None]
    print(f"{args.model}, {len(module.blocks)} blocks, 224 px, medians of {args.repeats} (CPU ms)")
    print(f"{'bare forward':>24}: {_median(lambda: _forward(module, batch), args.repeats):8.1f}")
    print(f"{'bare forward+backward':>24}: {_median(lambda: _forward_backward(module, batch), args.repeats):8.1f}")
    plain = None
    for cam in CAMS:
        explainer = Explainer.create(loaded, target=TargetOptions(cam=cam))
        passes = _count_forwards(module)
        explainer.explain_batch([image])  # warm
        passes.clear()
        ms = _median(functools.partial(explainer.explain_batch, [image]), args.repeats)
        plain = ms if cam == "none" else plain
        extra = f"+{ms - plain:7.1f} beyond --cam none" if cam != "none" else ""
        print(f"{'--cam ' + cam:>24}: {ms:8.1f}  {extra}  ({len(passes) // args.repeats} forward passes an image)")
        passes.handle.remove()


def _forward(module, batch):
    with torch.no_grad():
        module(batch)


def _forward_backward(module, batch):
    module(batch.clone().requires_grad_(True))[0, 0].backward()


def _median(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        cpu = time.process_time()
        work()
        times.append(1000 * (time.process_time() - cpu))
    return statistics.median(times)


class _Passes(list):
    handle = None


def _count_forwards(module):
    passes = _Passes()
    passes.handle = module.register_forward_pre_hook(lambda _m, args: passes.append(1))
    return passes


if __name__ == "__main__":
    main()
