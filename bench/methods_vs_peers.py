"""Methods and faithfulness measures against the peers, side by side in one process: hookviz
against pytorch-grad-cam (ScoreCAM, AblationCAM), captum (IntegratedGradients) and torch-cam
(DeletionInsertionMetric), on the same random-weight torchvision model, photo, layer and
class; then a latency table of every hookviz method. Prints medians of CPU-process time and
wall time per image and the ratio peer / hookviz (above 1: hookviz is faster). Asserts nothing.

    OMP_NUM_THREADS=2 python bench/methods_vs_peers.py [--model resnet18] [--size 224] [--repeats 3] [--table]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torchvision

import hookviz
from hookviz import InputOptions


def _timed(function, repeats: int) -> tuple[float, float, object]:
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def _corr(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    return float(np.corrcoef(a, b)[0, 1]) if a.std() and b.std() else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--table", action="store_true", help="also time every hookviz method on resnet18 and resnet50")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None).eval()
    layer = model.layer4[-1]
    photo = "sample_images/cat.png"
    first = hookviz.explain(model, photo, layers="layer4.1", cam="gradcam", inputs=InputOptions(resize=args.size, crop=args.size))
    x = first.image.tensor[None].float()  # the model's input, as hookviz prepared it
    target = first.target.index
    print(f"{args.model}, random weights, {args.size} px, layer4.1, class {target}, {args.repeats} repeats, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'what':<48}{'hookviz ms':>12}{'peer ms':>10}{'peer/hookviz':>14}{'corr':>8}   (CPU time; wall in brackets)")
    rows = []

    def ours(cam, **extra):
        return lambda: hookviz.explain(model, photo, layers="layer4.1", cam=cam, inputs=InputOptions(resize=args.size, crop=args.size), **extra)

    from pytorch_grad_cam import AblationCAM, ScoreCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    for name, peer_class in (("scorecam", ScoreCAM), ("ablationcam", AblationCAM)):
        peer = peer_class(model=model, target_layers=[layer])
        peer.batch_size = 32
        mine = _timed(ours(name), args.repeats)
        theirs = _timed(lambda: peer(input_tensor=x, targets=[ClassifierOutputTarget(target)]), args.repeats)
        rows.append((name, mine, theirs, _corr(torch.nn.functional.interpolate(
            torch.from_numpy(mine[2]["layer4.1"].cam)[None, None], size=x.shape[-2:], mode="bilinear")[0, 0], theirs[2][0])))
    from captum.attr import IntegratedGradients

    ig = IntegratedGradients(model)
    mine = _timed(ours("integrated-gradients", steps=32), args.repeats)
    theirs = _timed(lambda: ig.attribute(x, target=target, n_steps=32, internal_batch_size=32), args.repeats)
    pixel = next(iter(mine[2].pixel_maps.values())) if getattr(mine[2], "pixel_maps", None) else None
    rows.append(("integrated-gradients", mine, theirs,
                 _corr(pixel.map, theirs[2][0].detach()) if pixel is not None else float("nan")))
    from torchcam.methods import GradCAM as TorchcamGradCAM
    from torchcam.metrics import DeletionInsertionMetric

    mine = _timed(ours("gradcam", faithfulness=True), args.repeats)
    extractor = TorchcamGradCAM(model, target_layer="layer4.1")
    metric = DeletionInsertionMetric(extractor)
    theirs = _timed(lambda: metric.update(x, class_idx=target), args.repeats)
    extractor.remove_hooks()
    rows.append(("Grad-CAM + deletion/insertion (hookviz: + ROAD)", mine, theirs, float("nan")))
    for name, (mw, mc, _), (pw, pc, _), corr in rows:
        print(f"{name:<48}{1000 * mc:>12.0f}{1000 * pc:>10.0f}{pc / mc:>14.2f}{corr:>8.4f}   "
              f"({1000 * mw:.0f} / {1000 * pw:.0f} ms wall)")
    if args.table:
        _table(photo, args.repeats)


def _table(photo: str, repeats: int) -> None:
    from hookviz.methods import METHODS

    print("\nms per image (CPU time, median), layer4's last block, 224 px, random weights")
    names = [n for n in METHODS.names()]
    print(f"{'method':<24}" + "".join(f"{m:>12}" for m in ("resnet18", "resnet50")))
    models = {m: getattr(torchvision.models, m)(weights=None).eval() for m in ("resnet18", "resnet50")}
    for name in names:
        cells = []
        for m, model in models.items():
            run = lambda: hookviz.explain(model, photo, layers="layer4.-1", cam=name)  # noqa: E731
            run()
            cells.append(_timed(run, repeats)[1])
        print(f"{name:<24}" + "".join(f"{1000 * c:>12.0f}" for c in cells))


if __name__ == "__main__":
    main()
