"""What speed means on a GPU: one command, one throughput table.

Photos per second by model, method, batch size and dtype, hookviz against pytorch-grad-cam and
captum on the same device, the same random-weight model, the same input batch and the same
target classes:

  gradcam               hookviz's explain_batch (the recording pass and its statistics)
                        vs pytorch-grad-cam's GradCAM and captum's LayerGradCam
  scorecam              vs pytorch-grad-cam's ScoreCAM (its masked batches as large as the batch size)
  integrated-gradients  vs captum's IntegratedGradients (32 steps, internal_batch_size = batch x 32)

Each cell is the median of ``--repeats`` timed calls after one warm-up call, on a batch made of
sample_images/ (decoded once, outside the timing: all three get the model's input as a tensor),
with ``torch.cuda.synchronize`` around each call on a GPU. hookviz is timed as the run times it
per batch (``Explainer.explain_batch``: pass, maps, each layer's statistics), not as a whole
command (start-up, decoding and pictures are the CPU's and are in docs/performance.md).

    python bench/gpu.py                     # cuda when there is one, else the CPU with small settings
    python bench/gpu.py --device cuda --models resnet50,vit_b_16 --batches 1,16,64 --dtypes float32,float16

With no GPU it says so and runs on the CPU: resnet18 at 112 px, batches of 1 and 4, float32,
Score-CAM left out unless asked (512 passes a photo). Where a tool cannot run a cell (a dtype
it does not take), the cell says ``failed`` and the reason is printed below the table.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torchvision

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"resnet18": "layer4.-1", "resnet50": "layer4.-1", "vgg16": "features.29", "convnext_tiny": "features.-1"}


def settings(args) -> dict:
    """The device and the grid: the user's, or the device's defaults."""
    gpu = torch.cuda.is_available()
    device = args.device or ("cuda" if gpu else "cpu")
    small = not device.startswith("cuda")
    return {
        "device": device,
        "models": (args.models or ("resnet18" if small else "resnet50,resnet18")).split(","),
        "methods": (args.methods or ("gradcam,integrated-gradients" if small else "gradcam,scorecam,integrated-gradients")).split(
            ","
        ),
        "batches": [int(b) for b in (args.batches or ("1,4" if small else "1,16,64")).split(",")],
        "dtypes": (args.dtypes or ("float32" if small else "float32,float16")).split(","),
        "size": args.size or (112 if small else 224),
        "repeats": args.repeats or (2 if small else 5),
        "small": small,
    }


def batch_of(size: int, count: int, device: str, dtype) -> torch.Tensor:
    """``count`` photos of sample_images/ (repeated), resized and cropped to ``size``, ImageNet-normalised."""
    from PIL import Image

    photos = sorted((ROOT / "sample_images").glob("*.png"))
    transform = torchvision.transforms.Compose(
        [
            torchvision.transforms.Resize(size),
            torchvision.transforms.CenterCrop(size),
            torchvision.transforms.ToTensor(),
            torchvision.transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    tensors = [transform(Image.open(photos[i % len(photos)]).convert("RGB")) for i in range(count)]
    return torch.stack(tensors).to(device=device, dtype=dtype)


def timed(function, device: str, repeats: int) -> float:
    """Median seconds of ``repeats`` calls, after one warm-up call."""

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    function()
    sync()
    times = []
    for _ in range(repeats):
        sync()
        began = time.perf_counter()
        function()
        sync()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def module_at(model, path: str):
    """The module a hookviz layer path names (``layer4.-1``)."""
    module = model
    for part in path.split("."):
        module = module[int(part)] if part.lstrip("-").isdigit() else getattr(module, part)
    return module


def hookviz_call(model, layer: str, method: str, x: torch.Tensor):
    """hookviz's explain_batch of ``x`` with ``method`` at ``layer``."""
    from hookviz.explaining.explainer import Explainer
    from hookviz.inputs.images import Preprocessing
    from hookviz.models.sources.base import LoadedModel
    from hookviz.options import LayerOptions, TargetOptions

    loaded = LoadedModel("bench", model, "random", None, Preprocessing(), task="classify")
    explainer = Explainer.create(loaded, layers=LayerOptions(layers=(layer,)), target=TargetOptions(cam=method))
    prepared = [explainer.prepare(row.float().cpu()) for row in x]
    return lambda: explainer.explain_batch(prepared)


def peer_calls(model, layer: str, method: str, x: torch.Tensor, classes: list[int]) -> dict:
    """The peers' calls for ``method`` on the same model, batch and classes."""
    calls = {}
    target_layer = module_at(model, layer)
    if method in ("gradcam", "scorecam"):
        from pytorch_grad_cam import GradCAM, ScoreCAM
        from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

        cam = (GradCAM if method == "gradcam" else ScoreCAM)(model=model, target_layers=[target_layer])
        if method == "scorecam":
            cam.batch_size = max(16, len(x))
        targets = [ClassifierOutputTarget(c) for c in classes]
        calls["pytorch-grad-cam"] = lambda: cam(input_tensor=x, targets=targets)
    if method == "gradcam":
        from captum.attr import LayerGradCam

        layer_cam = LayerGradCam(model, target_layer)
        calls["captum"] = lambda: layer_cam.attribute(x, target=classes)
    if method == "integrated-gradients":
        from captum.attr import IntegratedGradients

        ig = IntegratedGradients(model)
        calls["captum"] = lambda: ig.attribute(x, target=classes, n_steps=32, internal_batch_size=len(x) * 32)
    return calls


def cell(row: dict, tool: str, make, device: str, repeats: int, failures: list) -> None:
    try:
        seconds = timed(make(), device, repeats)
        row[tool] = row["batch"] / seconds
    except Exception as error:  # a tool that does not take this dtype or device: said, not fatal
        row[tool] = None
        failures.append(
            f"{row['model']} {row['method']} batch {row['batch']} {row['dtype']}, {tool}: {type(error).__name__}: {error}"[:300]
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when there is one)")
    parser.add_argument("--models", help="comma-separated torchvision models (resnet18, resnet50, vgg16, convnext_tiny)")
    parser.add_argument("--methods", help="comma-separated: gradcam, scorecam, integrated-gradients")
    parser.add_argument("--batches", help="comma-separated batch sizes")
    parser.add_argument("--dtypes", help="comma-separated: float32, float16, bfloat16")
    parser.add_argument("--size", type=int, help="input size in pixels")
    parser.add_argument("--repeats", type=int)
    s = settings(parser.parse_args())
    device = s["device"]
    if s["small"]:
        print(
            "NO GPU: running on the CPU with small settings (this table says nothing about a GPU); "
            "on a machine with one, run it again as it is",
            flush=True,
        )
    else:
        print(f"device {device}: {torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}", flush=True)
    print(
        f"{s['size']} px, random weights (seed 0), median of {s['repeats']} calls after a warm-up; photos per second", flush=True
    )
    heads = ("model", "method", "batch", "dtype", "hookviz", "pytorch-grad-cam", "captum", "hookviz / best peer")
    print("| " + " | ".join(heads) + " |\n|" + " --- |" * len(heads), flush=True)
    failures: list[str] = []
    for name in s["models"]:
        for dtype_name in s["dtypes"]:
            dtype = getattr(torch, dtype_name)
            torch.manual_seed(0)
            model = getattr(torchvision.models, name)(weights=None).eval().to(device=device, dtype=dtype)
            for method in s["methods"]:
                for batch in s["batches"]:
                    row_table(name, method, batch, dtype_name, model, s, failures)
    for line in failures:
        print("failed:", line)
    sys.stdout.flush()


def row_table(name: str, method: str, batch: int, dtype_name: str, model, s: dict, failures: list) -> None:
    device, layer = s["device"], LAYERS.get(name, "layer4.-1")
    x = batch_of(s["size"], batch, device, getattr(torch, dtype_name))
    with torch.no_grad():
        classes = model(x).argmax(1).tolist()
    row = {"model": name, "method": method, "batch": batch, "dtype": dtype_name}
    cell(row, "hookviz", lambda: hookviz_call(model, layer, method, x), device, s["repeats"], failures)
    for tool, call in peer_calls(model, layer, method, x, classes).items():
        cell(row, tool, lambda call=call: call, device, s["repeats"], failures)
    shown = [
        f"{row[t]:.1f}" if row.get(t) else ("failed" if t in row else "-") for t in ("hookviz", "pytorch-grad-cam", "captum")
    ]
    peers = [row[t] for t in ("pytorch-grad-cam", "captum") if row.get(t)]
    ratio = f"{row['hookviz'] / max(peers):.2f}" if peers and row.get("hookviz") else "-"
    print(f"| {name} | {method} | {batch} | {dtype_name} | " + " | ".join(shown) + f" | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
