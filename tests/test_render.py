"""The pictures (hookviz.render): honest colour scales, labels, figure reuse, and no global pyplot state."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
import torch
from matplotlib.colors import TwoSlopeNorm
from PIL import Image
from torch import nn

from hookviz import explain
from hookviz.errors import UsageError
from hookviz.inputs.images import Preprocessing
from hookviz.render import figures, render_png, worker
from hookviz.render.kinds import PictureKind, groups_help, kinds, picture_groups, picture_kind, register_kind

from . import picture_plugin
from .cli_helpers import hookviz_run
from .conftest import python_output
from .explorer_helpers import explorer_pictures


@pytest.fixture(scope="module")
def explanation():
    from .conftest import SAMPLES, tiny_net

    return explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["features.1", "fc"], target=1, topk=3)


def _images(figure):
    return [im for ax in figure.axes for im in ax.get_images()]


def test_summary_has_photo_four_panels_and_colorbars(explanation):
    figure = picture_kind("summary").figure(explanation, explanation["features.1"])
    title = figure._suptitle.get_text()
    assert "TinyNet" in title and "features.1" in title and "1x4x224x224" in title
    assert "class (1)" in title and "p=" in title
    images = _images(figure)
    assert len(images) == 5  # the photo and four maps
    gradients = [im for im in images if im.get_cmap().name == figures.GRADIENT_CMAP]
    assert len(gradients) == 2
    for image in gradients:
        norm = image.norm
        assert isinstance(norm, TwoSlopeNorm) and norm.vcenter == 0 and norm.vmin == -norm.vmax
    colorbars = [ax for ax in figure.axes if getattr(ax, "_colorbar", None) is not None]
    assert len(colorbars) == 4


def test_vector_panels_are_titled_line_plots(explanation):
    figure = picture_kind("summary").figure(explanation, explanation["fc"])
    titles = [ax.get_title() for ax in figure.axes if ax.get_title().startswith(("input", "output", "grad"))]
    assert len(titles) == 4 and all("per feature" in t and "min" in t for t in titles)
    assert not _images(figure)[1:]  # lines, not images, beside the photo


def test_activation_panel_spans_the_true_range(explanation):
    layer = explanation["features.1"]
    figure = picture_kind("summary").figure(explanation, layer)
    output_image = _images(figure)[2]
    summed = layer.output[0].sum(axis=0)
    assert output_image.norm.vmin == pytest.approx(summed.min()) and output_image.norm.vmax == pytest.approx(summed.max())


def _bar_labels(figure) -> list[list[str]]:
    """The value labels beside each colorbar, bottom to top."""
    return [[t.get_text() for t in ax.texts] for ax in figure.axes if getattr(ax, "_colorbar", None) is not None]


def test_colorbars_are_labelled_with_the_true_values(explanation):
    layer = explanation["features.1"]
    figure = picture_kind("summary").figure(explanation, layer)
    summed = layer.output[0].sum(axis=0)
    low, high = float(summed.min()), float(summed.max())
    _, output, grad_input, _ = _bar_labels(figure)  # the panels' order: input, output, grad_input, grad_output
    assert output == [figures.fmt(v) for v in (low, (low + high) / 2, high)]
    limit = float(np.abs(layer.grad_input[0].sum(axis=0)).max())
    assert grad_input == [figures.fmt(-limit), "0", figures.fmt(limit)]  # centred on zero
    cam = picture_kind("cam").figure(explanation, layer)
    assert _bar_labels(cam)[0] == ["0", figures.fmt(layer.cam.max() / 2), figures.fmt(layer.cam.max())]


def test_dead_layer_is_labelled_constant(explanation):
    layer = explanation["features.1"]
    dead = replace(layer, maps={**layer.maps, "output": np.zeros_like(layer.maps["output"])})
    figure = picture_kind("summary").figure(explanation, dead)
    titles = [ax.get_title() for ax in figure.axes]
    assert any(t.startswith("output") and "constant 0 everywhere" in t for t in titles)


def test_non_finite_values_are_grey_not_the_colour_of_zero(explanation):
    layer = explanation["features.1"]
    output = layer.maps["output"].copy()
    band = output.shape[0] // 5
    output[:band, :] = np.nan  # the top fifth
    holed = replace(layer, maps={**layer.maps, "output": output, "grad_input": np.full_like(output, np.inf)})
    figure = picture_kind("summary").figure(explanation, holed)
    titles = [ax.get_title() for ax in figure.axes]
    assert any(t.startswith("output") and f"{output[:band].size} not finite (grey)" in t for t in titles)
    assert any(t.startswith("grad_input") and "no finite values" in t for t in titles)
    pixels = np.asarray(Image.open(io.BytesIO(figures.png_bytes(figure))).convert("RGB"))
    output_ax = next(ax for ax in figure.axes if ax.get_title().startswith("output"))
    (x0, y0), (x1, y1) = output_ax.get_window_extent().get_points()
    inside = pixels[pixels.shape[0] - int(y1) + int((y1 - y0) * 0.1), int(x0) + 3 : int(x1) - 3]  # in the band
    assert (np.abs(inside.astype(int) - round(0.55 * 255)) <= 1).all()


def test_png_is_not_blank(explanation):
    data = figures.png_bytes(picture_kind("cam").figure(explanation, explanation["features.1"]))
    pixels = np.asarray(Image.open(io.BytesIO(data)).convert("L"), dtype=float)
    assert pixels.std() > 20


def test_channel_grid_labels_and_selection(explanation):
    layer = explanation["features.1"]
    figure = picture_kind("channels").figure(explanation, layer, channels="1,3")
    labels = [t.get_text() for t in figure.axes[0].texts]
    assert [l.split()[0] for l in labels] == ["#1", "#3"]
    means = layer.output[0].mean(axis=(1, 2))
    assert set(layer.tiles["output"].indices) == set(np.argsort(-means)[:64])
    shared = picture_kind("channels").figure(explanation, layer, scale="shared")
    assert "one scale" in shared.axes[1].get_ylabel()
    grads = picture_kind("channels").figure(explanation, layer, which="grad_output")
    assert grads.axes[0].get_images()[0].get_cmap().name == figures.GRADIENT_CMAP
    assert picture_kind("channels").figure(explanation, explanation["fc"]) is None  # no spatial layout


def test_cam_figures(explanation):
    layer = explanation["features.1"]
    figure = picture_kind("cam").figure(explanation, layer)
    assert "gradcam" in figure.axes[1].get_title()
    assert len(layer.topk_cams) == 3
    topk = picture_kind("cam_topk").figure(explanation, layer)
    assert sum(1 for ax in topk.axes if getattr(ax, "_colorbar", None) is not None) == 3
    assert picture_kind("cam").figure(explanation, explanation["fc"]) is None


def test_no_crop_draws_on_the_whole_photo():
    from .conftest import SAMPLES, tiny_net

    result = explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["features.1"], preprocessing=Preprocessing(mode="whole"))
    figure = picture_kind("cam").figure(result, result.layers[0])
    assert figure.axes[0].get_images()[0].get_array().shape == (300, 451, 3)


def test_a_cam_is_drawn_from_where_the_photo_lies_in_a_padded_input():
    from hookviz.tasks.base import Window

    from .conftest import SAMPLES, tiny_net

    result = explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["features.1"], preprocessing=Preprocessing(mode="whole"))
    cam = np.zeros((8, 8), np.float32)
    cam[2:6] = 1.0  # hot over the photo, cold over the padding above and below it (a centred letterbox)
    padded = replace(result, prediction=replace(result.prediction, window=Window(0.25, 0.0, 0.5, 1.0)))
    padded = replace(padded, layers=[replace(result.layers[0], cam=cam)])
    figure = picture_kind("cam").figure(padded, padded.layers[0])
    heat = np.ma.getdata(figure.axes[1].get_images()[1].get_array())  # the photo, then the CAM over it
    assert heat.shape == (300, 451)
    assert heat[40:-40].min() == pytest.approx(1.0)  # only its edges blend with the padding's cells
    assert heat.mean() > 0.9


#: Code for a fresh interpreter: a tiny model's explanation ``e`` of a seeded random image.
_TINY_EXPLANATION = (
    "import torch\n"
    "from hookviz import explain\n"
    "torch.manual_seed(0)\n"
    "m = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3), torch.nn.Flatten(), torch.nn.LazyLinear(3))\n"
    "m(torch.zeros(1, 3, 224, 224))\n"
    "e = explain(m.eval(), torch.rand(3, 224, 224, generator=torch.Generator().manual_seed(0)), layers=['0'])\n"
)


@pytest.mark.slow
def test_pyplot_is_never_imported():
    code = (
        "import sys\n"
        "from hookviz.render import figures\n" + _TINY_EXPLANATION + "figures.png_bytes(e.figure(kind='summary'))\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    assert python_output(code).strip() == "False"


@pytest.mark.slow
def test_render_workers_draw_the_same_pixels_as_any_process():
    """configure_worker() only makes drawing cheaper (fonts read from memory, no hinting):
    a worker's picture is the one the same settings give in a plain process."""

    def picture(configure: str) -> str:
        code = (
            "import hashlib, matplotlib\n"
            "from hookviz.render import render_png, worker\n"
            "from hookviz.render.kinds import picture_kind\n"
            f"{configure}\n" + _TINY_EXPLANATION + "cache = worker.worker_cache()\n"
            "for kind in ('summary', 'channels', 'cam'):\n"
            "    print(hashlib.sha256(render_png(picture_kind(kind), e, e.layers[0], cache)).hexdigest())\n"
        )
        return python_output(code)

    plain = picture("matplotlib.rcParams['text.hinting'] = 'no_hinting'")
    assert len(plain.split()) == 3 and picture("matplotlib.rcParams['text.hinting'] = 'no_hinting'") == plain
    assert picture("worker.configure_worker()") == plain


@pytest.mark.skipif(
    tuple(map(int, __import__("matplotlib").__version__.split(".")[:2])) >= (3, 12),
    reason="matplotlib 3.12 reads fonts from memory itself",
)
@pytest.mark.slow
def test_render_workers_read_fonts_from_memory():
    """The worker settings must really be in force (the pixel test above passes either way)."""
    code = (
        "from matplotlib import font_manager\n"
        "from hookviz.render import worker\n"
        "before = worker.fonts_from_memory()\n"
        "worker.configure_worker()\n"
        "font = font_manager.get_font(font_manager.findfont('DejaVu Sans'))\n"
        "print(before, worker.fonts_from_memory(), worker.worker_cache() is not None)\n"
    )
    assert python_output(code).split() == ["False", "True", "True"]


def test_a_reused_figure_takes_the_new_models_titles():
    """Two models with a layer of the same name and shape, in one render worker: the second
    picture must name the second model (the figure-reuse key holds the model)."""
    from .conftest import SAMPLES, tiny_net

    class OtherNet(type(tiny_net())):
        pass

    first_model, second_model = tiny_net().eval(), OtherNet().eval()
    cache = worker.FigureCache()
    for kind in ("summary", "cam", "channels"):
        first = explain(first_model, SAMPLES / "cat.png", layers=["features.1"])
        second = explain(second_model, SAMPLES / "cat.png", layers=["features.1"])
        render_png(picture_kind(kind), first, first.layers[0], cache)
        reused = render_png(picture_kind(kind), second, second.layers[0], cache)
        fresh = render_png(picture_kind(kind), second, second.layers[0])
        assert reused == fresh, kind


@pytest.mark.slow
def test_saving_in_a_notebook_keeps_no_figures_alive(tmp_path):
    code = (
        "import gc\n"
        "from matplotlib.figure import Figure\n" + _TINY_EXPLANATION + f"e.save({str(tmp_path)!r})\n"
        "gc.collect()\n"
        "print(sum(isinstance(o, Figure) for o in gc.get_objects()))\n"
    )
    assert python_output(code).split() == ["0"]


@pytest.mark.slow
def test_rendering_is_thread_safe(explanation):
    layer = explanation["features.1"]

    def draw(_):
        return figures.png_bytes(picture_kind("summary").figure(explanation, layer))

    sequential = draw(0)
    with ThreadPoolExecutor(4) as pool:
        assert all(result == sequential for result in pool.map(draw, range(8)))


@pytest.mark.parametrize(
    "kind, options, layer",
    [
        ("summary", {}, "features.1"),
        ("summary", {}, "fc"),
        ("channels", {"which": "output", "scale": "tile"}, "features.1"),
        ("channels", {"which": "grad_output", "scale": "shared"}, "features.1"),
        ("cam", {}, "features.1"),
        ("cam_topk", {}, "features.1"),
    ],
)
def test_a_reused_figure_draws_exactly_what_a_fresh_one_does(kind, options, layer):
    """render_png reuses one figure per layer across images, redrawing only what changes
    (or, for the line plots of a vector layer, all of it); the next image must not inherit
    anything of the previous one."""
    from .conftest import SAMPLES, tiny_net

    model = tiny_net().eval()
    first = explain(model, SAMPLES / "cat.png", layers=[layer], target=1, topk=3)
    second = explain(model, SAMPLES / "coffee.png", layers=[layer], target=3, topk=3)
    cache = worker.FigureCache()
    render_png(picture_kind(kind), first, first.layers[0], cache, **options)
    reused = render_png(picture_kind(kind), second, second.layers[0], cache, **options)
    assert len(cache) == 1
    fresh = figures.png_bytes(picture_kind(kind).figure(second, second.layers[0], **options))
    a = np.asarray(Image.open(io.BytesIO(reused)).convert("RGB"), dtype=int)
    b = np.asarray(Image.open(io.BytesIO(fresh)).convert("RGB"), dtype=int)
    assert a.shape == b.shape
    assert np.abs(a - b).max() == 0


def test_a_token_panel_says_how_many_prefix_tokens_it_dropped():
    import numpy as np

    from hookviz.render.kinds.summary import how

    assert how((1, 197, 8), np.zeros((14, 14))).endswith("tokens as a 14x14 grid, first token dropped")
    assert how((1, 260, 8), np.zeros((16, 16))).endswith("tokens as a 16x16 grid, first 4 tokens dropped")
    assert how((1, 49, 8), np.zeros((7, 7))).endswith("tokens as a 7x7 grid")


def test_constant_tiles_are_labelled_with_their_value_not_drawn_as_a_range():
    """Before a global average pool every gradient tile is flat: drawn on its own scale it
    fills with one full colour, so its label must say it is constant."""
    from .conftest import SAMPLES, tiny_net

    result = explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["act:1"])
    figure = picture_kind("channels").figure(result, result.layers[0], which="grad_output")
    labels = [t.get_text() for t in figure.axes[0].texts]
    assert labels and all(" =" in label for label in labels)
    assert "every tile is constant" in figure._suptitle.get_text()


def _layer_diff(seed: int):
    from hookviz.compare.measures import CamDiff, ImageDiff, LayerDiff, MapPair, TensorDiff, compare_arrays

    rng = np.random.default_rng(seed)
    before = rng.normal(size=(7, 7)).astype(np.float32)
    after = before + np.float32(0.01) * rng.normal(size=(7, 7)).astype(np.float32)
    cams = np.maximum(before, 0), np.maximum(after, 0)
    output = TensorDiff("output", True, ([1, 4, 7, 7], [1, 4, 7, 7]), map=compare_arrays(before, after))
    cam = CamDiff("fingerprint", 0.99, 32.0, ((7, 7), (7, 7)), (7, 7), MapPair(*cams))
    layer = LayerDiff("features.3", "features.3", "Conv2d", (output,), cam, MapPair(before, after))
    target = {"index": 1, "name": "tabby"}
    image = ImageDiff("cat", "cat.png", (target, target), ((), ()), -0.01, output, output, (layer,))
    return image, layer


def test_diff_picture_shows_before_and_after_on_one_scale_and_the_difference_centred_on_zero():
    image, layer = _layer_diff(0)
    figure, update, changing = picture_kind("diff").build(image, layer)
    assert changing is None  # redrawn whole: the contract's other form
    before, after, difference, cam_before, cam_after = _images(figure)
    maps = layer.maps
    low, high = float(min(maps.before.min(), maps.after.min())), float(max(maps.before.max(), maps.after.max()))
    assert before.norm.vmin == after.norm.vmin == pytest.approx(low) and before.norm.vmax == pytest.approx(high)
    limit = float(np.abs(maps.after.astype(np.float64) - maps.before).max())
    assert isinstance(difference.norm, TwoSlopeNorm) and difference.norm.vcenter == 0
    assert difference.norm.vmax == pytest.approx(limit) and difference.norm.vmin == pytest.approx(-limit)
    assert difference.get_cmap().name == figures.GRADIENT_CMAP
    assert _bar_labels(figure)[2] == [figures.fmt(-limit), "0", figures.fmt(limit)]
    cams = layer.cam.maps
    assert cam_before.norm.vmax == cam_after.norm.vmax == pytest.approx(max(cams.before.max(), cams.after.max()))
    titles = " ".join(ax.get_title() for ax in figure.axes)
    assert "output before" in titles and "after - before" in titles and "CAM before\nraw 7x7" in titles
    other_image, other_layer = _layer_diff(1)
    update(other_image, other_layer)
    fresh = figures.png_bytes(picture_kind("diff").build(other_image, other_layer)[0])
    assert figures.png_bytes(figure) == fresh


def test_diff_picture_needs_something_to_compare():
    from hookviz.compare.measures import TensorDiff

    image, layer = _layer_diff(0)
    assert picture_kind("diff").build(image, replace(layer, maps=None, cam=None, tensors=(TensorDiff("input", True),))) is None
    assert picture_kind("diff").build(image, layer.light()) is None  # its maps are let go once drawn


# ----------------------------------------------------------------------------- the registry of kinds


def test_an_incomplete_picture_kind_is_refused_when_it_is_registered():
    """A kind without a reuse key used to be drawn nowhere, silently: now registering it fails."""
    before = kinds()
    with pytest.raises(UsageError, match="picture kind 'half' has no reuse_key"):
        register_kind(PictureKind("half", "half", "half", "half a kind", picture_plugin.build, None))
    with pytest.raises(UsageError, match="picture kind 'half' has no build"):
        register_kind(PictureKind("half", "half", "half", "half a kind", "build", picture_plugin.reuse_key))
    with pytest.raises(UsageError, match="must be a module-level function"):
        register_kind(PictureKind("half", "half", "half", "half a kind", lambda e, l: None, picture_plugin.reuse_key))
    with pytest.raises(UsageError, match="a picture kind named 'toy' is already registered"):
        register_kind(replace(picture_plugin.KIND, group="other"))
    with pytest.raises(UsageError, match="its group 'Half Kind' must be"):
        register_kind(replace(picture_plugin.KIND, name="half", group="Half Kind"))
    assert kinds() == before


def test_pictures_choices_and_their_help_come_from_the_registry():
    import typer

    from hookviz.cli import app
    from hookviz.options import PictureOptions

    assert picture_groups()[:3] == ("summary", "channels", "cam") and "toy" in picture_groups()
    assert "toy (the output's mean, in words)" in groups_help()
    assert PictureOptions().pictures == ("summary", "channels", "cam")  # a plug-in's kind is drawn when asked for
    assert [kind.name for kind in PictureOptions(pictures="toy,summary").kinds] == ["summary", "toy"]
    with pytest.raises(UsageError, match="choose from summary, channels, cam, toy, or none"):
        PictureOptions(pictures="tile")
    option = next(p for p in typer.main.get_command(app).commands["run"].params if p.name == "pictures")
    assert option.default == "summary,channels,cam"
    assert "summary (input, output and their gradients summed over channels), channels (" in option.help


@pytest.mark.slow
def test_a_plugin_picture_kind_is_drawn_by_a_run_listed_and_shown(tmp_path):
    """tests/picture_plugin.py registers ``toy`` from outside the package; ``--pictures toy``
    draws it in a render worker (a fresh process, which imports the plug-in by name), for
    each image and layer, and the report and the gallery list it."""
    import json

    from .conftest import SAMPLES

    out = tmp_path / "out"
    result = hookviz_run(
        [SAMPLES / "cat.png", SAMPLES / "coffee.png"], "--pictures", "toy", "--workers", "1", layer="features.1", out=out
    )
    assert result.exit_code == 0, result.output
    for image in ("cat", "coffee"):
        report = json.loads((out / image / "report.json").read_text())
        assert report["layers"][0]["pictures"] == {"toy": "features.1.toy.png"}
        assert "features.1.toy.png" in report["files"]
        assert Image.open(out / image / "features.1.toy.png").size == (300, 120)
    assert (out / "index.html").is_file()
    pictures = explorer_pictures(out)
    assert pictures["cat/features.1.toy.png"] == "toy picture" and "coffee/features.1.toy.png" in pictures
    assert not list(out.glob("*/features.1.summary.png"))  # only what was asked for


def _texts(figure):
    """Every non-empty Text the figure draws: its title, the panels' titles, labels and notes."""
    found = [t for t in figure.texts]
    for ax in figure.axes:
        found += [ax.title, ax._left_title, ax._right_title, *ax.texts]
        if ax.axison:
            found += [ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels()]
    return [t for t in found if t.get_visible() and t.get_text().strip()]


def _crowded(figure) -> list[str]:
    """What is drawn outside the figure, or over another text or a colourbar."""
    renderer = figure.canvas.get_renderer()
    figure.canvas.draw()
    whole = figure.bbox
    texts = [(t.get_text().replace("\n", " | "), t.get_window_extent(renderer)) for t in _texts(figure)]
    bars = [ax.get_window_extent(renderer) for ax in figure.axes if ax.get_label() == "<colorbar>"]
    faults = [
        f"outside: {text!r}"
        for text, box in texts
        if box.x0 < whole.x0 - 1 or box.y0 < whole.y0 - 1 or box.x1 > whole.x1 + 1 or box.y1 > whole.y1 + 1
    ]
    faults += [
        f"overlap: {a!r} / {b!r}" for i, (a, box) in enumerate(texts) for b, other in texts[i + 1 :] if box.overlaps(other)
    ]
    faults += [f"over a colourbar: {text!r}" for text, box in texts for bar in bars if box.overlaps(bar)]
    return faults


@pytest.mark.parametrize("size", [(2000, 60), (60, 2000), (224, 224)])  # (width, height)
def test_very_wide_and_very_tall_photos_keep_every_text_inside_and_apart(size):
    from .conftest import tiny_net

    photo = Image.fromarray(np.random.default_rng(0).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))
    model = tiny_net().eval()
    whole = explain(model, photo, layers=["features.0"], topk=3, preprocessing=Preprocessing(mode="whole", size=64))
    original = explain(model, photo, layers=["features.0"], preprocessing=Preprocessing(mode="original"))
    for result, kind in [(whole, "cam"), (whole, "cam_topk"), (original, "summary"), (original, "cam")]:
        figure = result.figure(kind=kind)
        assert _crowded(figure) == [], (kind, size)


class _PooledAndSide(nn.Module):
    """A layer of 1x1 maps (each CAM's title gets a note) and a side branch with a long name
    that the logits do not depend on (gradient methods draw a note in the CAM's place)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.pooled_to_a_single_pixel_by_a_long_named_stage = nn.AdaptiveAvgPool2d(1)
        self.an_unused_side_branch_with_a_rather_long_name = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        features = torch.relu(self.stem(x))
        self.an_unused_side_branch_with_a_rather_long_name(features.detach())
        return self.head(self.pooled_to_a_single_pixel_by_a_long_named_stage(features).flatten(1))


@pytest.mark.parametrize(
    "layer", ["pooled_to_a_single_pixel_by_a_long_named_stage", "an_unused_side_branch_with_a_rather_long_name.1"]
)
def test_the_cams_picture_keeps_long_titles_and_notes_inside_and_apart(layer):
    """A first-column title wider than its panel was cut at the picture's left edge."""
    from .conftest import SAMPLES

    result = explain(_PooledAndSide().eval(), SAMPLES / "cat.png", layers=[layer], cam="gradcam++,eigencam,layercam")
    figure = picture_kind("cams").figure(result, result.layers[0])
    assert _crowded(figure) == []
    said = " ".join(t.get_text().replace("\n", " ") for t in _texts(figure))
    assert "(a 1x1 map: no spatial detail)" in said or "does not depend on this layer" in said
    titles = [ax.get_title().split(" ")[0] for ax in figure.axes if ax.get_title()]
    assert titles == ["gradcam++", "eigencam", "layercam"]  # as asked, a method without a map in its place


# ----------------------------------------------------------------------------- several methods, maps of the input


def test_several_methods_are_drawn_side_by_side_and_a_reused_figure_draws_what_a_fresh_one_does():
    from .conftest import SAMPLES, tiny_net

    model = tiny_net().eval()
    first, second = (
        explain(model, SAMPLES / name, layers=["features.1"], target=target, cam="gradcam,eigencam,scorecam")
        for name, target in (("cat.png", 1), ("coffee.png", 3))
    )
    kind = picture_kind("cams")
    assert kind.group == "cam" and kind.label == "CAM methods"
    figure = kind.figure(second, second.layers[0])
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert [title.split(" (")[0] for title in titles] == ["gradcam", "eigencam", "scorecam"]
    assert "each method's CAM of class (3)" in figure._suptitle.get_text()
    cache = worker.FigureCache()
    render_png(kind, first, first.layers[0], cache)
    reused = render_png(kind, second, second.layers[0], cache)
    fresh = figures.png_bytes(kind.figure(second, second.layers[0]))
    a, b = (np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int) for png in (reused, fresh))
    assert a.shape == b.shape and np.abs(a - b).max() == 0
    single = explain(model, SAMPLES / "cat.png", layers=["features.1"], cam="gradcam")
    assert render_png(kind, single, single.layers[0]) is None  # one method: <layer>.cam.png says it all


def test_maps_of_the_input_get_a_picture_of_their_own_scaled_as_captums_and_say_why_one_is_missing():
    from hookviz.render.pixel_scale import scaled
    from hookviz.render.pixels import pixels_figure

    from .conftest import SAMPLES, tiny_net

    result = explain(
        tiny_net().eval(), SAMPLES / "cat.png", layers=["fc"], target=1, steps=4, cam="guided-gradcam,integrated-gradients"
    )
    figure = pixels_figure(result)
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles[0] == "model input" and titles[1] == "guided-gradcam"
    # its steps, not the default; |v| with the top 2% clipped, as captum's visualize_image_attr
    # (a heat map's title is broken into lines that fit its panel: read as one line)
    flat = [" ".join(title.split("\n")) for title in titles]
    assert flat[2].startswith("integrated-gradients (steps 4), sum of 3 channels |v|, top 2% of the total clipped (")
    assert flat[3].startswith("integrated-gradients (steps 4), over the photo |v|")
    texts = [text.get_text() for ax in figure.axes for text in ax.texts]
    assert "no map: no recorded layer has a map to take its CAM from" in texts
    heat = figure.axes[[ax.get_title() for ax in figure.axes].index(titles[2])]
    (image,) = heat.get_images()
    found = scaled(result.pixel_maps["integrated-gradients"].map, "absolute", 2.0)
    np.testing.assert_allclose(np.ma.filled(image.get_array(), np.nan), found.values)
    assert image.norm.vmin == 0 and image.norm.vmax == 1 and 0 < found.threshold
    blended = figure.axes[[ax.get_title() for ax in figure.axes].index(titles[3])]
    assert len(blended.get_images()) == 2 and blended.get_images()[1].get_alpha() == 0.5  # heat over the grey photo
    signed = pixels_figure(result, sign="all")
    assert any(im.norm.vmin == -1 for ax in signed.axes for im in ax.get_images())
    assert pixels_figure(explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["fc"])) is None


def test_a_run_with_several_methods_writes_their_pictures_and_the_gallery_shows_them(tmp_path):
    import json

    from .conftest import SAMPLES

    out = tmp_path / "out"
    result = hookviz_run(
        SAMPLES / "cat.png",
        "--resize",
        "64",
        "--crop",
        "64",
        "--cam",
        "gradcam,eigencam,guided-backprop",
        "--pictures",
        "cam",
        "--workers",
        "1",
        layer="features.3",
        out=out,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["layers"][0]["pictures"]["cams"] == "features.3.cams.png"
    assert {"features.3.cams.png", "features.3.cam.png", "pixel_maps.png"} <= set(report["files"])
    assert all((out / "cat" / name).stat().st_size > 0 for name in report["files"])
    gallery = explorer_pictures(out)
    assert "cat/pixel_maps.png" in gallery and "CAM methods" in gallery.values()


def test_a_methods_settings_other_than_its_defaults_title_its_maps():
    """Two runs of rollout, or of integrated gradients, under other settings drew pictures
    titled alike: the settings are in the titles where they are not the defaults."""
    from types import SimpleNamespace

    import matplotlib.pyplot as plt

    from hookviz.render.pixels import pixels_figure
    from tests.conftest import tiny_net

    photo = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0))
    asked = {"settings": {"rollout": {"head_fusion": "max", "discard_ratio": 0.99}, "lrp": {"lrp_epsilon": 1e-6}}}
    assert figures.method_title(SimpleNamespace(asked=asked), "rollout") == "rollout (head fusion max, discard ratio 0.99)"
    assert figures.method_title(SimpleNamespace(asked=asked), "lrp") == "lrp"  # its default: nothing to tell apart
    assert figures.method_title(SimpleNamespace(asked={}), "gradcam") == "gradcam"
    for steps, title in (
        (8, "integrated-gradients (steps 8), sum of 3 channels"),
        (32, "integrated-gradients, sum of 3 channels"),
    ):
        explanation = explain(tiny_net(), photo, layers=["features.3"], cam="gradcam,integrated-gradients", steps=steps)
        drawn = pixels_figure(explanation)
        assert any(" ".join(ax.get_title().split("\n")).startswith(title + " |v|") for ax in drawn.axes)
        plt.close(drawn)
    drawn = explain(tiny_net(), photo, layers=["features.3"], cam="eigencam").figure("features.3", "cam")
    assert "eigencam, any class" in [ax.get_title().replace("\n", " ") for ax in drawn.axes]  # it was 'for class (2)'
    plt.close(drawn)
    figure = plt.figure()
    overlay = figures.Overlay(
        figure, figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2), np.zeros((8, 8, 3)), np.zeros((4, 4))
    )
    overlay.update(np.zeros((8, 8, 3)), np.zeros((4, 4)), "rollout", any_class=True)  # every patch's attention discarded
    assert overlay.ax.get_title() == "rollout (all zero)"  # not 'nothing here raises this class': it reads no class
    overlay.update(np.zeros((8, 8, 3)), np.zeros((4, 4)), "gradcam")
    assert overlay.ax.get_title().replace("\n", " ") == "gradcam (all zero: nothing here raises this class)"
    plt.close(figure)
