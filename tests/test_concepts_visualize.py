"""Feature visualisation (``hookviz.concepts.visualize``): the optimised input excites its channel
more than any of a set of photos-like inputs, its figure is the channel's own on the saved
PNG, and steps and time are bounded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from hookviz.concepts.visualize import VisualizeSettings, visualize_channel
from hookviz.errors import UsageError

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 6, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 3),
    ).eval()


def _channel_max(model, pixels: np.ndarray, channel: int) -> float:
    """The channel's maximum on an 8-bit image, by a plain forward of the layers up to it."""
    x = torch.from_numpy(np.array(pixels)).permute(2, 0, 1).float().div(255)[None]
    x = (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    with torch.no_grad():
        return float(model[:5](x)[0, channel].amax())


def test_the_optimised_input_excites_its_channel_more_than_the_best_of_many_random_photos():
    model = _net()
    rng = np.random.default_rng(0)
    photos = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(40)]
    best = max(_channel_max(model, photo, 2) for photo in photos)
    steps = []
    found = visualize_channel(
        model, "4", 2, size=(32, 32), mean=MEAN, std=STD, settings=VisualizeSettings(steps=60, jitter=2, learning_rate=0.2),
        best_example=best, progress=lambda step, total: steps.append((step, total)),
    )  # fmt: skip
    assert found.image.shape == (32, 32, 3) and found.image.dtype == np.uint8
    assert found.activation == pytest.approx(_channel_max(model, found.image, 2), rel=1e-5)
    assert found.ratio == pytest.approx(found.activation / best) and found.ratio > 1.5
    assert steps == [(i, 60) for i in range(1, 61)] and found.steps == 60 and found.stopped is None
    assert found.image.std() > 5  # a pattern, not a flat grey


def test_the_time_bound_stops_it_and_says_so_and_the_model_is_left_as_it_was():
    model = _net().train()
    found = visualize_channel(
        model, "4", 0, size=(24, 24), mean=MEAN, std=STD, settings=VisualizeSettings(steps=500, seconds=0.05)
    )
    assert found.steps < 500 and "0.05 s bound" in found.stopped
    assert model.training and all(p.requires_grad for p in model.parameters())
    assert not any(m._forward_hooks for m in model.modules())
    assert found.ratio is None and found.best_example is None


def test_a_channel_the_layer_lacks_and_bad_bounds_are_refused():
    with pytest.raises(UsageError, match="has no channel 9"):
        visualize_channel(_net(), "4", 9, size=(16, 16), mean=MEAN, std=STD, settings=VisualizeSettings(steps=1))
    with pytest.raises(UsageError, match="visualize_steps"):
        VisualizeSettings(steps=0)
    with pytest.raises(UsageError, match="visualize_seconds"):
        VisualizeSettings(seconds=0)


def test_the_seed_makes_it_repeatable_and_the_callers_random_stream_is_untouched():
    model = _net()
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    first = visualize_channel(model, "1", 1, size=(16, 16), mean=MEAN, std=STD, settings=VisualizeSettings(steps=5))
    second = visualize_channel(model, "1", 1, size=(16, 16), mean=MEAN, std=STD, settings=VisualizeSettings(steps=5))
    assert np.array_equal(first.image, second.image)
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.slow  # torch.optim imports torch._dynamo (~4 s)
def test_the_written_out_adam_step_is_torchs_adam_maximising():
    from hookviz.concepts.visualize import _adam

    ours = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    theirs = ours.clone().requires_grad_(True)
    step = _adam(ours, 0.05)
    reference = torch.optim.Adam([theirs], lr=0.05, maximize=True)
    for count in range(1, 6):
        gradient = torch.randn(4, 3, generator=torch.Generator().manual_seed(count))
        step(gradient, count)
        theirs.grad = gradient.clone()
        reference.step()
    assert torch.allclose(ours, theirs.detach(), atol=1e-6)


def test_an_atlas_gets_the_visualisations_of_its_strongest_channels_and_their_ratios(tmp_path):
    from PIL import Image

    from hookviz.concepts.visualize import visualize_atlas

    model = _net()
    best = [0.5, 3.0, 0.1, 2.0, 0.2, 0.3]  # channels 1 and 3 fired most in the dataset
    items = [{"index": c, "top": [{"source": "p.png", "score": score}]} for c, score in enumerate(best)]
    document = {"schema": "hookviz/atlas/1", "rank": "max", "layers": [{"name": "4", "items": items}]}
    said = []
    found = visualize_atlas(
        model, document, tmp_path, 2, size=(24, 24), mean=MEAN, std=STD, settings=VisualizeSettings(steps=4), progress=said.append
    )
    items = found["layers"][0]["items"]
    shown = [item["index"] for item in items if "visualization" in item]
    done = [line for line in said if ": step " not in line]
    assert shown == [1, 3] and len(done) == 2 and done[0].startswith("4 channel 1: ")
    assert said[:3] == [f"4 channel 1: step {step} of 4" for step in (1, 2, 3)]  # progress within a channel
    for channel in shown:
        record = items[channel]["visualization"]
        pixels = np.asarray(Image.open(tmp_path / record["image"]))
        assert record["activation"] == pytest.approx(_channel_max(model, pixels, channel), rel=1e-5)
        assert record["ratio"] == pytest.approx(record["activation"] / best[channel]) and record["steps"] == 4
    assert "visualization" not in document["layers"][0]["items"][1]
