"""The atlas's parts, each against an independent computation: the running top-K against a
full sort, the sketch's quantiles against numpy's, the receptive fields against the
arithmetic of the layers' kernels, strides and dilations, the statistics' merge against one pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from hookviz.anatomy.layers import resolve_layers
from hookviz.atlas.fields import receptive_field
from hookviz.atlas.ranking import RANKINGS, ScoreContext
from hookviz.atlas.sketch import ALPHA, MaxSketch
from hookviz.atlas.statistics import ChannelStatistics
from hookviz.atlas.topk import TopK


def _batches(scores: np.ndarray, size: int):
    for start in range(0, scores.shape[0], size):
        yield np.arange(start, min(start + size, scores.shape[0])), scores[start : start + size]


@pytest.mark.parametrize("size", [1, 3, 50])
def test_running_top_k_is_the_sorted_top_k_whatever_the_batches(size):
    rng = np.random.default_rng(size)
    scores = rng.normal(size=(50, 4)).round(1)  # rounded: ties, which go to the earlier sample
    top = TopK(4, 5)
    for ids, batch in _batches(scores, size):
        top.update(batch, ids, np.tile(ids[:, None], (1, 4)) * 10)
    for channel in range(4):
        expected = sorted(range(50), key=lambda i: (-scores[i, channel], i))[:5]
        assert [s for s, _, _ in top.ranked(channel)] == expected
        assert [v for _, v, _ in top.ranked(channel)] == [scores[i, channel] for i in expected]
        assert [p for _, _, p in top.ranked(channel)] == [i * 10 for i in expected]


def test_merged_parts_are_the_whole_top_k():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(30, 3)).round(1)
    whole, parts = TopK(3, 4), [TopK(3, 4), TopK(3, 4)]
    whole.update(scores, np.arange(30), np.zeros((30, 3), dtype=np.int64))
    for i in range(30):
        parts[i % 2].update(scores[i : i + 1], np.array([i]), np.zeros((1, 3), dtype=np.int64))
    parts[1].merge(parts[0])
    np.testing.assert_array_equal(parts[1].samples, whole.samples)


def test_a_channel_with_fewer_samples_than_k_keeps_empty_slots_out():
    top = TopK(2, 5)
    top.update(np.array([[1.0, np.nan], [2.0, 0.5]]), np.array([0, 1]), np.zeros((2, 2), dtype=np.int64))
    assert [s for s, _, _ in top.ranked(0)] == [1, 0]
    assert [s for s, _, _ in top.ranked(1)] == [1, 0]  # NaN ranks last, never above a number
    assert top.ranked(1)[1][1] == -np.inf


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 0.99, 1.0])
def test_sketch_quantiles_are_within_alpha_of_numpy(q):
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.lognormal(0, 2, size=(997, 2)), -rng.lognormal(0, 1, size=(3, 2)), np.zeros((5, 2))])
    sketch = MaxSketch(2)
    sketch.add(values[:500])
    sketch.add(values[500:])
    for channel in range(2):
        exact = np.quantile(values[:, channel], q, method="nearest")
        assert sketch.quantile(channel, q) == pytest.approx(exact, rel=ALPHA, abs=1e-6)
    assert sketch.histogram(0, values[:, 0].min(), values[:, 0].max(), 10).sum() == len(values)


def test_statistics_of_parts_add_up_to_one_pass():
    rng = np.random.default_rng(4)
    maxima, means = rng.normal(size=(20, 3)), rng.normal(size=(20, 3))
    classes = [["a", "b", None][i % 3] for i in range(20)]
    whole, one, two = ChannelStatistics(3), ChannelStatistics(3), ChannelStatistics(3)
    whole.update(maxima, means, classes)
    one.update(maxima[:7], means[:7], classes[:7])
    two.update(maxima[7:], means[7:], classes[7:])
    one.merge(two)
    for channel in range(3):
        a, b = whole.summary(channel), one.summary(channel)
        assert a["mean"] == pytest.approx(b["mean"]) and a["dead"] == b["dead"] == np.mean(maxima[:, channel] <= 0)
        assert [(c["class"], c["count"]) for c in a["classes"]] == [(c["class"], c["count"]) for c in b["classes"]]
        assert [c["mean_max"] for c in a["classes"]] == pytest.approx([c["mean_max"] for c in b["classes"]])
        assert a["max_quantiles"] == b["max_quantiles"]
        best = max(("a", "b"), key=lambda c: maxima[[i for i in range(20) if classes[i] == c], channel].mean())
        assert a["classes"][0]["class"] == best


@pytest.mark.parametrize(
    "class_means, expected",
    [
        ({"cat": 0.5, "dog": 0.3, "car": 0.1}, (0.5 - 0.2) / (0.5 + 0.2)),  # Morcos et al. as written
        ({"cat": 0.5, "dog": 0.3, "car": -0.82}, (0.5 - 0.15) / (0.5 + 0.15)),  # was 3.17, above its bound of 1
        ({"cat": -0.1, "dog": -0.3}, None),  # no class fires
        ({"cat": 0.4}, None),  # one class selects nothing
    ],
)
def test_selectivity_stays_between_0_and_1_on_a_layer_whose_values_go_negative(class_means, expected):
    stats = ChannelStatistics(1)
    for name, value in class_means.items():
        stats.update(np.array([[value - 0.1], [value + 0.1]]), np.zeros((2, 1)), [name, name])
    assert stats.summary(0)["selectivity"] == (None if expected is None else pytest.approx(expected))


def _field(model: nn.Module, layer: str, size: int = 64):
    (spec,) = resolve_layers(model, [layer])
    return receptive_field(model.eval(), spec, (torch.zeros(1, 3, size, size),))


def test_receptive_fields_follow_kernels_strides_and_dilations():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=2, dilation=2),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 4, 5, stride=2, padding=2),
    )
    # r = 1 + sum (k - 1) * d * (product of the strides before)
    for layer, size in (("0", 3), ("2", 7), ("4", 9), ("6", 9 + 4 * 2)):
        field = _field(model, layer)
        assert field.to_json()["size"] == [size, size], layer
    field = _field(model, "6")
    assert field.to_json()["stride"] == [4.0, 4.0]
    assert field.span((0, 0), field.grid, field.size)[0][0] == 0  # cut to the input
    assert field.span((15, 15), field.grid, field.size)[0][1] == 64


def test_receptive_field_leaves_the_random_stream_and_the_model_alone():
    model = nn.Sequential(nn.Conv2d(3, 2, 3), nn.ReLU())
    before = torch.random.get_rng_state()
    _field(model, "0")
    assert torch.equal(torch.random.get_rng_state(), before)
    assert not model._forward_hooks and not model[0]._forward_hooks


def test_rankings_score_by_max_and_mean_and_show_the_peak():
    maps = torch.tensor([[[[0.0, 3.0], [1.0, 0.0]]]])
    context = ScoreContext()
    best = RANKINGS.get("max").score(maps, context)
    mean = RANKINGS.get("mean").score(maps, context)
    assert best.scores[0, 0] == 3.0 and mean.scores[0, 0] == 1.0
    assert best.peaks[0, 0] == mean.peaks[0, 0] == 1


def test_a_quantile_over_two_samples_is_the_nearest_one_not_the_lower():
    from hookviz.atlas.sketch import MaxSketch

    sketch = MaxSketch(1)
    sketch.add(np.array([[11.0], [18.3]]))
    assert sketch.quantile(0, 0.99) == pytest.approx(18.3, rel=ALPHA)  # the page said 10.9: the lesser maximum
    assert sketch.quantile(0, 0.0) == pytest.approx(11.0, rel=ALPHA)
