"""An example plug-in, written against the helpers docs/extending.md lists: a sample kind for 1-D
signals in CSV files (a header row, then one column per channel) and a Conv1d model that takes them.

    HOOKVIZ_PLUGINS=tests.signal_plugin hookviz run signals/ --model tests.signal_plugin:signal_net"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from hookviz.errors import ImageError, display_path
from hookviz.inputs.discovery import find_files
from hookviz.samples import Sample, SampleKindBase, register_sample_kind
from hookviz.samples.shown import signal_picture

CHANNELS, LENGTH = 2, 64


@dataclass(frozen=True)
class LoadedSignal:
    path: Path
    label: str
    values: np.ndarray  # (C, L)
    identity: object
    notes: tuple[str, ...] = ()


@register_sample_kind
class CsvSignal(SampleKindBase):
    name = "csv-signal"
    words = "a signal (a .csv file: a header row, then one column per channel)"
    noun = "signal"

    def find(self, sources, exclude=(), notes=None):
        return find_files(sources, (".csv",), "signal (.csv file)", exclude)

    def load(self, path, max_pixels, settings):
        try:
            values = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=np.float32).T
        except (OSError, ValueError) as error:
            raise ImageError(f"{display_path(path)}: no CSV of numbers under a header row ({error})") from None
        return LoadedSignal(path, display_path(path), np.ascontiguousarray(values), self.identity(path))

    def prepare(self, loaded, preprocessing, max_pixels, settings):
        return Sample(loaded, {"image": torch.from_numpy(loaded.values)}, signal_picture(loaded.values))

    def blank(self, preprocessing, settings):
        return (torch.zeros(1, CHANNELS, LENGTH),)


def signal_net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv1d(CHANNELS, 8, 5, padding=2), nn.ReLU(), nn.Conv1d(8, 8, 5, padding=2), nn.ReLU())
    net.append(nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 3)))
    net.hookviz_sample_kind = "csv-signal"
    return net
