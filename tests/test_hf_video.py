"""Hugging Face video classifiers through ``hf:`` (issue 28): a tiny VideoMAE built here
(random weights, saved with its image processor, offline) loads as a clip model, takes
hookviz's (C, T, H, W) clip as its (N, T, C, H, W) ``pixel_values``, and its tubelet tokens
come back as (T', H', W') maps equal to a hand-written reshape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz
from hookviz.models.loading import load_model

from .test_video_models import _gradcam, _recorded

transformers = pytest.importorskip("transformers")

FRAMES, SIZE, PATCH, TUBELET = 4, 32, 8, 2


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    config = transformers.VideoMAEConfig(
        image_size=SIZE, patch_size=PATCH, num_frames=FRAMES, tubelet_size=TUBELET, hidden_size=16,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, num_labels=3,
        id2label={0: "run", 1: "jump", 2: "swim"}, label2id={"run": 0, "jump": 1, "swim": 2},
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.VideoMAEForVideoClassification(config).eval()
    where = tmp_path_factory.mktemp("videomae")
    model.save_pretrained(where)
    processor = transformers.VideoMAEImageProcessor(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE})
    processor.save_pretrained(where)
    return where, model


def test_a_videomae_folder_loads_as_a_clip_model(folder):
    where, model = folder
    loaded = load_model(f"hf:{where}", weights="DEFAULT")
    assert loaded.sample_kind == "video" and loaded.preprocessing.frames == FRAMES and loaded.input_size == (SIZE, SIZE)
    assert loaded.categories == ("run", "jump", "swim") and loaded.task == "classify"
    assert loaded.declared_layout.temporal == TUBELET and loaded.declared_layout.prefix == 0
    clip = torch.randn(3, FRAMES, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the clip's (C, T) swapped into the model's (T, C)
        expected = model(pixel_values=clip.transpose(0, 1)[None]).logits
        np.testing.assert_allclose(loaded.module(clip[None]).logits, expected, rtol=1e-5, atol=1e-6)
    assert {name for name, _ in loaded.module.named_modules()} - {""} == {name for name, _ in model.named_modules()} - {""}


def test_videomae_tubelet_maps_equal_a_hand_reshape_of_its_tokens(folder, tmp_path):
    pytest.importorskip("av")
    from .video_clips import encode

    where, model = folder
    loaded = load_model(f"hf:{where}", weights="DEFAULT")
    video = encode(tmp_path / "walk.mp4", frames=12, width=40, height=32)
    layers = ["videomae.encoder.layer.0", "videomae.encoder.layer.1"]
    found = hookviz.explain(loaded, str(video), layers=layers)
    clip = torch.as_tensor(np.asarray(found.image.tensor), dtype=torch.float32)
    assert clip.shape == (3, FRAMES, SIZE, SIZE)  # the config's frames, at its size
    target = found.target.index
    grid = (FRAMES // TUBELET, SIZE // PATCH, SIZE // PATCH)
    for layer in found.layers:
        output, gradient = _recorded(_Logits(loaded.module), layer.name, clip, target)
        assert output.shape[1] == int(np.prod(grid))  # no class token: the tubelets alone

        def grid_of(tokens):
            return tokens.reshape(1, *grid, -1).permute(0, 4, 1, 2, 3)

        assert layer.layout.kind == "tokens" and tuple(layer.layout.grid) == grid and layer.layout.prefix == 0
        np.testing.assert_allclose(layer.cam, _gradcam(grid_of(output), grid_of(gradient)), rtol=1e-4, atol=1e-6)


class _Logits(torch.nn.Module):
    """The loaded model's logits alone, for the hand-recorded gradients."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, clip):
        return self.module(clip).logits

    def get_submodule(self, target):
        return self.module.get_submodule(target)
