"""What --faithfulness and --sanity cost per image: forward passes and milliseconds on
torchvision's resnet18 (random weights) at 224 pixels, Grad-CAM at layer4, one photo.
Milliseconds of the process's CPU time beside the wall clock: on a shared machine the wall
clock counts the other processes' turns too.

    OMP_NUM_THREADS=1 python bench/trust_cost.py [--device cpu]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
import torchvision

from hookviz.explaining.explainer import Explainer
from hookviz.inputs.images import Preprocessing
from hookviz.models.sources.base import LoadedModel
from hookviz.options import LayerOptions, TrustOptions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--image", default="sample_images/cat.png")
    device = parser.parse_args().device
    torch.manual_seed(0)
    module = torchvision.models.resnet18(weights=None).eval().to(device)
    loaded = LoadedModel("resnet18", module, "seeded", None, Preprocessing())
    base = Explainer.create(loaded, layers=LayerOptions(("layer4",)))
    image = base.prepare(parser.parse_args().image)
    counted = _count_forwards(module)
    timings = {}
    for name, trust in (
        ("plain", TrustOptions()),
        ("faithfulness", TrustOptions(faithfulness=True)),
        ("sanity", TrustOptions(sanity=True)),
    ):
        explainer = replace(base, trust=trust)
        explainer.explain_batch([image])  # warm
        counted.clear()
        start, cpu = time.perf_counter(), time.process_time()
        result = explainer.explain_batch([image])[0]
        timings[name] = (1000 * (time.perf_counter() - start), 1000 * (time.process_time() - cpu), sum(counted))
        layer = result["layer4"]
        if layer.trust is not None and layer.trust.deletion is not None:
            print(f"  deletion {layer.trust.deletion.forward_passes} inputs, ROAD {layer.trust.road.forward_passes} inputs")
        if layer.trust is not None and layer.trust.sanity is not None:
            print(f"  sanity {len(layer.trust.sanity.layers)} randomisation steps")
    for name, (ms, cpu, rows) in timings.items():
        print(f"{name:>12}: {ms:8.0f} ms wall, {cpu:8.0f} ms CPU, {rows} model inputs (photos through the network)")
    _split_faithfulness(base, image)


def _count_forwards(module):
    rows: list[int] = []
    module.register_forward_pre_hook(lambda _m, args: rows.append(int(args[0].shape[0])))
    return rows


def _split_faithfulness(base, image) -> None:
    """Where --faithfulness's time goes: deletion/insertion, ROAD's imputation, ROAD's scoring."""
    from hookviz.trust import deletion as deletion_module, road
    from hookviz.trust.road import noisy_linear_imputation

    explanation = base.explain_batch([image])[0]
    cam = torch.from_numpy(explanation["layer4"].cam)[None]
    inputs = image.tensor[None].to(base.device)
    scorer = base.task.probability_scorer([explanation.target], base.target)

    def score(batch, rows):
        return scorer(base.task.forward(base.model.module, list(batch), base.device, base.target), rows)

    cpu = time.process_time()
    deletion_module.deletion_insertion(score, inputs, cam)
    print(f"  deletion+insertion: {1000 * (time.process_time() - cpu):.0f} ms CPU")
    keep = torch.rand(224, 224, generator=torch.Generator().manual_seed(0)) < 0.5
    cpu = time.process_time()
    noisy_linear_imputation(image.tensor.float(), keep, 0.01, torch.Generator().manual_seed(0))
    print(f"  one imputation (half the pixels): {1000 * (time.process_time() - cpu):.0f} ms CPU (ROAD makes 18)")
    cpu = time.process_time()
    road(score, inputs, cam)
    print(f"  ROAD: {1000 * (time.process_time() - cpu):.0f} ms CPU")


if __name__ == "__main__":
    main()
