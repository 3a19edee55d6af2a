"""The speed guard: this tree against an older commit, the same commands taking turns.

Times two commands in this working tree and in a checkout of an older commit (by default the
last release), alternating (new, old, new, old, ...) so that a shared machine's slow spells
fall on both, and prints the medians and the ratios new / old taken pair by pair (below 1:
this tree is faster):

  demo    the README's demo: ``hookviz run --model efficientnet_lite0 --layer _blocks.-1
          --layer _swish:1 --topk 3`` over sample_images/
  photos  the default run of docs/performance.md: 16 photos (sample_images/ repeated),
          resnet50 with seeded random weights, ``--layer layer3.-1``, the default pictures

Each figure is the whole process from outside, its render workers included: wall seconds, and
CPU seconds (user + system of the process and every child it waited for), which move less
than wall seconds on a machine shared with other work. Quote the CPU ratio there, the wall
ratio on a quiet machine. Asserts nothing; the exit status is 0 unless a command failed.

    python bench/regress.py                      # against the last release (v0.2.0)
    python bench/regress.py --against 1d68576    # any commit, tag or branch
    python bench/regress.py --runs 3 --only photos

The last release is the tag ``v<version>`` of the newest version CHANGELOG.md lists; where the
tag is missing (tags do not travel with every copy of the repository), the commit
``bench/releases.txt`` records for that version. The older commit is checked out as a
temporary ``git worktree`` (removed afterwards) and run with ``PYTHONPATH`` pointing at it,
with this same Python, both sides in the temporary folder (``python -m`` puts the current folder
before ``PYTHONPATH``; each side's import is checked before it is timed); its own ``python -m hookviz``
must accept the commands' options.
Run it before every stop: a change that makes the default run more than 3% slower says why,
in its commit and in docs/performance.md.

Both sides run with bytecode caches (``PYTHONPYCACHEPREFIX`` in the temporary folder, written by
the warm-up turn), as an installed package runs: under ``PYTHONDONTWRITEBYTECODE=1`` (this
project's shells set it) every run compiles hookviz's modules from source, in the command's
process and in each render worker, ~7% of the default run's CPU, and more for the side with more
code. ``--as-is`` keeps the environment's setting.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_images").glob("*.png"))
RELEASES = ROOT / "bench" / "releases.txt"


def last_release() -> tuple[str, str]:
    """(version, commit-ish) of the newest release CHANGELOG.md lists: its tag where the
    repository has it, else the commit bench/releases.txt records for it."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    found = re.search(r"^## \[(\d+\.\d+\.\d+)\]", text, flags=re.MULTILINE)
    if found is None:
        raise SystemExit("CHANGELOG.md lists no release (## [X.Y.Z]); name one with --against")
    version = found.group(1)
    tag = f"v{version}"
    if _git("rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}", check=False).returncode == 0:
        return version, tag
    recorded = recorded_releases()
    if version not in recorded:
        raise SystemExit(f"no tag {tag} and no commit for {version} in {RELEASES.name}; name one with --against")
    return version, recorded[version]


def recorded_releases() -> dict[str, str]:
    """bench/releases.txt: one ``VERSION COMMIT`` a line (``#`` begins a comment)."""
    found = {}
    for line in RELEASES.read_text(encoding="utf-8").splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2:
            found[words[0]] = words[1]
    return found


def _git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=check)


def measure(command: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) of one run of ``command`` in ``cwd``.

    Only this process starts children meanwhile, so the growth of RUSAGE_CHILDREN is the run's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def scenarios(work: Path, photos: int) -> dict[str, tuple[str, list[str]]]:
    """name -> (what it is, hookviz's arguments less --out)."""
    folder = work / "photos"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(photos):
        source = SAMPLES[i % len(SAMPLES)]
        shutil.copy(source, folder / f"{i:03d}-{source.name}")
    demo = ["run", "--model", "efficientnet_lite0", "--layer", "_blocks.-1", "--layer", "_swish:1", "--topk", "3"]
    return {
        "demo": ("README demo (efficientnet_lite0, 2 layers, --topk 3, 2 photos)", [*demo, "-q", str(ROOT / "sample_images")]),
        "photos": (
            f"default run ({photos} photos, resnet50 random, layer3.-1)",
            ["run", str(folder), "--model", "resnet50", "--weights", "none", "--layer", "layer3.-1", "-q"],
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", help="the older commit, tag or branch (default: the last release)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each side per scenario, taking turns (default 5)")
    parser.add_argument("--photos", type=int, default=16)
    parser.add_argument("--only", choices=("demo", "photos"), help="one scenario")
    parser.add_argument("--as-is", action="store_true", help="keep the environment's bytecode setting")
    args = parser.parse_args()
    if args.against:
        label, against = args.against, args.against
    else:
        version, against = last_release()
        label = f"{against} (release {version})"
    commit = _git("rev-parse", "--verify", f"{against}^{{commit}}", check=False)
    if commit.returncode != 0:
        raise SystemExit(f"--against {against}: no such commit here")
    work = Path(tempfile.mkdtemp(prefix="hookviz-regress-"))
    old = work / "old"
    try:
        _git("worktree", "add", "--detach", str(old), commit.stdout.strip())
        print(f"new: {ROOT} ({_describe('HEAD')}, with its uncommitted changes)")
        print(f"old: {label} = {commit.stdout.strip()[:10]}")
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.runs} runs each, taking turns")
        print(f"bytecode caches: {'as is' if args.as_is else 'on'}")
        chosen = {k: v for k, v in scenarios(work, args.photos).items() if args.only in (None, k)}
        for name, (what, hookviz_args) in chosen.items():
            compare(name, what, hookviz_args, old, work, args.runs, bytecode(work, args.as_is))
    finally:
        _git("worktree", "remove", "--force", str(old), check=False)
        shutil.rmtree(work, ignore_errors=True)


def bytecode(work: Path, as_is: bool) -> dict:
    """The environment's variables for bytecode caches: written under ``work``, unless ``as_is``."""
    env = dict(os.environ)
    if not as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def _describe(ref: str) -> str:
    return _git("log", "-1", "--format=%h %cs", ref, check=False).stdout.strip()


def check_sides(sides: dict[str, Path], work: Path, base: dict) -> None:
    """Stop unless each side's ``python -m hookviz`` imports that side's code. ``-m`` puts the
    current folder before ``PYTHONPATH``: run from a checkout, both sides ran that checkout's code
    (every ratio 1 but for noise), so the commands run in ``work``, which holds no hookviz."""
    for side, code in sides.items():
        probe = [sys.executable, "-c", "import hookviz; print(hookviz.__file__)"]
        found = subprocess.run(probe, env={**base, "PYTHONPATH": str(code)}, cwd=work, capture_output=True, text=True)
        where = Path(found.stdout.strip() or "?").resolve()
        if not where.is_relative_to(code.resolve()):
            raise SystemExit(f"the {side} side imports hookviz from {where}, not from {code}: nothing compared")


def compare(name: str, what: str, hookviz_args: list[str], old: Path, work: Path, runs: int, base: dict) -> None:
    """Run new and old in turn (after one warm-up run each) and print medians and pair ratios."""
    sides = {"new": ROOT, "old": old}
    check_sides(sides, work, base)
    figures: dict[str, list[tuple[float, float]]] = {"new": [], "old": []}
    for turn in range(runs + 1):
        for side, code in sides.items():
            out = work / f"out-{name}-{side}"
            shutil.rmtree(out, ignore_errors=True)
            env = {**base, "PYTHONPATH": str(code)}
            taken = measure([sys.executable, "-m", "hookviz", *hookviz_args, "--out", str(out)], env, work)
            if turn:  # the first turn warms the disk caches of both
                figures[side].append(taken)
    print(f"\n{name}: {what}")
    print(f"{'':6}{'wall s':>10}{'cpu s':>10}")
    for side in sides:
        print(
            f"{side:6}{statistics.median(w for w, _ in figures[side]):10.2f}{statistics.median(c for _, c in figures[side]):10.2f}"
        )
    pairs = list(zip(figures["new"], figures["old"]))
    wall = statistics.median(n[0] / o[0] for n, o in pairs)
    cpu = statistics.median(n[1] / o[1] for n, o in pairs)
    print(f"new/old, median of {len(pairs)} pairs: wall {wall:.3f}, cpu {cpu:.3f}  (above 1.03: slower, say why)")


if __name__ == "__main__":
    main()
