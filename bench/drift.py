"""Float noise against real change: the measurements behind the drift tolerances. Prints
numbers, asserts nothing.

    python bench/drift.py                  # resnet18 (random weights) and efficientnet_lite0
    python bench/drift.py --models resnet18

Per model, one baseline run (torch's default threads, batches of 8) over the sample photos
and four flipped or cropped copies of them, recording every Conv2d layer with
``--save-tensors``; then runs that differ from it in one thing each, each compared with the
baseline by ``hookviz.compare.diffing.compare``:

  noise   threads=1     the same run with OMP_NUM_THREADS=1 (and =3)
          batch=1       the same run one image at a time
          AVX2 CPU      the same run as on a CPU without AVX-512: torch's own kernels
                        (ATEN_CPU_CAPABILITY=avx2) and oneDNN's (ONEDNN_MAX_CPU_ISA=AVX2)
                        then sum in other orders
  signal  weight x1.001 one convolution's weights scaled by 1 + 1e-3
          weight +1e-3  one weight of that convolution increased by 1e-3
          mean +0.01    the first channel's normalisation mean moved by 0.01

Each line gives: the largest relative difference (max |after - before| / max |before|) of
any forward tensor (the model's input, each layer's input and output, the logits) over
every image, of the full tensors, the fingerprints' maps and their channel means; the lowest
CAM correlation; the smallest relative difference of a forward tensor that changed at all
(its full tensors differ), of the full tensors (and of the fingerprints); and how many
forward tensors the default tolerances flag, "changed/all changed  unchanged/all unchanged",
judged by the full tensors, then by the fingerprints alone; and how many CAMs the default
``--min-cam-corr`` flags at layers whose output changed, and at layers whose output did not
(the place a change happened is not where those are).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MODELS = {  # model, weights of the baseline, the convolution the signal changes, its convolutions' type
    "resnet18": ("resnet18", "none", "layer2.0.conv1", "Conv2d"),
    "efficientnet_lite0": ("efficientnet_lite0", "DEFAULT", "_blocks.5._expand_conv", "Conv2dStaticSamePadding"),
}


def photos(folder: Path) -> Path:
    from PIL import Image, ImageOps

    folder.mkdir(parents=True)
    for source in sorted((ROOT / "sample_images").glob("*.png")):
        with Image.open(source) as image:
            rgb = image.convert("RGB")
        rgb.save(folder / source.name)
        ImageOps.mirror(rgb).save(folder / f"mirrored-{source.name}")
        width, height = rgb.size
        rgb.crop((width // 8, height // 8, width, height)).save(folder / f"cropped-{source.name}")
    return folder


def weights(work: Path, name: str, weights_name: str, conv: str) -> dict[str, Path]:
    """The baseline's weights as a file, and the two changed copies."""
    import torch

    from hookviz.models.loading import load_model

    state = {k: v.clone() for k, v in load_model(name, weights_name).module.state_dict().items()}
    files = {"base": work / f"{name}.pth", "scaled": work / f"{name}-scaled.pth", "one": work / f"{name}-one.pth"}
    torch.save(state, files["base"])
    scaled = dict(state, **{f"{conv}.weight": state[f"{conv}.weight"] * (1 + 1e-3)})
    torch.save(scaled, files["scaled"])
    one = state[f"{conv}.weight"].clone()
    one.view(-1)[0] += 1e-3
    torch.save(dict(state, **{f"{conv}.weight": one}), files["one"])
    return files


def run(out: Path, images: Path, model: str, weight_file: Path, *extra: str, **settings: str) -> Path:
    env = {**os.environ, **settings}
    command = [
        PY,
        "-m",
        "hookviz",
        "run",
        str(images),
        "--model",
        model,
        "--weights",
        str(weight_file),
        "--layer-type",
        MODELS[model][3],
        "--save-tensors",
        "--pictures",
        "none",
        "-q",
        "--out",
        str(out),
        *extra,
    ]
    subprocess.run(command, check=True, env=env, cwd=ROOT)
    return out


def measure(base: Path, other: Path) -> str:
    """One line: the largest relative differences, the lowest CAM correlation, the smallest
    difference of a tensor that changed at all, and how many forward tensors the default
    tolerances flag, among those that changed (by their full tensors) and those that did
    not, judged by the full tensors and by the fingerprints alone."""
    from dataclasses import replace

    from hookviz.compare.diffing import compare
    from hookviz.options import Tolerances
    from hookviz.store.runfolder import open_run

    tolerances = Tolerances()
    diff = compare(open_run(base, "base"), open_run(other, "new"))
    largest = {"tensor": 0.0, "map": 0.0, "channels": 0.0}
    smallest = {"tensor": None, "fingerprint": None}
    counts = {"changed": 0, "unchanged": 0}
    flagged = {(how, truth): 0 for how in ("tensor", "fingerprint") for truth in counts}
    cams = [0, 0]  # CAMs flagged at layers whose output changed, and at layers whose output did not
    for image in diff.images:
        for tensor in _forward(image):
            for source in largest:
                figures = getattr(tensor, source)
                if figures is not None:
                    largest[source] = max(largest[source], figures.max_rel)
            truth = "changed" if tensor.tensor.max_rel > 0 else "unchanged"
            counts[truth] += 1
            for how, view in (("tensor", tensor), ("fingerprint", replace(tensor, tensor=None))):
                flagged[how, truth] += view.drift(tolerances) is not None
                if truth == "changed":
                    smallest[how] = min(view.change, smallest[how] or view.change)
        for layer in image.layers:
            if layer.cam is not None and layer.cam.corr is not None and layer.cam.corr < tolerances.min_cam_corr:
                cams[layer["output"].tensor.max_rel == 0] += 1
    corr = min((image.lowest_cam_corr for image in diff.images if image.lowest_cam_corr is not None), default=1.0)
    small = "-" if smallest["tensor"] is None else f"{smallest['tensor']:.2e} ({smallest['fingerprint']:.2e})"
    return (
        f"largest {largest['tensor']:.2e} {largest['map']:.2e} {largest['channels']:.2e}  "
        f"CAM {corr:.6f}  smallest {small}  flagged "
        + "  ".join(
            f"{flagged[how, 'changed']}/{counts['changed']} {flagged[how, 'unchanged']}/{counts['unchanged']}"
            for how in ("tensor", "fingerprint")
        )
        + f"  CAMs flagged {cams[0]} {cams[1]}"
    )


def _forward(image):
    yield image.model_input
    for layer in image.layers:
        yield from (tensor for tensor in layer.tensors if tensor.checked)
    yield image.logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads by default, {os.cpu_count()} CPUs")
    work = Path(tempfile.mkdtemp(prefix="hookviz-drift-"))
    try:
        images = photos(work / "photos")
        for key in options.models:
            name, weights_name, conv, _ = MODELS[key]
            files = weights(work, name, weights_name, conv)
            base = run(work / f"{key}-base", images, name, files["base"])
            print(f"\n{key} ({weights_name} weights), every {MODELS[key][3]}, 6 photos; the signals change {conv}:")
            print(
                "  (largest: tensor, map, channels; lowest CAM corr; smallest change; flagged by tensors, "
                "by fingerprints; CAMs flagged)"
            )
            scenarios = {
                "threads=1": run(work / f"{key}-t1", images, name, files["base"], OMP_NUM_THREADS="1"),
                "threads=3": run(work / f"{key}-t3", images, name, files["base"], OMP_NUM_THREADS="3"),
                "batch=1": run(work / f"{key}-b1", images, name, files["base"], "--batch-size", "1"),
                "AVX2 CPU": run(
                    work / f"{key}-avx2", images, name, files["base"], ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2"
                ),
                "weight x1.001": run(work / f"{key}-scaled", images, name, files["scaled"]),
                "weight +1e-3": run(work / f"{key}-one", images, name, files["one"]),
                "mean +0.01": run(work / f"{key}-mean", images, name, files["base"], "--mean", _moved_mean(base)),
            }
            for label, folder in scenarios.items():
                print(f"  {label:14} {measure(base, folder)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _moved_mean(base: Path) -> str:
    import json

    report = next(base.glob("*/report.json"))
    mean = json.loads(report.read_text())["preprocessing"]["mean"]
    return ",".join(str(v + 0.01 if i == 0 else v) for i, v in enumerate(mean))


if __name__ == "__main__":
    main()
