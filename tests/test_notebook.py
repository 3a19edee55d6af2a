"""In a notebook: ``hookviz.explain(...)`` as a cell's last line shows its pictures inline."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser

import pytest
from PIL import Image

import hookviz
from hookviz.render.notebook import THUMBNAIL_WIDTH


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


def _picture(source: str, kind: str = "png") -> Image.Image:
    prefix = f"data:image/{kind};base64,"
    assert source.startswith(prefix)
    image = Image.open(io.BytesIO(base64.b64decode(source[len(prefix) :], validate=True)))
    image.load()
    assert image.format == kind.upper()
    return image


def _pixels(figure) -> tuple[int, int]:
    width, height = figure.get_size_inches() * figure.dpi
    return round(width), round(height)


def test_an_explanation_shows_thumbnails_of_its_summary_and_cam_pictures_as_html(tiny, photo):
    result = hookviz.explain(tiny, photo, layers=["features.3", "fc"], topk=3, inputs=hookviz.InputOptions(resize=64, crop=64))
    markup = result._repr_html_()
    images = _images(markup)
    shown = [(image["data-layer"], image["data-kind"]) for image in images]
    # fc has no spatial map: its summary only, no CAM.
    assert shown == [("features.3", "summary"), ("features.3", "cam"), ("features.3", "cam_topk"), ("fc", "summary")]
    for image, (layer, kind) in zip(images, shown):
        width, height = _pixels(result.figure(layer, kind))
        thumb = _picture(image["src"], "jpeg")
        assert thumb.width == min(width, THUMBNAIL_WIDTH) and abs(thumb.height - height * thumb.width / width) <= 1
        assert image["title"] == f"full size: result.figure({layer!r}, {kind!r})"
    assert "photo.png" in markup and "top-5" in markup and result.target.label in markup
    assert "result.save(&#x27;folder&#x27;)" in markup or "result.save('folder')" in markup


@pytest.mark.slow  # twenty layers' pictures, drawn twice: 4 s here
def test_a_notebook_of_many_layers_stays_light(tiny, photo):
    """Full-size PNGs of 20 layers were 7.8 MB (a notebook keeps every byte of its outputs)."""
    from hookviz.render.notebook import figure_png

    layers = ["features.1", "features.3", "act:1"]
    result = hookviz.explain(tiny, photo, layers=layers, topk=3, inputs=hookviz.InputOptions(resize=64, crop=64))
    markup = result._repr_html_()
    shown = [(image["data-layer"], image["data-kind"]) for image in _images(markup)]
    full = sum(len(figure_png(result.figure(layer, kind))) for layer, kind in shown)
    assert len(shown) == 3 * len(layers) and len(markup) < full / 4


def test_figure_takes_a_picture_kind_alone_for_the_first_layer(tiny, photo):
    result = hookviz.explain(tiny, photo, layers=["features.3", "act:1"], inputs=hookviz.InputOptions(resize=64, crop=64))
    assert _pixels(result.figure("cam")) == _pixels(result.figure("features.3", "cam"))
    assert result.figure("act:1", "cam") is not None
    with pytest.raises(KeyError, match="'layer9' not among"):
        result.figure("layer9")
