"""The input's memory format for repeated passes: timed, chosen, and never a change to the model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hookviz import input_format
from hookviz.input_format import InputFormats


class _Clock:
    """The clock ``InputFormats`` times passes with: it moves only when a model says so, so
    that a busy machine (a pass preempted for longer than the slow format costs) cannot
    reverse which format is faster."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(input_format, "time", clock)
    return clock


class Formats(nn.Module):
    """A convolution that records its input's format and takes a second more of ``clock`` in
    ``slow`` format (none without one)."""

    def __init__(self, slow: str, clock: _Clock | None = None):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.slow, self.seen, self.clock = slow, [], clock

    def forward(self, x):
        kind = "channels_last" if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous() else "as given"
        self.seen.append(kind)
        if kind == self.slow and self.clock is not None:
            self.clock.now += 1.0
        return self.conv(x)


def _runs(model, formats, count=5, rows=8):
    x = torch.randn(rows, 3, 16, 16)
    outputs = [formats.run(model, tuple(x.shape), lambda: model(x)) for _ in range(count)]
    return x, outputs


def test_the_first_pass_runs_as_given_the_second_channels_last_then_the_faster(clock):
    for slow, faster in (("as given", "channels_last"), ("channels_last", "as given")):
        model, formats = Formats(slow, clock), InputFormats()
        x, outputs = _runs(model, formats)
        assert model.seen == ["as given", "channels_last", faster, faster, faster]
        assert formats.chosen(tuple(x.shape)) == faster
        for output in outputs:  # the same numbers either way
            torch.testing.assert_close(output, model.conv(x), rtol=1e-5, atol=1e-6)
        assert not model._forward_pre_hooks  # the conversion lived for its pass only


def test_a_pass_of_few_rows_is_not_timed_and_runs_as_given_until_decided():
    model, formats = Formats("channels_last"), InputFormats()
    _runs(model, formats, count=3, rows=2)
    assert model.seen == ["as given", "as given", "as given"]
    assert formats.chosen((2, 3, 16, 16)) == "undecided"


class Flattening(nn.Module):
    """A model that calls ``.view`` on its input, which a channels-last tensor refuses."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3 * 8 * 8, 2)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.head(x.view(len(x), -1))


def test_a_model_that_cannot_take_channels_last_runs_as_given_from_then_on():
    model, formats = Flattening(), InputFormats()
    x = torch.randn(8, 3, 8, 8)
    outputs = [formats.run(model, tuple(x.shape), lambda: model(x)) for _ in range(4)]
    for output in outputs:
        torch.testing.assert_close(output, model.head(x.reshape(8, -1)))
    assert model.calls == 5  # the second pass failed channels-last and ran again; no more tries
    assert formats.chosen(tuple(x.shape)) == "as given"


def test_a_module_that_takes_no_tensor_batch_is_left_alone():
    class Listing(nn.Module):
        def forward(self, images):
            return torch.stack([image.sum() for image in images])

    model, formats = Listing(), InputFormats()
    images = [torch.randn(3, 8, 8) for _ in range(8)]
    for _ in range(4):
        formats.run(model, (8, 3, 8, 8), lambda: model(images))
    assert formats.chosen((8, 3, 8, 8)) == "as given"


def test_a_model_with_batchnorm_tries_channels_last_first_and_keeps_what_it_learnt(clock):
    from hookviz.input_format import formats_for

    class Normed(Formats):
        def __init__(self, slow):
            super().__init__(slow, clock)
            self.norm = nn.BatchNorm2d(3)

    model, plain = Normed("channels_last").eval(), Formats("channels_last", clock)
    assert formats_for(model) is formats_for(model) and formats_for(plain) is not formats_for(model)
    _runs(model, formats_for(model), count=2)
    _runs(model, formats_for(model), count=2)  # another explanation of the same model
    assert model.seen == ["channels_last", "as given", "as given", "as given"]
    _runs(plain, formats_for(plain), count=2)
    assert plain.seen == ["as given", "channels_last"]
