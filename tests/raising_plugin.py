"""A plug-in whose sample kind's decode raises what no decoder should: ``SystemExit`` for a photo
named ``exit*``, ``KeyboardInterrupt`` for ``interrupt*``, another photo decoded as a photo's::

    HOOKVIZ_PLUGINS=tests.raising_plugin hookviz run photos/ --model tests.raising_plugin:raising_net
"""

from __future__ import annotations

from pathlib import Path

import torch

from hookviz.inputs.images import load_image, prepare
from hookviz.samples import SampleKindBase, register_sample_kind

from .conftest import TinyNet


@register_sample_kind
class RaisingPhoto(SampleKindBase):
    """A photo, but ``exit*.png`` raises ``SystemExit(3)`` and ``interrupt*.png`` ``KeyboardInterrupt``."""

    name = "raising-photo"
    words = "a photo"
    noun = "photo"

    def load(self, path: Path, max_pixels: int, settings):
        if path.name.startswith("exit"):
            raise SystemExit(3)
        if path.name.startswith("interrupt"):
            raise KeyboardInterrupt
        return load_image(path, max_pixels)

    def prepare(self, loaded, preprocessing, max_pixels: int, settings):
        return prepare(loaded, preprocessing, max_pixels)

    def blank(self, preprocessing, settings) -> tuple:
        return (torch.zeros(1, 3, *preprocessing.trace_size),)


class RaisingNet(TinyNet):
    hookviz_sample_kind = "raising-photo"


def raising_net() -> RaisingNet:
    torch.manual_seed(0)
    return RaisingNet()
