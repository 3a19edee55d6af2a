"""``hookviz atlas`` against the bare torch loop it cannot beat, and its memory as the dataset grows.

The loop decodes each photo with PIL, preprocesses it as hookviz does for the model (torchvision's
Resize(256), CenterCrop(224), ToTensor, Normalize), and runs the same forward passes in batches of
32 under ``torch.no_grad``, keeping each batch's maps of the layer and nothing else: the work any
atlas must do. The atlas is the whole command (start-up, model, discovery, both passes, crops,
pages, atlas.json), in a process of its own. Each is run ``REPEATS`` times, alternating; the
figures are medians of the processes' CPU time (user + system, children included): the machine is
shared, and wall time measures the neighbours. Both run with one intra-op thread
(``OMP_NUM_THREADS=1``): on a loaded machine OpenMP's waiting workers spin, and that spinning
counted as CPU time (10 times the work, measured) would say nothing of either. Peak RSS is the process's own (``wait4``);
the atlas's resident memory is also read while it runs (``/proc``, a run of its own), against the
samples its progress line says are done, to show whether it grows as the samples stream.

The photos are generated (48 x 64 PNGs, an ImageFolder of two classes) and the model is small
(``small_net``: four convolutions, random weights), so that a run takes seconds.

Usage: python bench/atlas_vs_loop.py [--photos 2000] [--memory 1000,10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYER = "3"
BATCH = 32
REPEATS = 3
#: Seconds between two readings of a process's resident memory.
POLL = 0.05
#: The parts of the samples done at which the streamed memory is given.
STREAMED = (0.1, 0.25, 0.5, 0.75, 0.99)


def small_net():
    """Four 3x3 convolutions (the last one's maps are the atlas's), pooled into ten logits."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.Conv2d(32, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def make_photos(folder: Path, count: int) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(count):
        kind = ("plain", "striped")[i % 2]
        (folder / kind).mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        if kind == "striped":
            pixels[::4] = 255
        Image.fromarray(pixels).save(folder / kind / f"{i:05d}.png")
    return folder


def loop(folder: str) -> None:
    """The bare loop (run in a process of its own by ``measure``)."""
    import torch
    from PIL import Image
    from torchvision import transforms

    pipeline = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    model = small_net().eval()
    layer = dict(model.named_modules())[LAYER]
    kept = []
    handle = layer.register_forward_hook(lambda _m, _a, out: kept.append(out.amax(dim=(2, 3))))
    paths = sorted(Path(folder).rglob("*.png"))
    with torch.no_grad():
        for start in range(0, len(paths), BATCH):
            batch = torch.stack([pipeline(Image.open(p).convert("RGB")) for p in paths[start : start + BATCH]])
            model(batch)
            kept.clear()
    handle.remove()


def measure(command: list[str]) -> tuple[float, float]:
    """(CPU seconds, peak RSS in MiB) of ``command``, a process of its own."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed: {process.stderr.read().decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def streamed_memory(command: list[str]) -> list[tuple[int, float]]:
    """(samples done, RSS in MiB) of the atlas ``command`` (run without ``--quiet``), read every
    ``POLL`` seconds from ``/proc`` while it runs, the samples done from its progress line: whether
    the memory grows as the samples stream, which the peak alone does not say (the peak is the
    pages', after the stream). Empty where ``/proc`` is not."""
    import re
    import threading

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = [0]

    def progress() -> None:
        for line in iter(lambda: process.stderr.read(64), b""):
            found = re.findall(rb"atlas: (\d+)/", line)
            done[0] = int(found[-1]) if found else done[0]

    reader = threading.Thread(target=progress, daemon=True)
    reader.start()
    readings = []
    status = Path(f"/proc/{process.pid}/status")
    while process.poll() is None:
        try:
            rss = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            break
        readings.append((done[0], rss / 1024))
        time.sleep(POLL)
    process.wait()
    reader.join()
    return readings


def atlas_command(folder: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hookviz",
        "atlas",
        str(folder),
        "--model",
        "bench.atlas_vs_loop:small_net",
        "--weights",
        "none",
        "--layer",
        LAYER,
        "--top",
        "9",
        "--batch-size",
        str(BATCH),
        "--out",
        str(out),
        "--quiet",
    ]


def compare(work: Path, count: int, repeats: int) -> None:
    folder = make_photos(work / f"photos-{count}", count)
    atlas, bare = [], []
    for i in range(repeats):
        bare.append(measure([sys.executable, str(Path(__file__).resolve()), "--loop", str(folder)])[0])
        atlas.append(measure(atlas_command(folder, work / f"atlas-{i}"))[0])
    a, b = statistics.median(atlas), statistics.median(bare)
    print(f"{count} photos, CPU seconds (median of {repeats}): atlas {a:.2f}, bare loop {b:.2f}, ratio {a / b:.2f}x")
    print(f"  runs: atlas {', '.join(f'{t:.2f}' for t in atlas)}; loop {', '.join(f'{t:.2f}' for t in bare)}")


def memory(work: Path, counts: list[int]) -> None:
    for count in counts:
        folder = make_photos(work / f"photos-{count}", count)
        cpu, rss = measure(atlas_command(folder, work / f"atlas-mem-{count}"))
        loop_cpu, loop_rss = measure([sys.executable, str(Path(__file__).resolve()), "--loop", str(folder)])
        print(
            f"{count} photos: peak RSS atlas {rss:.0f} MiB (CPU {cpu:.1f} s), bare loop {loop_rss:.0f} MiB (CPU {loop_cpu:.1f} s)"
        )
        readings = streamed_memory([part for part in atlas_command(folder, work / f"atlas-rss-{count}") if part != "--quiet"])
        marks = [(part, max((rss for done, rss in readings if done <= part * count), default=0.0)) for part in STREAMED]
        if readings:
            listed = ", ".join(f"{int(part * count)}: {value:.0f}" for part, value in marks)
            print(f"  atlas RSS as the samples stream (most by samples done, MiB): {listed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=2000)
    parser.add_argument("--memory", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--loop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        return loop(args.loop)
    with tempfile.TemporaryDirectory() as work:
        if args.photos:
            compare(Path(work), args.photos, args.repeats)
        if args.memory:
            memory(Path(work), [int(n) for n in args.memory.split(",")])


if __name__ == "__main__":
    main()
