"""Which map to trust: every CAM method of hookviz measured with --faithfulness and --sanity
on the same photos, and the table docs/methods.md quotes (method, deletion area, insertion
area, ROAD, the randomisation check's final correlation). Prints figures, asserts nothing.

    OMP_NUM_THREADS=1 python bench/trust_ranking.py                   # EfficientNet-Lite0, pretrained
    OMP_NUM_THREADS=1 python bench/trust_ranking.py --model vit       # timm ViT-Tiny, random weights
    OMP_NUM_THREADS=1 python bench/trust_ranking.py --model resnet --skip-faithfulness  # resnet18, random

``cnn`` is the ``demo`` extra's EfficientNet-Lite0 with its real ImageNet weights (the only
pretrained weights offline) at its default layer; ``vit`` is timm's ``vit_tiny_patch16_224``
with random weights (no pretrained ViT is available offline): its numbers show that every
method runs and is measured on a transformer, not how faithful the methods are on a trained
one. ``resnet`` is torchvision's resnet18 with random weights at 112 pixels, for guided backprop,
guided Grad-CAM and LRP (which EfficientNet-Lite0 refuses: no nn.ReLU, a ZeroPad2d), beside
Grad-CAM and integrated gradients: the randomisation check needs no trained model to show a
map that ignores the weights (a random model's deletion curves say nothing). Two runs per model: ``--faithfulness`` with every method that applies, then
``--sanity`` with every method but the re-scoring ones (Score-CAM and Ablation-CAM re-score
hundreds of masked copies at each of the check's randomisation steps: hours on a CPU), and
integrated gradients at 8 steps there (``SANITY_STEPS``). Input
methods are measured on |sum over channels| of their map, as quantus reduces it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The models, and the methods that each takes: guided backprop and guided Grad-CAM need
#: nn.ReLU modules (EfficientNet-Lite0 has ReLU6, a ViT GELUs), so they are measured on
#: resnet18, as is lrp (zennit has no rule for Lite0's ZeroPad2d); rollout, chefer and legrad
#: need attention; attnlrp takes only torchvision's ViT, not timm's.
MODELS = {
    "cnn": (
        ["--model", "efficientnet_lite0", "--weights", "DEFAULT"],
        "gradcam,gradcam++,xgradcam,hirescam,layercam,eigencam,scorecam,ablationcam,integrated-gradients",
    ),
    "resnet": (
        ["--model", "resnet18", "--weights", "none", "--resize", "112", "--crop", "112"],
        "gradcam,integrated-gradients,guided-backprop,guided-gradcam,lrp",
    ),
    "vit": (
        ["--model", "timm:vit_tiny_patch16_224", "--weights", "none"],
        "gradcam,gradcam++,xgradcam,hirescam,layercam,eigencam,scorecam,ablationcam,rollout,chefer,legrad,integrated-gradients",
    ),
}

#: Methods left out of the randomisation check (see the module's docstring).
RESCORING = {"scorecam", "ablationcam"}

#: Integrated gradients' steps in the randomisation check: each of the check's steps explains
#: the image again, and 8 steps instead of 32 keep the check under half an hour on two cores
#: (its correlations compare maps made with 8 steps; its faithfulness figures are at 32).
SANITY_STEPS = ("--steps", "8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--images", default=str(ROOT / "sample_images"))
    parser.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--skip-sanity", action="store_true")
    parser.add_argument("--skip-faithfulness", action="store_true", help="random weights: only the check means much")
    parser.add_argument("--reuse", action="store_true", help="read a run already in --out instead of running it again")
    args = parser.parse_args()
    model, methods = MODELS[args.model]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.out or scratch)
        faithful = {}
        if not args.skip_faithfulness:
            faithful = _run(model, methods, ["--faithfulness"], args.images, out / "faithfulness", args.reuse)
        checked = {}
        if not args.skip_sanity:
            kept = ",".join(m for m in methods.split(",") if m not in RESCORING)
            checked = _run(model, kept, ["--sanity", *SANITY_STEPS], args.images, out / "sanity", args.reuse)
    _table(faithful, checked)


def _run(model: list[str], methods: str, measure: list[str], images: str, out: Path, reuse: bool) -> dict:
    """run.json's ``trust`` maps of one run, by method."""
    command = [sys.executable, "-m", "hookviz", "run", images, *model, "--cam", methods, *measure]
    command += ["--pictures", "cam", "--workers", "1", "--out", str(out)]
    start = time.perf_counter()
    if not (reuse and (out / "run.json").exists()):
        subprocess.run(
            command, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        )
    print(f"# {' '.join(measure)}: {time.perf_counter() - start:.0f} s wall ({out})", file=sys.stderr)
    document = json.loads((out / "run.json").read_text())
    return {entry["method"]: entry for entry in (document.get("trust") or {}).get("maps", [])}


def _table(faithful: dict, checked: dict) -> None:
    """The markdown table, ranked by mean deletion area (lowest first)."""
    print(
        "| method | map of | images | deletion AUC (lower better) | insertion AUC (higher better) | ROAD combined (higher better) | sanity: mean final ρ | passed |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    order = sorted(faithful.values(), key=lambda entry: entry.get("deletion_auc", float("inf")))
    order += [entry for method, entry in checked.items() if method not in faithful]
    for entry in order:
        method = entry["method"]
        sanity = (checked.get(method) or {}).get("sanity")
        rho = "not checked" if sanity is None else "constant maps"
        if sanity is not None and sanity["final_correlation_mean"] is not None:
            rho = f"{sanity['final_correlation_mean']:+.2f}"
        passed = "" if sanity is None else f"{sanity['explains_model']} of {sanity['images']}"
        figures = (
            f"{entry['deletion_auc']:.3g} | {entry['insertion_auc']:.3g} | {entry['road_combined']:+.3g}"
            if "deletion_auc" in entry
            else "n/a | n/a | n/a"
        )
        print(f"| {method} | {entry['layer']} | {entry.get('images', '')} | {figures} | {rho} | {passed} |")


if __name__ == "__main__":
    main()
