"""What models declare about their layout: timm, transformers and torchvision read as they say."""

from __future__ import annotations

import pytest
import torchvision

from hookviz.anatomy.featuremaps import DeclaredLayout, Layout, layout_of
from hookviz.anatomy.geometry import declared_layout

from .conftest import TinyNet

timm = pytest.importorskip("timm")


def test_timm_vits_declare_their_prefix_tokens_and_patch_grid():
    deit = declared_layout(timm.create_model("deit_tiny_distilled_patch16_224", depth=1))
    assert (deit.prefix, deit.patch, deit.pad) == (2, (16, 16), False)
    assert "num_prefix_tokens=2" in deit.origin and "grid_size=(14, 14)" in deit.origin
    registers = declared_layout(timm.create_model("vit_little_patch16_reg4_gap_256", depth=1))
    assert (registers.prefix, registers.patch_grid((256, 256))) == (4, (16, 16))
    padded = declared_layout(timm.create_model("vit_tiny_patch16_224", depth=1, dynamic_img_size=True, dynamic_img_pad=True))
    assert padded.pad and padded.patch_grid((200, 200)) == (13, 13)


def test_declared_tokens_fix_what_counting_gets_wrong():
    registers = declared_layout(timm.create_model("vit_little_patch16_reg4_gap_256", img_size=64, depth=1))
    shape = (1, 4 + 16, 320)  # four registers and a 4x4 grid of patches
    assert layout_of(shape, (64, 64)) == Layout("tokens", 0, (4, 5))  # counted: a 4x5 grid, registers as patches
    assert layout_of(shape, (64, 64), registers) == Layout("tokens", 4, (4, 4), basis="declared")


def test_timm_hierarchical_models_declare_strides_and_swin_its_channels_last():
    swin = declared_layout(timm.create_model("swin_tiny_patch4_window7_224"))
    assert (swin.strides, swin.channels_last, swin.prefix) == ((4, 8, 16, 32), True, 0)
    assert declared_layout(timm.create_model("resnet18")).strides == (2, 4, 8, 16, 32)
    # PVT's overlapping patch embedding is not a grid of patches: only its strides are declared.
    pvt = declared_layout(timm.create_model("pvt_v2_b0"))
    assert pvt.patch is None and pvt.strides == (4, 8, 16, 32)


def test_a_subclass_of_a_timm_model_still_declares():
    class Mine(timm.models.vision_transformer.VisionTransformer):
        pass

    assert declared_layout(Mine(img_size=32, patch_size=8, depth=1, embed_dim=16, num_heads=2, reg_tokens=2)).prefix == 3


def test_torchvision_declares_its_vit_only():
    vit = declared_layout(torchvision.models.vit_b_16(weights=None))
    assert (vit.prefix, vit.patch, vit.strides) == (1, (16, 16), (16,))
    assert declared_layout(torchvision.models.swin_t(weights=None)) is None
    assert declared_layout(torchvision.models.resnet18(weights=None)) is None
    assert declared_layout(TinyNet()) is None


def test_transformers_models_declare_their_tokens_and_stages():
    transformers = pytest.importorskip("transformers")
    small = {
        "image_size": 32,
        "patch_size": 8,
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 16,
    }
    vit = declared_layout(transformers.ViTForImageClassification(transformers.ViTConfig(**small)))
    assert (vit.prefix, vit.patch, vit.strides) == (1, (8, 8), (8,))
    deit = declared_layout(transformers.DeiTForImageClassificationWithTeacher(transformers.DeiTConfig(**small)))
    assert deit.prefix == 2 and "distillation_token" in deit.origin
    swin = declared_layout(
        transformers.SwinForImageClassification(
            transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4)
        )
    )
    assert (swin.prefix, swin.patch, swin.pad, swin.strides) == (0, (4, 4), True, (4, 8))


def test_a_layout_of_ones_own_is_taken_over_what_the_module_says(tiny):
    from hookviz import Explainer
    from hookviz.inputs.images import Preprocessing
    from hookviz.models.sources.base import LoadedModel

    mine = DeclaredLayout(strides=(2,), origin="mine")
    loaded = LoadedModel("tiny", tiny, "as given", None, Preprocessing(), declared_layout=mine)
    assert Explainer.create(loaded).declared_layout is mine
    assert Explainer.create(LoadedModel("tiny", tiny, "as given", None, Preprocessing())).declared_layout is None
