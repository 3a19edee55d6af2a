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
    parser.add_argument(
        "--trained", action="store_true", help="also Score-CAM and Ablation-CAM on EfficientNet-Lite0's ImageNet weights"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None).eval()
    layer = model.layer4[-1]
    photo = "sample_images/cat.png"
    first = hookviz.explain(model, photo, layers="layer4.1", cam="gradcam", inputs=InputOptions(resize=args.size, crop=args.size))
    x = first.image.tensor[None].float()  # the model's input, as hookviz prepared it
    target = first.target.index
    print(
        f"{args.model}, random weights, {args.size} px, layer4.1, class {target}, {args.repeats} repeats, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"{'what':<48}{'hookviz ms':>12}{'peer ms':>10}{'peer/hookviz':>14}{'corr':>8}   (CPU time; wall in brackets)")
    rows = []

    def ours(cam, **extra):
        return lambda: hookviz.explain(
            model, photo, layers="layer4.1", cam=cam, inputs=InputOptions(resize=args.size, crop=args.size), **extra
        )

    from pytorch_grad_cam import AblationCAM, ScoreCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    for name, peer_class in (("scorecam", ScoreCAM), ("ablationcam", AblationCAM)):
        peer = peer_class(model=model, target_layers=[layer])
        peer.batch_size = 32
        with _peers_upsampling():
            mine = _timed(ours(name), args.repeats)
        theirs = _timed(lambda peer=peer: peer(input_tensor=x, targets=[ClassifierOutputTarget(target)]), args.repeats)
        rows.append(
            (
                name,
                mine,
                theirs,
                _corr(
                    torch.nn.functional.interpolate(
                        torch.from_numpy(mine[2]["layer4.1"].cam)[None, None], size=x.shape[-2:], mode="bilinear"
                    )[0, 0],
                    theirs[2][0],
                ),
            )
        )
    from captum.attr import IntegratedGradients

    ig = IntegratedGradients(model)
    mine = _timed(ours("integrated-gradients", steps=32), args.repeats)
    theirs = _timed(lambda: ig.attribute(x, target=target, n_steps=32, internal_batch_size=32), args.repeats)
    pixel = next(iter(mine[2].pixel_maps.values())) if getattr(mine[2], "pixel_maps", None) else None
    rows.append(
        ("integrated-gradients", mine, theirs, _corr(pixel.map, theirs[2][0].detach()) if pixel is not None else float("nan"))
    )
    rows += _measures(model, x, target, first.layers[0].cam, args.repeats)
    for name, (mw, mc, _), (pw, pc, _), corr in rows:
        print(
            f"{name:<48}{1000 * mc:>12.0f}{1000 * pc:>10.0f}{pc / mc:>14.2f}{corr:>8.4f}   "
            f"({1000 * mw:.0f} / {1000 * pw:.0f} ms wall)"
        )
    if args.trained:
        _trained(photo, args.repeats)
    if args.table:
        _table(photo, args.repeats)


class _FixedCam:
    """A torch-cam extractor that returns one given map: torch-cam's metric then measures the
    map hookviz measures, and its time is the curves' alone."""

    def __init__(self, model, cam):
        self.model, self.cam = model, cam

    def __call__(self, class_idx, scores):
        return [self.cam]

    @staticmethod
    def fuse_cams(cams):
        return cams[0]

    @staticmethod
    def _hooks_off():
        import contextlib

        return contextlib.nullcontext()


def _measures(model, x, target: int, cam, repeats: int) -> list:
    """Deletion/insertion and ROAD of one Grad-CAM map: hookviz's functions (through the
    input-format choice its runs use) against torch-cam's, pytorch-grad-cam's and Quantus'."""
    import quantus
    from pytorch_grad_cam.metrics.road import ROADCombined, ROADMostRelevantFirstAverage
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget
    from torchcam.metrics import DeletionInsertionMetric

    from hookviz.input_format import formats_for
    from hookviz.trust.deletion import STEPS, deletion_insertion
    from hookviz.trust.road import ROAD_PERCENTILES, road

    formats = formats_for(model)

    def score(batch, rows):
        return formats.run(model, tuple(batch.shape), lambda: model(batch).softmax(1)[:, target])

    maps = torch.from_numpy(cam)[None]
    big = torch.nn.functional.interpolate(maps[None], size=x.shape[-2:], mode="bilinear")[0]
    rows = []
    with torch.inference_mode():
        mine = _timed(lambda: deletion_insertion(score, x, maps), repeats)
    metric = DeletionInsertionMetric(_FixedCam(model, maps), lambda logits: logits.softmax(-1))

    def torchcam_curves():
        metric.reset()
        metric.update(x, class_idx=target)
        return metric.summary()

    theirs = _timed(torchcam_curves, repeats)
    same = abs(mine[2][0].deletion_auc - theirs[2]["deletion_auc"]) + abs(mine[2][0].insertion_auc - theirs[2]["insertion_auc"])
    rows.append((f"deletion+insertion vs torch-cam (|dAUC| {same:.1e})", mine, theirs, float("nan")))
    with torch.inference_mode():
        mine = _timed(lambda: road(score, x, maps), repeats)
    cams = big.numpy()
    theirs = _timed(
        lambda: ROADCombined(list(ROAD_PERCENTILES))(x, cams, [ClassifierOutputSoftmaxTarget(target)], model), repeats
    )
    same = abs(mine[2][0].combined - float(theirs[2][0]))
    rows.append((f"ROAD combined vs pytorch-grad-cam (|d| {same:.1e})", mine, theirs, float("nan")))
    morf = _timed(
        lambda: ROADMostRelevantFirstAverage(list(ROAD_PERCENTILES))(x, cams, [ClassifierOutputSoftmaxTarget(target)], model),
        repeats,
    )
    quantus_road = quantus.ROAD(percentages=list(ROAD_PERCENTILES), disable_warnings=True, return_aggregate=False)
    args = dict(
        model=model,
        x_batch=x.numpy(),
        y_batch=np.array([target]),
        a_batch=np.repeat(cams[:, None], x.shape[1], axis=1),
        device="cpu",
    )
    try:
        theirs = _timed(lambda: quantus_road(**args), repeats)
        rows.append(("ROAD MoRF: pytorch-grad-cam (hookviz column) vs Quantus", morf, theirs, float("nan")))
    except IndexError as exc:  # quantus 0.6 ranks the map broadcast to all channels but imputes pixels
        print(f"Quantus ROAD on this RGB input fails: IndexError: {exc}")
    positions = x.shape[-1] * x.shape[-2]
    step = next(d for d in range(positions // STEPS, 0, -1) if positions % d == 0)  # Quantus needs a divisor
    flipping = quantus.PixelFlipping(features_in_step=step, disable_warnings=True)
    theirs = _timed(lambda: flipping(**{**args, "a_batch": cams[:, None]}), repeats)
    with torch.inference_mode():
        mine = _timed(lambda: deletion_insertion(score, x, maps), repeats)
    rows.append(
        (f"deletion+insertion vs Quantus PixelFlipping ({positions // step} steps, deletion only)", mine, theirs, float("nan"))
    )
    return rows


def _peers_upsampling():
    """hookviz's Score-CAM with pytorch-grad-cam's mask upsampling (corners aligned), so that
    the two compute the same numbers; the cost is the same either way."""
    import importlib
    from unittest import mock

    scorecam = importlib.import_module("hookviz.methods.scorecam")

    def aligned(maps, size):
        return torch.nn.functional.interpolate(maps, size=tuple(size), mode="bilinear", align_corners=True)

    return mock.patch.object(scorecam, "upsampled", aligned)


def _second_call_only(peer, module) -> None:
    """pytorch-grad-cam records every call of a target module; EfficientNet-Lite0 calls its
    ``_swish`` twice (stem, head): keep the head's, the layer hookviz calls ``_swish:1``."""
    recorder = peer.activations_and_grads
    for handle in recorder.handles:
        handle.remove()
    calls = [0]

    def second(mod, inputs, output):
        calls[0] += 1
        if calls[0] % 2 == 0:
            recorder.save_activation(mod, inputs, output)

    recorder.handles = [module.register_forward_hook(second)]


def _trained(photo: str, repeats: int) -> None:
    """Score-CAM and Ablation-CAM of trained weights, whose late activations are sparse:
    hookviz scores a constant map once and equal maps once; the peer scores every channel."""
    from pytorch_grad_cam import AblationCAM, ScoreCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    from hookviz.models.loading import load_model

    loaded = load_model("efficientnet_lite0")
    model = loaded.module.eval()
    first = hookviz.explain(loaded, photo, layers="_swish:1", cam="gradcam")
    x, target = first.image.tensor[None].float(), first.target.index
    print(f"\nEfficientNet-Lite0, ImageNet weights, {photo}, 224 px, _swish:1 (1280 channels), class {first.target.label}")
    for name, peer_class in (("scorecam", ScoreCAM), ("ablationcam", AblationCAM)):
        peer = peer_class(model=model, target_layers=[model._swish])
        peer.batch_size = 32
        _second_call_only(peer, model._swish)
        with _peers_upsampling():
            mine = _timed(lambda name=name: hookviz.explain(loaded, photo, layers="_swish:1", cam=name), repeats)
        try:
            theirs = _timed(lambda peer=peer: peer(input_tensor=x, targets=[ClassifierOutputTarget(target)]), repeats)
        except RuntimeError as exc:  # its AblationLayer replaces the module at both of its calls
            print(f"{name:<48}{1000 * mine[1]:>12.0f}   pytorch-grad-cam fails here: {str(exc)[:90]}")
            continue
        ours = torch.nn.functional.interpolate(
            torch.from_numpy(mine[2].layers[0].cam)[None, None], size=x.shape[-2:], mode="bilinear"
        )
        print(
            f"{name:<48}{1000 * mine[1]:>12.0f}{1000 * theirs[1]:>10.0f}{theirs[1] / mine[1]:>14.2f}"
            f"{_corr(ours[0, 0], theirs[2][0]):>8.4f}   ({1000 * mine[0]:.0f} / {1000 * theirs[0]:.0f} ms wall)"
        )


def _table(photo: str, repeats: int) -> None:
    """Milliseconds per image of every method (the whole explanation of one photo), as
    torch-cam's README tabulates its methods."""
    from hookviz.methods import METHODS

    print(f"\nms per image (median of {repeats}; CPU time, then wall), layer4's last block, 224 px, random weights")
    models = {m: getattr(torchvision.models, m)(weights=None).eval() for m in ("resnet18", "resnet50")}
    print(f"{'method':<24}" + "".join(f"{m:>22}" for m in models))
    for model in models.values():  # imports and first-call costs, out of the table
        hookviz.explain(model, photo, layers="layer4.-1", cam="gradcam")
    for name in METHODS.names():
        cells = []
        for model in models.values():

            def run(model=model, name=name):
                return hookviz.explain(model, photo, layers="layer4.-1", cam=name)

            wall, cpu, _ = _timed(run, repeats)
            cells.append(f"{1000 * cpu:>12.0f} ({1000 * wall:>6.0f})")
        print(f"{name:<24}" + "".join(f"{c:>22}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
