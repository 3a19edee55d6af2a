"""hookviz's benchmark: prints measurements, asserts nothing.

    python bench/run.py                 # everything (under 10 minutes on 2 cores)
    python bench/run.py --skip-a        # without (a), the slowest part

All scenarios run in this one invocation, on the same photos (sample_images/ repeated to
32), resnet50 with random weights (same cost as pretrained), layer3.-1:

  (a) the usual hook snippet, one process per image
  (b) the usual hook snippet in one process: forward, full backward with parameter gradients,
      and their 2x2 pyplot figure per image
  (c) hookviz run with its default pictures (summary, channels, cam: three per image)
  (d) hookviz run --save-tensors --pictures none
  (e) memory: all 53 Conv2d layers of resnet50 over 24 photos vs (f) one layer over one photo
      (both --pictures none, so report.json with each layer's statistics)
  (g) hookviz --help start-up time
  (h) a detector, fasterrcnn_mobilenet_v3_large_320_fpn at its default layer (random weights,
      score cut 0.01, 3 detections a photo): pytorch-grad-cam's tutorial loop drawing the
      boxes and one CAM per detection, vs (i) hookviz run --pictures cam, which draws the same
      (the boxes, and the CAM panels of every detection with its box), taking turns

Each scenario runs in a fresh child process; peak RSS is the child's ru_maxrss.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_images").glob("*.png"))
PY = sys.executable


def measure(command: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one run of ``command``, in a fresh wrapper process."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
    )
    out = subprocess.run([PY, "-c", wrapper, *command], check=True, capture_output=True, text=True).stdout
    seconds, peak = (float(v) for v in out.split())
    return seconds, peak


def photos(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        source = SAMPLES[i % len(SAMPLES)]
        target = folder / f"{i:03d}-{source.name}"
        shutil.copy(source, target)
        paths.append(target)
    return paths


def hookviz(*args: str) -> list[str]:
    return [PY, "-m", "hookviz", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-a", action="store_true", help="skip (a), one process per image")
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="runs of (b), (c) and (d), taking turns; medians are shown")
    parser.add_argument("--only", choices=("classify", "detect"), help="run only these scenarios: (a)-(g) or (h)-(i)")
    parser.add_argument("--detection-images", type=int, default=12)
    options = parser.parse_args()

    import torch

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    work = Path(tempfile.mkdtemp(prefix="hookviz-bench-"))
    try:
        if options.only != "detect":
            classification(work, options)
        if options.only != "classify":
            detection(work, options)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def detection(work: Path, options) -> None:
    images = photos(work / "detection-photos", options.detection_images)
    scenarios = {
        "h": (
            "pytorch-grad-cam's tutorial loop",
            [PY, str(ROOT / "bench" / "detection_loop.py"), str(work / "h"), *map(str, images)],
        ),
        "i": (
            "hookviz run --pictures cam",
            hookviz(
                "run",
                str(images[0].parent),
                "--model",
                "fasterrcnn_mobilenet_v3_large_320_fpn",
                "--weights",
                "none",
                "--score-threshold",
                "0.01",
                "--max-detections",
                "3",
                "--pictures",
                "cam",
                "-q",
                "--out",
                str(work / "i"),
            ),
        ),
    }
    runs: dict[str, list[tuple[float, float]]] = {key: [] for key in scenarios}
    for _ in range(options.repeat):
        for key, (_, command) in scenarios.items():
            shutil.rmtree(work / key, ignore_errors=True)
            runs[key].append(measure(command))
    print(
        f"\n{len(images)} photos, fasterrcnn_mobilenet_v3_large_320_fpn, backbone.body.16, 3 detections a photo; "
        f"median of {options.repeat} runs"
    )
    rate = {}
    for key, (label, _) in scenarios.items():
        seconds = statistics.median(s for s, _ in runs[key])
        rate[key] = len(images) / seconds
        print(f"{key:2} {label:45} {seconds:8.1f} {rate[key]:9.2f} {max(p for _, p in runs[key]):12.0f}")
    print(f"(i) / (h) throughput: {rate['i'] / rate['h']:.2f}x   (target at least 1.5x)")


def classification(work: Path, options) -> None:
    images = photos(work / "photos", options.images)
    common = ["--model", "resnet50", "--weights", "none", "--layer", "layer3.-1", "-q"]
    rows = []
    if not options.skip_a:
        seconds = 0.0
        peak = 0.0
        for path in images:
            s, p = measure([PY, str(ROOT / "bench" / "hook_snippet.py"), str(work / "a"), str(path)])
            seconds += s
            peak = max(peak, p)
        rows.append(("a", "hook snippet, one process per image", seconds, peak))
    # (b), (c) and (d) take turns, --repeat times, so that a slow spell of a shared
    # machine falls on all three; each row is the median of its runs.
    scenarios = {
        "b": ("hook snippet, one process", [PY, str(ROOT / "bench" / "hook_snippet.py"), str(work / "b"), *map(str, images)]),
        "c": ("hookviz run (summary, channels, cam)", hookviz("run", str(work / "photos"), *common, "--out", str(work / "c"))),
        "d": (
            "hookviz run --save-tensors --pictures none",
            hookviz("run", str(work / "photos"), *common, "--out", str(work / "d"), "--save-tensors", "--pictures", "none"),
        ),
    }
    runs: dict[str, list[tuple[float, float]]] = {key: [] for key in scenarios}
    for _ in range(options.repeat):
        for key, (_, command) in scenarios.items():
            shutil.rmtree(work / key, ignore_errors=True)
            runs[key].append(measure(command))
    for key, (label, _) in scenarios.items():
        rows.append((key, label, statistics.median(s for s, _ in runs[key]), max(p for _, p in runs[key])))

    print(f"\n{len(images)} photos, resnet50, layer3.-1; (b)-(d): median of {options.repeat} runs")
    print(f"{'':2} {'scenario':45} {'seconds':>8} {'images/s':>9} {'peak RSS MB':>12}")
    rate = {}
    for key, label, seconds, peak in rows:
        rate[key] = len(images) / seconds
        print(f"{key:2} {label:45} {seconds:8.1f} {rate[key]:9.2f} {peak:12.0f}")
    print()
    if "a" in rate:
        print(f"(c) / (a) throughput: {rate['c'] / rate['a']:.1f}x   (target at least 15x)")
    print(f"(c) / (b) throughput: {rate['c'] / rate['b']:.2f}x   (target at least 1.3x; (c) draws 3 pictures to (b)'s 1)")
    print(f"(d) / (b) throughput: {rate['d'] / rate['b']:.2f}x   (target at least 2.5x)")

    many = photos(work / "photos24", 24)
    one = photos(work / "photos1", 1)
    base = ["--model", "resnet50", "--weights", "none", "--pictures", "none", "-q"]
    s_all, p_all = measure(hookviz("run", str(many[0].parent), *base, "--layer-type", "Conv2d", "--out", str(work / "e")))
    s_one, p_one = measure(hookviz("run", str(one[0]), *base, "--layer", "layer3.-1", "--out", str(work / "f")))
    print(
        f"\nmemory: 53 Conv2d layers x 24 photos: {p_all:.0f} MB peak ({s_all:.1f} s); "
        f"1 layer x 1 photo: {p_one:.0f} MB peak; ratio {p_all / p_one:.2f}x (target at most 2x)"
    )

    help_times = []
    for _ in range(7):
        t = time.perf_counter()
        subprocess.run([str(Path(PY).parent / "hookviz"), "--help"], check=True, capture_output=True)
        help_times.append(time.perf_counter() - t)
    print(f"hookviz --help: median {statistics.median(help_times) * 1000:.0f} ms over 7 runs (target under 500 ms)")


if __name__ == "__main__":
    main()
