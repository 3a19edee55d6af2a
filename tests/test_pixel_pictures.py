"""Maps of the input drawn as captum's ``visualize_image_attr`` draws them: the same scaling
(``_normalize_attr``, ``_cumulative_sum_threshold``), the options' checks, and a picture whose
few extreme pixels no longer set the scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookviz import PictureOptions, UsageError
from hookviz.render.pixel_scale import PIXEL_SIGNS, clip_threshold, scaled

CAPTUM_SIGNS = {"absolute": "absolute_value", "positive": "positive", "all": "all"}


def _heavy_tailed(seed: int = 3) -> np.ndarray:
    """A (3, 24, 20) map of both signs with a handful of values 1000 times the rest."""
    rng = np.random.default_rng(seed)
    channels = rng.normal(size=(3, 24, 20)) * 1e-3
    channels[0, 5, 7], channels[1, 10, 2], channels[2, 20, 15] = 2.0, -3.0, 1.5
    return channels


@pytest.mark.parametrize("sign", PIXEL_SIGNS)
@pytest.mark.parametrize("clip", [0.5, 2.0, 10.0])
def test_the_scaling_is_captums_normalize_attr(sign, clip):
    from captum.attr._utils.visualization import _cumulative_sum_threshold, _normalize_attr

    channels = _heavy_tailed()
    mine = scaled(channels, sign, clip)
    summed = channels.sum(axis=0)
    theirs = _normalize_attr(summed, CAPTUM_SIGNS[sign], clip)
    np.testing.assert_allclose(mine.values, theirs, rtol=1e-6, atol=1e-9)
    magnitudes = {"absolute": np.abs(summed), "positive": np.maximum(summed, 0), "all": np.abs(summed)}[sign]
    assert mine.threshold == pytest.approx(_cumulative_sum_threshold(magnitudes, 100 - clip), rel=1e-9)
    assert clip_threshold(magnitudes, 100 - clip) == mine.threshold


def test_clipping_two_percent_lets_the_many_small_values_show():
    """Three pixels 20 times the typical one, holding under 2% of the total: as an integrated
    gradients map of a photo, whose few extremes drew the rest as white."""
    channels = np.random.default_rng(5).normal(size=(3, 64, 64)) * 1e-3
    channels[:, 5, 7], channels[:, 10, 2], channels[:, 40, 50] = 0.01, -0.01, 0.01
    found, unclipped = scaled(channels, "absolute", 2.0), scaled(channels, "absolute", 0.0)
    assert unclipped.threshold == np.abs(channels.sum(axis=0)).max()  # the largest value sets the scale
    assert np.median(unclipped.values) < 0.05  # so nearly every pixel is drawn as nearly nothing
    assert np.median(found.values) > 4 * np.median(unclipped.values) and 0 < found.clipped < 0.05


def test_a_map_of_zeros_and_a_non_finite_pixel_scale_without_dividing_by_zero():
    zeros = scaled(np.zeros((3, 4, 4)), "all")
    assert zeros.threshold == 0 and not zeros.values.any()
    holed = np.ones((1, 4, 4))
    holed[0, 1, 1] = np.nan
    found = scaled(holed, "positive")
    assert np.isnan(found.values[1, 1]) and np.nanmin(found.values) == 1.0


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(pixel_clip=100), "pixel_clip=100: the per cent of a map's total held by its largest values, clipped"),
        (dict(pixel_clip=-1), "pixel_clip=-1"),
        (dict(pixel_sign="negative"), "pixel_sign='negative': choose absolute, positive, all"),
    ],
)
def test_bad_picture_values_are_refused_in_one_line(given, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")) as caught:
        PictureOptions(**given)
    assert "\n" not in str(caught.value)


def test_the_pixel_picture_draws_the_clipped_heat_map_and_its_blend_over_the_photo(tmp_path):
    import hookviz

    from .conftest import tiny_net

    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(4))
    result = hookviz.explain(tiny_net().eval(), image, layers=["features.3"], cam="integrated-gradients", steps=4)
    written = result.save(tmp_path, pictures="cam", pixel_sign="all", pixel_clip=5)
    assert tmp_path / "pixel_maps.png" in written
    figure = result_figure(result)
    titles = [" ".join(ax.get_title().split("\n")) for ax in figure.axes if ax.get_title()]  # broken to fit: one line
    assert any("over the photo" in t for t in titles) and any("top 2% of the total clipped" in t for t in titles)
    import json

    asked = json.loads((tmp_path / "report.json").read_text())["asked"]
    assert (asked["pixel_clip"], asked["pixel_sign"]) == (5.0, "all")


def result_figure(result):
    from hookviz.render.pixels import pixels_figure

    return pixels_figure(result)


def test_a_small_inputs_panel_titles_are_broken_to_fit_inside_the_picture_and_apart():
    """At 32 pixels a panel is narrower than its two-line title: each is broken into lines that
    fit, and the first panel of the second row keeps its title inside the picture."""
    import hookviz

    from .conftest import tiny_net
    from .test_render import _crowded

    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(4))
    result = hookviz.explain(tiny_net().eval(), image, layers=["features.3"], cam="integrated-gradients,saliency", steps=4)
    figure = result_figure(result)
    assert len([ax for ax in figure.axes if ax.get_title()]) == 5  # the input, and two panels of each map
    assert _crowded(figure) == []
