"""Hugging Face ``TimesformerForVideoClassification`` through ``hf:`` (issue 28): a tiny one built
here (random weights, saved with an image processor, offline) loads as a clip model, and its
divided space-time tokens (a class token, then one token per patch and frame, run position by
position with each position's frames in a row, as its embeddings reshape them) come back as
(T, H', W') maps equal to a hand-written reshape of the tokens in that order, and not in the
frame-by-frame order VideoMAE's and MViT's tokens run in."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz
from hookviz.anatomy.featuremaps import DeclaredLayout, Layout, reshape
from hookviz.errors import UnknownModelError
from hookviz.models.loading import load_model

from .test_hf_video import _Logits
from .test_video_models import _gradcam, _recorded

transformers = pytest.importorskip("transformers")

FRAMES, SIZE, PATCH = 3, 32, 8  # a (3, 4, 4) grid: no two axes alike, so a wrong order cannot pass
GRID = (FRAMES, SIZE // PATCH, SIZE // PATCH)


def _folder(where, **more):
    config = transformers.TimesformerConfig(
        image_size=SIZE, patch_size=PATCH, num_frames=FRAMES, hidden_size=16, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=32, num_labels=3, **more,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.TimesformerForVideoClassification(config).eval()
    model.save_pretrained(where)
    processor = transformers.VideoMAEImageProcessor(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE})
    processor.save_pretrained(where)
    return model


@pytest.mark.slow  # over 1.4 s of CPU: a transformer built, saved, loaded and explained
def test_timesformer_maps_equal_a_hand_reshape_of_its_position_major_tokens(tmp_path):
    pytest.importorskip("av")
    from .video_clips import encode

    model = _folder(tmp_path / "model")
    loaded = load_model(f"hf:{tmp_path / 'model'}", weights="DEFAULT")
    declared = loaded.declared_layout
    assert loaded.sample_kind == "video" and loaded.preprocessing.frames == FRAMES
    assert (declared.prefix, declared.temporal, declared.token_order) == (1, 1, "hwt")
    clip_in = torch.randn(3, FRAMES, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(pixel_values=clip_in.transpose(0, 1)[None]).logits
        np.testing.assert_allclose(loaded.module(clip_in[None]).logits, expected, rtol=1e-5, atol=1e-6)
    video = encode(tmp_path / "walk.mp4", frames=12, width=40, height=32)
    # the first block: the head reads the last block's class token alone, so no gradient reaches its other tokens
    found = hookviz.explain(loaded, str(video), layers=["timesformer.encoder.layer.0", "timesformer.encoder.layer.1"])
    assert found.layers[1].layout == Layout("tokens", 1, GRID, "declared", "hwt")
    clip = torch.as_tensor(np.asarray(found.image.tensor), dtype=torch.float32)
    for layer in found.layers[:1]:
        output, gradient = _recorded(_Logits(loaded.module), layer.name, clip, found.target.index)
        assert output.shape[1] == 1 + int(np.prod(GRID))  # the class token, then a token per patch and frame

        def by_position(tokens):  # (1, 1 + H'W'T, C): drop the class token, (H', W', T) as the embeddings lay them
            return tokens[:, 1:].reshape(1, GRID[1], GRID[2], FRAMES, -1).permute(0, 4, 3, 1, 2)

        def by_frame(tokens):  # the order VideoMAE's and MViT's run in: wrong here
            return tokens[:, 1:].reshape(1, *GRID, -1).permute(0, 4, 1, 2, 3)

        assert layer.layout == Layout("tokens", 1, GRID, "declared", "hwt")
        hand = _gradcam(by_position(output), by_position(gradient))
        np.testing.assert_allclose(layer.cam, hand, rtol=1e-4, atol=1e-6)
        wrong = _gradcam(by_frame(output), by_frame(gradient))
        assert np.abs(layer.cam - wrong).max() > 0.05 * np.abs(hand).max()  # the frame-major reading is another map


def test_the_token_order_reshapes_as_a_hand_reshape():
    tokens = torch.arange(2 * (1 + 24) * 5, dtype=torch.float32).reshape(2, 25, 5)  # (N, 1 + T*H*W, C), grid (2, 3, 4)
    hwt = reshape(tokens, Layout("tokens", 1, (2, 3, 4), "declared", "hwt"))
    thw = reshape(tokens, Layout("tokens", 1, (2, 3, 4), "declared"))
    assert torch.equal(hwt, tokens[:, 1:].reshape(2, 3, 4, 2, 5).permute(0, 4, 3, 1, 2))
    assert torch.equal(thw, tokens[:, 1:].reshape(2, 2, 3, 4, 5).permute(0, 4, 1, 2, 3)) and not torch.equal(hwt, thw)
    assert Layout.from_json(Layout("tokens", 1, (2, 3, 4), "declared", "hwt").to_json()).order == "hwt"
    assert "order" not in Layout("tokens", 1, (2, 3, 4), "declared").to_json()  # reports of other models unchanged
    assert "token_order" not in DeclaredLayout(temporal=2).to_json()


def test_a_space_only_timesformer_is_refused_in_one_line(tmp_path):
    _folder(tmp_path, attention_type="space_only")
    with pytest.raises(UnknownModelError, match="space_only"):
        load_model(f"hf:{tmp_path}", weights="DEFAULT")
