"""Decoding every kind of file a user may hand over, and torchvision's usual preprocessing."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from hookviz.errors import ImageError, UsageError
from hookviz.inputs.discovery import find_images, read_list
from hookviz.inputs.images import Preprocessing, load_image, prepare
from hookviz.options import parse_triple

from .conftest import SAMPLES


def _save(image: Image.Image, path, **kwargs):
    image.save(path, **kwargs)
    return path


def test_preprocessing_equals_torchvisions_imagenet_transform(cat):
    reference = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    expected = reference(Image.open(cat).convert("RGB"))
    prepared = prepare(load_image(cat), Preprocessing())
    torch.testing.assert_close(prepared.tensor, expected, atol=1e-6, rtol=0)
    assert prepared.shown.shape == (224, 224, 3)


def test_no_crop_keeps_the_whole_photo(cat):
    prepared = prepare(load_image(cat), Preprocessing(mode="whole"))
    assert prepared.tensor.shape == (3, 224, 224)
    assert prepared.whole.shape == (300, 451, 3)


def test_16_bit_grayscale_is_scaled_not_clipped(tmp_path):
    ramp = (np.linspace(0, 65535, 64 * 64).reshape(64, 64)).astype(np.uint16)
    path = _save(Image.fromarray(ramp), tmp_path / "deep.png")
    rgb = np.asarray(load_image(path).rgb)
    assert rgb.shape == (64, 64, 3)
    assert rgb[0, 0, 0] == 0 and rgb[-1, -1, 0] == 255
    assert 120 < rgb[32, 0, 0] < 135  # the middle of the ramp is mid-grey, not white


def test_32_bit_float_grayscale_is_scaled(tmp_path):
    values = np.linspace(-3.0, 5.0, 32 * 32, dtype=np.float32).reshape(32, 32)
    path = _save(Image.fromarray(values, mode="F"), tmp_path / "float.tiff")
    rgb = np.asarray(load_image(path).rgb)
    assert rgb.min() == 0 and rgb.max() == 255 and len(np.unique(rgb)) > 100


def test_cmyk_jpeg(tmp_path):
    path = _save(Image.new("CMYK", (40, 30), (0, 255, 255, 0)), tmp_path / "cmyk.jpg")
    rgb = np.asarray(load_image(path).rgb).astype(int)
    assert rgb.shape == (30, 40, 3)
    assert rgb[..., 0].mean() > 200 and rgb[..., 1].mean() < 60  # red stays red


def test_transparency_is_composited_over_white(tmp_path):
    rgba = Image.new("RGBA", (10, 10), (255, 0, 0, 0))
    rgba.putpixel((0, 0), (0, 0, 255, 255))
    rgb = np.asarray(load_image(_save(rgba, tmp_path / "a.png")).rgb)
    assert tuple(rgb[5, 5]) == (255, 255, 255) and tuple(rgb[0, 0]) == (0, 0, 255)
    la = Image.new("LA", (10, 10), (0, 0))
    assert tuple(np.asarray(load_image(_save(la, tmp_path / "la.png")).rgb)[1, 1]) == (255, 255, 255)
    palette = Image.new("P", (10, 10), 0)
    palette.putpalette([0, 0, 0, 0, 255, 0] + [0] * 762)
    palette.putpixel((0, 0), 1)
    path = _save(palette, tmp_path / "p.png", transparency=0)
    rgb = np.asarray(load_image(path).rgb)
    assert tuple(rgb[5, 5]) == (255, 255, 255) and tuple(rgb[0, 0]) == (0, 255, 0)


def test_multi_frame_gif_and_tiff_use_the_first_frame(tmp_path):
    frames = [Image.new("RGB", (12, 12), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    for name in ("anim.gif", "pages.tiff"):
        path = tmp_path / name
        frames[0].save(path, save_all=True, append_images=frames[1:])
        loaded = load_image(path)
        assert loaded.notes == (f"{path}: first frame of 3 used",)
        assert np.asarray(loaded.rgb)[5, 5, 0] > 200


def test_exif_orientation_is_applied(tmp_path):
    image = Image.new("RGB", (40, 20), (10, 200, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = _save(image, tmp_path / "rotated.jpg", exif=exif.tobytes())
    assert load_image(path).rgb.size == (20, 40)


@pytest.mark.parametrize("name, kwargs", [("one.webp", {}), ("one.bmp", {}), ("UPPER.PNG", {}), ("a b é.png", {})])
def test_other_formats_names_and_1x1(tmp_path, name, kwargs):
    path = _save(Image.new("RGB", (1, 1), (200, 100, 50)), tmp_path / name, **kwargs)
    prepared = prepare(load_image(path), Preprocessing())
    assert prepared.tensor.shape == (3, 224, 224)


def test_one_bit_image(tmp_path):
    image = Image.new("1", (16, 16), 0)
    image.putpixel((3, 3), 1)
    rgb = np.asarray(load_image(_save(image, tmp_path / "bits.png")).rgb)
    assert tuple(rgb[3, 3]) == (255, 255, 255) and tuple(rgb[0, 0]) == (0, 0, 0)


def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _truncated(tmp_path, name, fmt):
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buffer, fmt)
    path = tmp_path / name
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.png", "no such file"),
        (lambda d: _write(d / "empty.png", b""), "empty"),
        (lambda d: _write(d / "text.png", "not a png"), "not an image format"),
        (lambda d: _truncated(d, "cut.png", "PNG"), "corrupt or truncated"),
        (lambda d: _truncated(d, "cut.jpg", "JPEG"), "corrupt or truncated"),
        (lambda d: _write(d / "header.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40), "corrupt|not an image"),
        (lambda d: _write(d / "drawing.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>"), "SVG"),
    ],
)
def test_broken_files_fail_with_a_message_naming_them(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(ImageError, match=message) as error:
        load_image(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


HEIC_START = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 40  # an iPhone photo's first box


@pytest.mark.parametrize("name", ["IMG_0001.HEIC", "photo.heif", "renamed.jpg"])
def test_heic_photos_get_their_own_hint(tmp_path, name):
    path = _write(tmp_path / name, HEIC_START)
    with pytest.raises(ImageError) as error:
        load_image(path)
    message = str(error.value)
    assert message.startswith(f"{path}: a HEIC/HEIF photo") and "SVG" not in message
    assert "install pillow-heif and call pillow_heif.register_heif_opener() first, or convert it to JPEG or PNG" in message


@pytest.mark.slow
def test_decompression_bomb_is_refused_fast(tmp_path):
    path = _save(Image.new("1", (40000, 40000), 0), tmp_path / "bomb.png")
    assert path.stat().st_size < 1_000_000
    with pytest.raises(ImageError, match="max_pixels"):
        load_image(path)
    with pytest.raises(ImageError, match="max_pixels"):
        load_image(_save(Image.new("RGB", (100, 100)), tmp_path / "small.png"), max_pixels=5000)


def test_thin_strip_is_refused_before_resizing(tmp_path):
    path = _save(Image.new("RGB", (1, 20000), (9, 9, 9)), tmp_path / "strip.png")
    with pytest.raises(ImageError, match="too thin"):
        load_image(path)


def test_find_images_expands_dirs_and_globs(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("b.png", "a.JPG", "sub/c.webp", "notes.txt"):
        _save(Image.new("RGB", (4, 4)), tmp_path / name, format="PNG") if not name.endswith(".txt") else (
            tmp_path / name
        ).write_text("x")
    found = find_images([str(tmp_path)])
    assert [p.name for p in found] == ["a.JPG", "b.png", "c.webp"]
    assert [p.name for p in find_images([str(tmp_path / "*.png")])] == ["b.png"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no image files"):
        find_images([str(tmp_path / "empty")])
    assert read_list(["a.png", "", "# comment", " b.png "]) == ["a.png", "b.png"]


def test_parse_triple():
    assert parse_triple("0.5", "mean") == (0.5, 0.5, 0.5)
    with pytest.raises(UsageError, match="std='1,0'"):
        parse_triple("1,0", "std")


def test_preprocessing_resizes_with_the_interpolation_it_names(cat):
    bicubic = transforms.Compose(
        [
            transforms.Resize(160, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(144),
            transforms.ToTensor(),
            transforms.Normalize([0.5] * 3, [0.5] * 3),
        ]
    )
    expected = bicubic(Image.open(cat).convert("RGB"))
    processing = Preprocessing(resize=160, size=144, mean=(0.5,) * 3, std=(0.5,) * 3, interpolation="bicubic")
    prepared = prepare(load_image(cat), processing)
    torch.testing.assert_close(prepared.tensor, expected, atol=1e-6, rtol=0)
    assert not torch.allclose(prepare(load_image(cat), replace(processing, interpolation="bilinear")).tensor, expected)
    assert processing.to_json()["interpolation"] == "bicubic"
    with pytest.raises(UsageError, match="interpolation='cubic'"):
        Preprocessing(interpolation="cubic")


def test_the_prepared_input_is_contiguous_and_runs_a_model_that_views_its_input():
    """Its strides were channels-last (a permuted view): the model below failed on
    ``result.image.tensor[None]``, the very input hookviz explained, given back to it."""
    import hookviz

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(3 * 32 * 32, 3)

        def forward(self, x):
            return self.fc(x.view(x.shape[0], -1)) + self.conv(x).relu().mean((1, 2, 3))[:, None]

    torch.manual_seed(0)
    model = Flat().eval()
    result = hookviz.explain(model, SAMPLES / "cat.png", layers=["conv"], inputs=hookviz.InputOptions(resize=32, crop=32))
    assert result.image.tensor.is_contiguous()
    with torch.no_grad():
        logits = model(result.image.tensor[None])[0]
    assert torch.allclose(logits, torch.from_numpy(result.logits).float(), atol=1e-5)


def test_float_arrays_in_0_to_1_are_photos_and_other_arrays_are_refused_in_one_line():
    """A float64 array given to explain() raised PIL's own TypeError ("Cannot handle this data type")."""
    from hookviz import explain

    from .conftest import tiny_net

    model = tiny_net().eval()
    pixels = np.random.default_rng(5).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    expected = explain(model, pixels, layers=["features.3"]).layers[0].cam
    for dtype in (np.float64, np.float32, np.float16):
        given = (pixels / 255.0).astype(dtype)
        np.testing.assert_array_equal(explain(model, given, layers=["features.3"]).layers[0].cam, expected)
    refused = {
        "image='40x48x3 float64 array': float pixels are read in 0..1, but these span 0..255": pixels.astype(np.float64),
        "image='40x48x3 int64 array': pixels are uint8 (0..255), uint16 or floats in 0..1, not int64": pixels.astype(np.int64),
        "image='3x40x48 float32 array': an array is a photo of H x W (x 1, 3 or 4); it looks like (C, H, W)": (
            pixels.transpose(2, 0, 1) / np.float32(255)
        ),
    }
    for message, array in refused.items():
        with pytest.raises(UsageError, match=re.escape(message)):
            explain(model, array, layers=["features.3"])


@pytest.mark.parametrize("shape", [(0, 0, 3), (0, 5), (5, 0, 3)])
def test_an_empty_float_array_is_refused_in_one_line(shape):
    """It raised numpy's 'zero-size array to reduction operation minimum which has no identity'."""
    import hookviz

    from .conftest import tiny_net

    with pytest.raises(hookviz.UsageError, match="the array has no pixels"):
        hookviz.explain(tiny_net(), np.zeros(shape, dtype=np.float64))
