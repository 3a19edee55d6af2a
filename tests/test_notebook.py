"""In a notebook: ``hookviz.explain(...)`` as a cell's last line shows its pictures inline."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser

import pytest
from PIL import Image

import hookviz


class _Images(HTMLParser):
    """The ``<img>`` tags of an HTML fragment, with their attributes."""

    def __init__(self):
        super().__init__()
        self.images: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))


def _images(markup: str) -> list[dict]:
    parser = _Images()
    parser.feed(markup)
    parser.close()
    return parser.images


def _png(source: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert source.startswith(prefix)
    image = Image.open(io.BytesIO(base64.b64decode(source[len(prefix) :], validate=True)))
    image.load()
    assert image.format == "PNG"
    return image


def _pixels(figure) -> tuple[int, int]:
    width, height = figure.get_size_inches() * figure.dpi
    return round(width), round(height)


def test_an_explanation_shows_its_summary_and_cam_pictures_as_html(tiny, photo):
    result = hookviz.explain(tiny, photo, layers=["features.3", "fc"], topk=3, inputs=hookviz.InputOptions(resize=64, crop=64))
    markup = result._repr_html_()
    images = _images(markup)
    shown = [(image["data-layer"], image["data-kind"]) for image in images]
    # fc has no spatial map: its summary only, no CAM.
    assert shown == [("features.3", "summary"), ("features.3", "cam"), ("features.3", "cam_topk"), ("fc", "summary")]
    for image, (layer, kind) in zip(images, shown):
        assert _png(image["src"]).size == _pixels(result.figure(layer, kind))
    assert "photo.png" in markup and "top-5" in markup and result.target.label in markup


def test_figure_takes_a_picture_kind_alone_for_the_first_layer(tiny, photo):
    result = hookviz.explain(tiny, photo, layers=["features.3", "act:1"], inputs=hookviz.InputOptions(resize=64, crop=64))
    assert _pixels(result.figure("cam")) == _pixels(result.figure("features.3", "cam"))
    assert result.figure("act:1", "cam") is not None
    with pytest.raises(KeyError, match="'layer9' not among"):
        result.figure("layer9")
