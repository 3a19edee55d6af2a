"""Runner: one process over many images.

Images are decoded and preprocessed in a background thread, run through the model in
batches, and each image's files are rendered and written by a worker pool while the
next batch computes. Only a bounded number of images are in flight at once, so memory
does not grow with the number of images. A failing image is recorded and skipped; the
run goes on. ``run.json`` describes the run, also when it is interrupted.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from .checks import Finding, run_checks
from .errors import HookvizError, ImageError, OutputError, UsageError, describe, first_line
from .explaining import ExplainOptions, explain_batch
from .gallery import write_gallery
from .images import DEFAULT_MAX_PIXELS, LoadedImage, load_image, prepare
from .outputs import REPORT, output_names, save_explanation, sweep_partial_files, write_json
from .tensorboard_log import TensorBoardLog
from .tensorboard_log import check_available as check_tensorboard

RUN_JSON = "run.json"
PICTURES = ("summary", "channels", "cam")


@dataclass(frozen=True)
class RunConfig:
    """Everything ``hookviz run`` was asked to do, checked at the CLI boundary."""

    model: str
    weights: str = "DEFAULT"
    seed: int = 0
    layers: tuple[str, ...] = ()
    layer_types: tuple[str, ...] = ()
    explain: ExplainOptions = ExplainOptions()
    resize: int | None = None
    crop: int | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    whole_image: bool = False
    out: Path = Path("hookviz-out")
    pictures: tuple[str, ...] = PICTURES
    save_tensors: bool = False
    channels: str = "64"
    scale: str = "tile"
    grad_channels: bool = False
    batch_size: int = 8
    device: str = "auto"
    skip_existing: bool = False
    shard: tuple[int, int] | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    fail_on: tuple[str, ...] = ()
    dead_fraction: float = 1.0
    tensorboard: Path | None = None
    workers: int = 0  # rendering processes; 0: one per CPU
    memory_budget: int = 256 * 2**20  # bytes of recorded tensors per batch
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageStatus:
    image: str
    output: str
    status: str  # done | failed | skipped
    error: str | None = None
    target: dict | None = None
    files: tuple[str, ...] = ()
    top5: tuple[dict, ...] = ()

    def to_json(self) -> dict:
        return {
            "image": self.image, "output": self.output, "status": self.status,
            "error": self.error, "target": self.target, "top5": list(self.top5), "files": list(self.files),
        }


@dataclass(frozen=True)
class RunSummary:
    statuses: tuple[ImageStatus, ...]
    findings: tuple[Finding, ...]
    run_json: Path
    interrupted: bool = False
    layers: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> list[ImageStatus]:
        return [s for s in self.statuses if s.status == "failed"]

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses if s.status == status)


class RunInterrupted(Exception):
    """Ctrl-C or SIGTERM stopped the run; ``summary`` holds what was finished."""

    def __init__(self, summary: RunSummary):
        super().__init__("interrupted")
        self.summary = summary


def resolve_device(device: str) -> str:
    """``auto`` -> the first of cuda, mps, cpu that exists. Raises UsageError for one that does not."""
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if device == "cpu":
        return device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA device is available here; use --device cpu")
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA devices here")
        return device
    if device == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise UsageError("--device mps: Apple's MPS backend is not available here; use --device cpu")
        return device
    raise UsageError(f"--device {device}: choose auto, cpu, cuda, cuda:N or mps")


def check_writable(out: Path) -> None:
    """Raises OutputError when ``out`` cannot be created or written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".hookviz-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputError(f"--out {out}: cannot write there ({reason}); choose another folder") from None


def shard_of(items: Sequence, shard: tuple[int, int] | None) -> list:
    """The K-th of N deterministic slices (round-robin), K counted from 1."""
    if shard is None:
        return list(items)
    k, n = shard
    return [item for i, item in enumerate(items) if i % n == k - 1]


def run(
    config: RunConfig,
    images: Sequence[Path],
    on_status: Callable[[ImageStatus, int, int], None] | None = None,
    on_start: Callable[[str], None] | None = None,
) -> RunSummary:
    """Explain every image and write its files under ``config.out``.

    Args:
        config: the checked options.
        images: image paths, in order (the full list; ``config.shard`` picks a slice of it).
        on_status: called after each image with (status, images finished, images in this run).
        on_start: called once with a line saying what will run (model, layers, device).

    Returns:
        The summary; ``run.json`` is written too.

    Raises:
        UsageError (and subclasses): bad model, weights, layer, target or output folder.
        RunInterrupted: Ctrl-C or SIGTERM; files finished so far are complete.
    """
    explain_options = config.explain.checked()
    if config.tensorboard is not None:
        check_tensorboard()
    check_writable(config.out)
    sweep_partial_files(config.out)
    selected = shard_of(list(images), config.shard)
    names = output_names(list(images))
    todo = [p for p in selected if not (config.skip_existing and (config.out / names[p] / REPORT).exists())]
    # One render process per CPU, but no more than there are images: a one-photo smoke
    # check on a 64-core machine starts one, not 64 (they all start at once, below).
    workers = max(1, min(config.workers or os.cpu_count() or 1, len(selected)))
    pool = _render_pool(workers if config.pictures else 0)
    if config.pictures:
        # Workers start now and load matplotlib while this process imports torch and
        # builds the model; otherwise they would start only when the first batch is done.
        for _ in range(workers):
            pool.submit(_warm_up)
    # Decoding needs no torch either: the loader starts now too, on the core that the
    # import of torch leaves idle.
    loader = _Loader(todo, config.max_pixels, ahead=max(2, 2 * config.batch_size))
    loader.start()
    try:
        return _run(config, selected, names, todo, explain_options, pool, workers, loader, on_status, on_start)
    finally:
        loader.stop()
        pool.shutdown(wait=True, cancel_futures=True)


class _Loader:
    """Decodes the images in a background thread, in order, at most ``ahead`` of the
    consumer; prepares them too once ``preprocessing`` is set (it is known only when the
    model is loaded). Iterating yields ``(path, PreparedImage or ImageError)``."""

    def __init__(self, paths: Sequence[Path], max_pixels: int, ahead: int):
        self.preprocessing = None
        self._paths = list(paths)
        self._max_pixels = max_pixels
        self._queue: queue.Queue = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="hookviz-loader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def hold_at_most(self, count: int) -> None:
        """Change how many images may wait (``queue.Queue`` reads ``maxsize`` at every put)."""
        with self._queue.mutex:
            self._queue.maxsize = count

    def __iter__(self):
        while (item := self._queue.get()) is not None:
            path, image = item
            if isinstance(image, LoadedImage):  # decoded before the preprocessing was known
                image = _prepared(path, image, self.preprocessing)
            yield path, image

    def _work(self) -> None:
        for path in self._paths:
            if self._stop.is_set():
                return
            try:
                image = load_image(path, self._max_pixels)
            except ImageError as exc:
                image = exc
            except Exception as exc:  # a decoder bug must fail this image, not the run
                image = ImageError(f"{path}: could not decode ({describe(exc)})")
            else:
                if self.preprocessing is not None:
                    image = _prepared(path, image, self.preprocessing)
            if not self._hand_over((path, image)):
                return
        self._hand_over(None)

    def _hand_over(self, item) -> bool:
        while not self._stop.is_set():  # never block for good: the consumer may have stopped
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False


def _prepared(path: Path, image: LoadedImage, preprocessing):
    try:
        return prepare(image, preprocessing)
    except ImageError as exc:
        return exc
    except Exception as exc:
        return ImageError(f"{path}: could not preprocess ({describe(exc)})")


def _recorded_bytes(explanation) -> int:
    """What recording one image holds during a batch: value, copy and gradient (float32)
    of every recorded input and output."""
    elements = sum(
        math.prod(shape) for layer in explanation.layers for key in ("input", "output")
        if (shape := layer.shapes.get(key)) is not None
    )
    return 4 * 3 * elements


def _run(config: RunConfig, selected, names, todo, explain_options, pool, workers: int, loader, on_status, on_start) -> RunSummary:
    import torch

    from .layers import default_layer, resolve_layers
    from .models import load_model, with_overrides

    device = resolve_device(config.device)
    if device.startswith("cuda"):
        # hookviz reports values: compute in full float32, not TF32, so a GPU run matches the CPU's.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    loaded = load_model(config.model, config.weights, config.seed)
    module = loaded.module.to(device)
    preprocessing = with_overrides(
        loaded.preprocessing, resize=config.resize, crop=config.crop, mean=config.mean,
        std=config.std, whole_image=config.whole_image,
    )
    loader.preprocessing = preprocessing
    size = (preprocessing.size, preprocessing.size)
    if config.layers or config.layer_types:
        specs = resolve_layers(module, config.layers, config.layer_types)
    else:
        specs = [default_layer(module, size)]
    # Batches hold every recorded tensor (values, copies, gradients) at once: the first
    # batch is one image, and what it recorded sizes the others, so that recording all 53
    # convolutions of resnet50 runs one image at a time.
    batch_size = config.batch_size
    sized = False
    notes = []
    if not config.layers and not config.layer_types:
        spec = specs[0]
        notes.append(f"no --layer given: using {spec.path}{'' if spec.call is None else f':{spec.call}'} "
                     f"({spec.module_type}), the last layer with a spatial feature map")
    if on_start:
        on_start(
            f"model {loaded.name}, weights {loaded.weights}, on {device}, batches of up to {batch_size}; layers: "
            + ", ".join(s.path + ("" if s.call is None else f":{s.call}") for s in specs)
        )
    started = time.time()
    statuses: dict[Path, ImageStatus] = {}
    findings: list[Finding] = []
    waiting = set(todo)
    for path in selected:
        if path not in waiting:
            statuses[path] = ImageStatus(str(path), names[path], "skipped", "already done (--skip-existing)")
    total = len(selected)
    finished = [len(statuses)]
    lock = threading.Lock()

    def report(path: Path, status: ImageStatus) -> None:
        with lock:
            statuses[path] = status
            finished[0] += 1
            count = finished[0]
        if on_status:
            on_status(status, count, total)

    if on_status:
        for count, status in enumerate(statuses.values(), start=1):
            on_status(status, count, total)
    step_of = {path: step for step, path in enumerate(selected)}  # TensorBoard steps

    pending: list[tuple[Path, object, Future]] = []
    save_options = dict(
        pictures=config.pictures, save_tensors=config.save_tensors, scale=config.scale,
        grad_channels=config.grad_channels,
    )

    def collect(block_until: int) -> None:
        while len(pending) > block_until:
            path, explanation, future = pending.pop(0)
            try:
                files = future.result()
                if board is not None:
                    board.add(step_of[path], explanation, files)
                status = ImageStatus(
                    str(path), names[path], "done", None, explanation.target.to_json(),
                    tuple(p.name for p in files), tuple(score.to_json() for score in explanation.top5),
                )
            except HookvizError as exc:
                status = ImageStatus(str(path), names[path], "failed", str(exc))
            except OSError as exc:
                status = ImageStatus(str(path), names[path], "failed", f"{path}: writing results failed ({first_line(exc)})")
            except Exception as exc:  # a rendering bug must cost this image, not the whole run
                status = ImageStatus(
                    str(path), names[path], "failed", f"{path}: saving failed ({describe(exc)})"
                )
            report(path, status)

    interrupted = False
    cam_noted: set[str] = set()
    board = TensorBoardLog(config.tensorboard) if config.tensorboard is not None else None
    items = iter(loader)
    try:
        done_loading = False
        # The first batch is one image (it sizes the others). With pictures, batches then
        # double: the renderers start early and always have work while the next computes.
        wanted = 1
        while not done_loading:
            batch = []
            while len(batch) < wanted:
                item = next(items, None)
                if item is None:
                    done_loading = True
                    break
                path, prepared = item
                if isinstance(prepared, ImageError):
                    report(path, ImageStatus(str(path), names[path], "failed", str(prepared)))
                else:
                    batch.append((path, prepared))
            if not batch:
                continue
            explanations = explain_batch(
                module, [p for _, p in batch], specs, explain_options,
                model_name=loaded.name, weights=loaded.weights, categories=loaded.categories,
                preprocessing=preprocessing, device=device, keep_tensors=config.save_tensors,
                channels=config.channels, grad_tiles=config.grad_channels,
                histograms=config.tensorboard is not None,  # only TensorBoard shows them
            )
            if not sized:
                sized = True
                per_image = _recorded_bytes(explanations[0])
                batch_size = max(1, min(config.batch_size, config.memory_budget // max(1, per_image)))
                loader.hold_at_most(max(2, 2 * batch_size))  # photos may be large too
            for (path, _), explanation in zip(batch, explanations):
                explanation = _portable(explanation)
                for layer in explanation.layers:
                    if layer.cam_note and explain_options.cam != "none" and layer.name not in cam_noted:
                        cam_noted.add(layer.name)
                        notes.append(f"{layer.name}: {layer.cam_note}")
                if config.fail_on:
                    findings.extend(run_checks(explanation, config.fail_on, config.dead_fraction))
                future = pool.submit(save_explanation, explanation, config.out / names[path], **save_options)
                pending.append((path, explanation, future))
            del explanations, batch
            wanted = min(batch_size, 2 * wanted) if config.pictures else batch_size
            collect(block_until=max(2 * workers, batch_size))
        collect(block_until=0)
    except KeyboardInterrupt:
        interrupted = True
        loader.stop()
        for _, _, future in pending:
            future.cancel()
        pending[:] = [(p, e, f) for p, e, f in pending if not f.cancelled()]
        collect(block_until=0)
    finally:
        loader.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        if board is not None:
            board.close()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        # run.json describes every run, also one stopped by an error or a signal.
        summary = RunSummary(
            statuses=tuple(statuses[p] for p in selected if p in statuses),
            findings=tuple(findings),
            run_json=config.out / RUN_JSON,
            interrupted=interrupted,
            layers=tuple(s.path + ("" if s.call is None else f":{s.call}") for s in specs),
            notes=tuple(notes),
        )
        document = _run_document(config, summary, loaded, device, started, total)
        write_json(summary.run_json, document)
        write_gallery(config.out, document)
    if interrupted:
        raise RunInterrupted(summary)
    return summary


def _run_document(config: RunConfig, summary: RunSummary, loaded, device: str, started: float, total: int) -> dict:
    import torch
    import torchvision

    from . import __version__

    return {
        "hookviz": __version__,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "python": platform.python_version(),
        "command": list(config.command),
        "model": loaded.name,
        "weights": loaded.weights,
        "device": device,
        "layers": list(summary.layers),
        "shard": list(config.shard) if config.shard else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "seconds": round(time.time() - started, 3),
        "interrupted": summary.interrupted,
        "counts": {
            "images": total,
            "done": summary.count("done"),
            "failed": summary.count("failed"),
            "skipped": summary.count("skipped"),
        },
        "images": [s.to_json() for s in summary.statuses],
        "failures": [{"image": s.image, "error": s.error} for s in summary.failed],
        "checks": {
            "enabled": list(config.fail_on),
            "dead_fraction": config.dead_fraction,
            "passed": not summary.findings,
            "findings": [f.to_json() for f in summary.findings],
        },
        "notes": list(summary.notes),
        "tensorboard": str(config.tensorboard) if config.tensorboard else None,
    }


def _init_worker() -> None:
    from .rendering import configure_worker

    # Ctrl-C goes to the whole process group; the parent decides how to stop, and
    # lets workers finish the file they are writing.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_worker()


def _render_pool(workers: int):
    """Processes render in parallel with the model (matplotlib holds the GIL); with no
    pictures to draw, one thread writing files is enough."""
    if workers <= 0:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="hookviz-write")
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
    )


def _warm_up() -> None:
    from .rendering import warm_up  # in the worker only: the main process never draws

    warm_up()


def _portable(explanation):
    """The explanation without torch tensors or the decoded photo, cheap to send to a worker."""
    import numpy as np

    image = explanation.image
    light = replace(image, source=replace(image.source, rgb=None), tensor=np.asarray(image.tensor))
    return replace(explanation, image=light)
