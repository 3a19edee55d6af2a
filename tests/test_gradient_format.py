"""The input's memory format in the passes with a graph (``InputGradients``): channels-last for a
model with BatchNorm2d, decided by the model and never timed, and as the input came for a model
that cannot take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import hookviz
from hookviz.errors import HookvizError
from hookviz.input_format import channels_last_gradients, formats_for


def _format(x) -> str:
    return "channels_last" if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous() else "as given"


class Seen(nn.Module):
    """A small classifier that records its input's format and batch size; with ``flat``, its
    first op is a ``.view`` that a channels-last input cannot take."""

    def __init__(self, batchnorm: bool = True, flat: bool = False):
        super().__init__()
        self.flat = flat
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8) if batchnorm else nn.Identity()
        self.head = nn.Linear(8, 5)
        self.seen: list[tuple[str, int]] = []

    def forward(self, x):
        self.seen.append((_format(x), len(x)))
        if self.flat:
            x = x.view(len(x), -1).view(x.shape)  # fails on a channels-last input
        pooled = torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3))
        return self.head(pooled)


def _explained(model, x, steps: int = 6):
    return hookviz.explain(model, x, layers="conv", cam="integrated-gradients", steps=steps)


def _by_hand(model, x, target: int, steps: int) -> np.ndarray:
    """Integrated gradients from zeros, Gauss-Legendre as hookviz's, with plain autograd."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas = torch.tensor(0.5 * (1 + nodes), dtype=torch.float32).reshape(-1, 1, 1, 1)
    path = (alphas * x[None]).requires_grad_(True)
    (grads,) = torch.autograd.grad(model(path)[:, target].sum(), path)
    return ((grads * torch.tensor(0.5 * weights, dtype=torch.float32).reshape(-1, 1, 1, 1)).sum(0) * x).detach().numpy()


def test_a_model_with_batchnorm_takes_its_gradient_passes_channels_last_and_the_map_is_the_same():
    torch.manual_seed(0)
    model, x = Seen().eval(), torch.randn(3, 12, 12)
    assert channels_last_gradients(model)
    result = _explained(model, x)
    steps = [kind for kind, rows in model.seen if rows == 6]
    assert steps == ["channels_last"]  # the six steps' pass; the recorded pass of one row is as it came
    model.seen.clear()
    expected = _by_hand(model, x, result.target.index, 6)
    assert (
        x.is_contiguous()
        and np.abs(result.pixel_maps["integrated-gradients"].map - expected).max() < 1e-5 * np.abs(expected).max()
    )


def test_a_model_without_batchnorm_takes_them_as_the_input_came():
    model = Seen(batchnorm=False).eval()
    assert not channels_last_gradients(model)
    _explained(model, torch.randn(3, 12, 12))
    assert {kind for kind, _ in model.seen} == {"as given"}


def test_a_model_that_cannot_take_channels_last_is_run_again_as_the_input_came_and_not_tried_again():
    torch.manual_seed(1)
    model, x = Seen(flat=True).eval(), torch.randn(3, 12, 12)
    first = hookviz.explain(model, x, layers="conv", cam="integrated-gradients,saliency", steps=6)
    assert [kind for kind, _ in model.seen].count("channels_last") == 1  # tried once in the run, failed on the view
    assert not channels_last_gradients(model) and not formats_for(model).expected
    model.seen.clear()
    again = _explained(model, x)
    assert {kind for kind, _ in model.seen} == {"as given"}
    np.testing.assert_allclose(first.pixel_maps["integrated-gradients"].map, again.pixel_maps["integrated-gradients"].map)
    assert np.abs(first.pixel_maps["integrated-gradients"].map).max() > 0


class Failing(Seen):
    """A model with BatchNorm2d that fails on every input of more than one row, in any format."""

    def __init__(self, error: type[Exception] = RuntimeError):
        super().__init__()
        self.error = error

    def forward(self, x):
        if len(x) > 1:
            self.seen.append((_format(x), len(x)))
            raise self.error("the model's own fault")
        return super().forward(x)


def test_an_error_of_the_models_own_is_its_own_and_keeps_the_format():
    """Raised as it came too, the error is the model's: it is reported, and the model keeps the
    channels-last passes (the format did not fail); a MemoryError is not retried at all."""
    model = Failing().eval()
    with pytest.raises(HookvizError, match="the model's own fault"):
        _explained(model, torch.randn(3, 12, 12))
    assert [kind for kind, rows in model.seen if rows > 1] == ["channels_last", "as given"] and formats_for(model).expected
    model = Failing(MemoryError).eval()
    with pytest.raises(HookvizError, match="MemoryError: the model's own fault"):
        _explained(model, torch.randn(3, 12, 12))
    assert [kind for kind, rows in model.seen if rows > 1] == ["channels_last"] and formats_for(model).expected
