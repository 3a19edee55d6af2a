"""The explorer (the run folder's index.html) at scale: how soon a run of N samples is usable, and
how long a filter takes, in headless Chromium. Prints numbers, asserts nothing.

    python bench/explorer_scale.py                      # 12, 10,000 and 100,000 samples
    python bench/explorer_scale.py --samples 100000 --keep /tmp/big --pictures

No model runs: each run folder is generated, its rows drawn at random the way a classifier's
run over ImageNet photos would fill them (1,000 classes, a true class each, two layers with
faithfulness and randomisation figures, a few dead layers and notes), and the explorer is written
by ``hookviz.runs.explorer.write_explorer``, as a run writes it when it ends. ``--pictures``
draws a small input picture into each sample's folder, so the list has thumbnails to show.

Per run it gives the time to write the explorer's files, explorer-data.js's size (and per
sample), and in Chromium (the median of --repeat page loads): ``ready``, milliseconds from the
start of the page's load until the list of samples is drawn; then the median time of each
filter (set in the address and applied, with the list redrawn).
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chromium import chromium  # noqa: E402
from hookviz.runs.explorer import DATA, ExplorerRun, write_explorer  # noqa: E402
from hookviz.runs.sample_table import SampleRow  # noqa: E402

FILTERS = (
    "predicted=class%20007&sort=-confidence",
    "correct=false&confidence=0.9..",
    "layer3:gradcam:deletion_auc=..0.2&sort=layer3:gradcam:insertion_auc",
    "dead=1..",
    "q=sample-0099",
    "sort=name",
)


def generate(out: Path, count: int, pictures: bool, seed: int = 0) -> float:
    """Write a run folder of ``count`` generated samples; return the seconds the explorer's files took."""
    rng = random.Random(seed)
    classes = [f"class {k:03d}" for k in range(1000)]
    found = ExplorerRun()
    if pictures:
        _pictures(out, count)
    for i in range(count):
        name = f"sample-{i:06d}"
        truth = rng.choice(classes)
        predicted = truth if rng.random() < 0.75 else rng.choice(classes)
        confidence = rng.random() ** 0.5
        values = {
            "name": name,
            "image": f"photos/{truth}/{name}.jpg",
            "status": "done",
            "task": "classify",
            "true_class": truth,
            "predicted": predicted,
            "target": predicted,
            "confidence": confidence,
            "target_probability": confidence,
            "correct": predicted == truth,
            "dead": int(rng.random() < 0.01),
            "zero_grad": 0,
            "nonfinite": 0,
            "drift": None,
            "target_changed": None,
            "drift_findings": None,
            "notes": int(rng.random() < 0.02),
            "failure": "",
        }
        figures = {}
        for layer in ("layer3", "layer4"):
            figures[f"{layer}:gradcam:deletion_auc"] = rng.random() * 0.6
            figures[f"{layer}:gradcam:insertion_auc"] = rng.random()
            figures[f"{layer}:gradcam:road"] = rng.random() - 0.5
            figures[f"{layer}:gradcam:sanity"] = "passes" if rng.random() < 0.9 else "fails"
        found.table.rows.append(SampleRow(values, figures))
        found.details.append(_details(name, predicted, confidence, truth))
        found.thumbs.append("input.jpg" if pictures else "")
    started = time.perf_counter()
    info = {
        "title": "generated",
        "model": "generated",
        "task": "classify",
        "layers": ["layer3", "layer4"],
        "shards": 1,
        "compared": False,
    }
    write_explorer(out, found, info, None, f"<h1>hookviz: {count} generated samples</h1>")
    return time.perf_counter() - started


def _details(name: str, predicted: str, confidence: float, truth: str) -> dict:
    layers = [
        {
            "name": layer,
            "type": "Bottleneck",
            "note": "",
            "pictures": [
                [kind, f"{layer}.{file}.png"]
                for kind, file in (("summary", "summary"), ("CAM", "cam"), ("faithfulness", "faithfulness"))
            ],
        }
        for layer in ("layer3", "layer4")
    ]
    return {
        "image": f"photos/{truth}/{name}.jpg",
        "heading": f"target: {predicted}",
        "items": [f"{predicted} ({confidence:.3f})"],
        "notes": [],
        "objective": "logit",
        "photos": [["input.jpg", "input"]],
        "clip": None,
        "layers": layers,
    }


def _pictures(out: Path, count: int) -> None:
    """A 64x64 JPEG per sample, a colour of its own, and its layers' pictures (the same few)."""
    from PIL import Image, ImageDraw

    drawn = {}  # each layer's pictures, drawn once (a sample page showed broken images without them)
    for layer in ("layer3", "layer4"):
        for k, file in enumerate(("summary", "cam", "faithfulness")):
            image = Image.new("RGB", (320, 200), (240, 240 - 40 * k, 200 + 20 * k))
            ImageDraw.Draw(image).text((12, 90), f"generated {layer} {file}", fill=(20, 20, 20))
            buffer = io.BytesIO()
            image.save(buffer, format="png")
            drawn[f"{layer}.{file}.png"] = buffer.getvalue()
    for i in range(count):
        folder = out / f"sample-{i:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        colour = ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256)
        Image.new("RGB", (64, 64), colour).save(folder / "input.jpg", quality=80)
        for file, data in drawn.items():
            (folder / file).write_bytes(data)


def measure(driver, page: Path, repeat: int) -> tuple[float, dict[str, float]]:
    """The median ``ready`` time of ``repeat`` loads, and each filter's median time (ms)."""
    ready = []
    for _ in range(repeat):
        driver.get(page.as_uri() + "#/")
        ready.append(driver.execute_script("return window.hookvizExplorer.state.readyMs"))
    times = {}
    for query in FILTERS:
        runs = []
        for _ in range(repeat):
            runs.append(
                driver.execute_script(
                    "const t = performance.now(); history.replaceState(null, '', '#/?' + arguments[0]);"
                    "window.hookvizExplorer.route(); document.querySelectorAll('[data-sample]').length;"
                    "return performance.now() - t;",
                    query,
                )
            )
        times[query] = statistics.median(runs)
    return statistics.median(ready), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[12, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pictures", action="store_true", help="draw an input picture into each sample's folder")
    parser.add_argument("--keep", type=Path, help="write the run folders here (KEEP/N) and keep them")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="explorer-scale-"))
    driver = chromium()
    try:
        for count in args.samples:
            out = root / str(count)
            out.mkdir(parents=True, exist_ok=True)
            seconds = generate(out, count, args.pictures)
            size = (out / DATA).stat().st_size
            ready, times = measure(driver, out / "index.html", args.repeat)
            print(
                f"{count:>7} samples: written in {seconds:.2f} s; {DATA} {size / 1e6:.2f} MB ({size / count:.0f} B/sample); ready {ready:.0f} ms"
            )
            for query, ms in times.items():
                print(f"          filter #/?{query}: {ms:.1f} ms")
    finally:
        driver.quit()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
