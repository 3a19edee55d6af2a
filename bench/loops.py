"""hookviz against the loops people write, side by side: the two throughput targets of issue 42.

  seeds     16 photos (sample_images/ repeated), resnet50 with seeded random weights,
            ``layer3.-1``: the seed blog posts' loop in one process (``hook_snippet.py``:
            forward, full backward hook with parameter gradients, their 2x2 figure per photo)
            against ``hookviz run`` with its default pictures. Target: at least 1.8x.
  scorecam  the 2 photos of sample_images/, resnet18 with seeded random weights, ``layer4.-1``:
            pytorch-grad-cam's Score-CAM loop with a CAM picture per photo
            (``scorecam_loop.py``) against ``hookviz run --cam scorecam --pictures cam``.
            Target: at least 1.5x.

The two commands of a comparison take turns (loop, hookviz, loop, hookviz, ...) after one
warm-up turn that is not counted, so that a shared machine's slow spells fall on both. Each
figure is the whole process from outside, its children included: wall seconds and CPU seconds
(user + system). The ratios are loop / hookviz, taken pair by pair (above 1: hookviz is faster);
the medians of those are printed beside the medians of each side. On a machine shared with
other work quote the CPU ratio, on a quiet one the wall ratio.

Both sides run with bytecode caches (``PYTHONPYCACHEPREFIX`` in a temporary folder, written
by the warm-up turn), as an installed package runs: a shell with ``PYTHONDONTWRITEBYTECODE=1``
would make every run compile hookviz's modules from source, in the command's process and in
each render worker (``--as-is`` keeps the environment's setting). Both sides run with
``OMP_WAIT_POLICY=PASSIVE``, which ``hookviz run`` sets for itself: torch's OpenMP threads
would otherwise spin while they wait, and the loops' CPU seconds would count it.

    python bench/loops.py                      # both, 5 and 3 counted turns
    python bench/loops.py --only seeds --runs 7
    python bench/loops.py --only scorecam --runs 2

Asserts nothing; the exit status is 0 unless a command failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

try:
    from bench.regress import ROOT, SAMPLES, bytecode, measure
except ImportError:  # run as a script: bench/ is the path's first entry
    from regress import ROOT, SAMPLES, bytecode, measure  # type: ignore[no-redef]

TARGETS = {"seeds": 1.8, "scorecam": 1.5}


def scenarios(work: Path, photos: int) -> dict[str, tuple[str, list[str], list[str]]]:
    """name -> (what it is, the loop's command less its output folder, hookviz's arguments less --out)."""
    folder = work / "photos"
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(photos):
        source = SAMPLES[i % len(SAMPLES)]
        names.append(str(folder / f"{i:03d}-{source.name}"))
        shutil.copy(source, names[-1])
    bench = ROOT / "bench"
    model = ["--model", "resnet50", "--weights", "none", "--layer", "layer3.-1", "-q"]
    return {
        "seeds": (
            f"{photos} photos, resnet50 random, layer3.-1: the seeds' loop (hook_snippet.py) vs hookviz run",
            [sys.executable, str(bench / "hook_snippet.py"), "{out}", *names],
            ["run", str(folder), *model],
        ),
        "scorecam": (
            f"{len(SAMPLES)} photos, resnet18 random, layer4.-1: pytorch-grad-cam's ScoreCAM loop vs hookviz run --cam scorecam --pictures cam",
            [sys.executable, str(bench / "scorecam_loop.py"), "{out}", *map(str, SAMPLES)],
            [
                "run",
                *map(str, SAMPLES),
                *("--model", "resnet18", "--weights", "none", "--layer", "layer4.-1"),
                *("--cam", "scorecam", "--pictures", "cam", "-q"),
            ],
        ),
    }


def environment(work: Path, as_is: bool) -> dict:
    return {**bytecode(work, as_is), "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}


def compare(name: str, what: str, loop: list[str], hookviz_args: list[str], work: Path, runs: int, env: dict) -> None:
    """Run the loop and hookviz in turn (after one warm-up turn) and print medians and pair ratios."""
    commands = {
        "loop": lambda out: [part.replace("{out}", str(out)) for part in loop],
        "hookviz": lambda out: [sys.executable, "-m", "hookviz", *hookviz_args, "--out", str(out)],
    }
    figures: dict[str, list[tuple[float, float]]] = {side: [] for side in commands}
    for turn in range(runs + 1):
        for side, command in commands.items():
            out = work / f"out-{name}-{side}"
            shutil.rmtree(out, ignore_errors=True)
            taken = measure(command(out), env, work)
            if turn:  # the first turn writes the bytecode caches and warms the disk caches
                figures[side].append(taken)
    print(f"\n{name}: {what}")
    print(f"{'':9}{'wall s':>10}{'cpu s':>10}")
    for side in commands:
        wall = statistics.median(w for w, _ in figures[side])
        cpu = statistics.median(c for _, c in figures[side])
        print(f"{side:9}{wall:10.2f}{cpu:10.2f}")
    pairs = list(zip(figures["loop"], figures["hookviz"]))
    wall = statistics.median(loop_[0] / ours[0] for loop_, ours in pairs)
    cpu = statistics.median(loop_[1] / ours[1] for loop_, ours in pairs)
    print(f"loop/hookviz, median of {len(pairs)} pairs: wall {wall:.2f}x, cpu {cpu:.2f}x  (target at least {TARGETS[name]}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=tuple(TARGETS), help="one comparison")
    parser.add_argument("--runs", type=int, help="counted turns of each comparison (default: seeds 5, scorecam 3)")
    parser.add_argument("--photos", type=int, default=16, help="photos of the seeds comparison (default 16)")
    parser.add_argument("--as-is", action="store_true", help="keep the environment's bytecode setting")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hookviz-loops-"))
    try:
        env = environment(work, args.as_is)
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; bytecode caches: {'as is' if args.as_is else 'on'}")
        for name, (what, loop, hookviz_args) in scenarios(work, args.photos).items():
            if args.only in (None, name):
                runs = args.runs or (5 if name == "seeds" else 3)
                compare(name, what, loop, hookviz_args, work, runs, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
