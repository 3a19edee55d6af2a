"""TensorBoard export (``--tensorboard LOGDIR``): a run's pictures as image summaries, and
each layer's statistics as scalars and histograms, one step per image.

Images are logged under ``<layer>/<picture>`` so TensorBoard's step slider walks through
the run's photos. Needs the optional ``tensorboard`` package.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hookviz.errors import UsageError, arg
from hookviz.store.files import existing_ancestor

__all__ = ["TensorBoardLog", "check_available", "check_logdir"]

_STATS = ("min", "max", "mean", "std")


def check_available() -> None:
    """Raises UsageError, saying how to install it, when tensorboard is missing."""
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise UsageError(f"{arg('tensorboard')} needs the tensorboard package: pip install 'hookviz[tensorboard]'") from None


def check_logdir(logdir: Path) -> None:
    """Raises UsageError when tensorboard is missing or ``logdir`` cannot be written (checked
    before a run starts, so that a run never fails on it halfway)."""
    import os

    check_available()
    probe = existing_ancestor(logdir)
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{arg('tensorboard', logdir)}: cannot write there; choose another folder")
    try:  # some folders (/proc, a read-only mount) refuse a new folder whatever access() says
        Path(logdir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{arg('tensorboard', logdir)}: cannot make that folder ({exc.strerror}); choose another") from None


class TensorBoardLog:
    """Writes one step per image into ``logdir``. Use as a context manager."""

    def __init__(self, logdir: Path):
        check_available()
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir))

    def add(self, step: int, explanation, files: list[Path]) -> None:
        from PIL import Image

        writer = self.writer
        for path in files:
            if path.suffix == ".png":
                layer, _, picture = path.stem.rpartition(".")  # (a photo's own picture has no layer)
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("RGB"))
                writer.add_image(f"{layer}/{picture}" if layer else picture, pixels, step, dataformats="HWC")
        target = explanation.target
        if target is not None and target.probability == target.probability:  # not NaN
            writer.add_scalar("target/probability", target.probability, step)
        for layer in explanation.layers:
            for key, stats in layer.stats.items():
                if not stats:
                    continue
                for name in _STATS:
                    if stats.get(name) is not None:
                        writer.add_scalar(f"{layer.name}/{key}/{name}", stats[name], step)
                writer.add_scalar(f"{layer.name}/{key}/nonfinite", stats["nonfinite"], step)
            for key, histogram in layer.histograms.items():
                if histogram is not None:
                    writer.add_histogram_raw(f"{layer.name}/{key}", global_step=step, **histogram)

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "TensorBoardLog":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
