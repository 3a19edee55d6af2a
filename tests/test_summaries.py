from __future__ import annotations

import numpy as np
import pytest

from hookviz.anatomy.featuremaps import Layout
from hookviz.errors import UsageError
from hookviz.explaining.summaries import channel_sum, channel_tiles, select_channels, tensor_stats
from hookviz.options import ChannelSelection


def test_stats_count_nonfinite_and_ignore_them():
    stats = tensor_stats(np.array([1.0, np.nan, 3.0, np.inf, 0.0]))
    assert stats["nonfinite"] == 2 and stats["min"] == 0.0 and stats["max"] == 3.0
    assert stats["mean"] == pytest.approx(4 / 3) and stats["zero_fraction"] == pytest.approx(0.2)
    assert tensor_stats(np.array([np.nan]))["min"] is None


def test_channel_sum_sums_over_channels():
    array = np.random.default_rng(0).normal(size=(1, 5, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(channel_sum(array, Layout("nchw")), array[0].sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(channel_sum(array, Layout("nhwc")), array[0].sum(axis=-1), rtol=1e-6)
    assert channel_sum(np.ones((1, 10), np.float32), None).shape == (10,)
    assert channel_sum(array, Layout("ambiguous")) is None  # drawn as no map, never as a guess


def test_channel_selection():
    maps = np.zeros((6, 2, 2), np.float32)
    maps[4] = 5
    maps[1] = 3
    parse = ChannelSelection.parse
    assert select_channels(maps, parse(2)) == ([1, 4], None)
    assert select_channels(maps, parse("0-2")) == ([0, 1, 2], None)
    assert select_channels(maps, parse("3,99")) == ([3], None)
    assert parse("3,7,9").indices(10) == [3, 7, 9]
    with pytest.raises(UsageError, match="channels='5-2'"):
        parse("5-2")
    tiles, note = channel_tiles(maps[None], Layout("nchw"), parse(1))
    assert tiles.indices == (4,) and tiles.total == 6 and tiles.maps.shape == (1, 2, 2) and note is None
    grads = -maps[None]
    assert channel_tiles(grads, Layout("nchw"), parse(1), by_magnitude=True)[0].indices == (4,)
