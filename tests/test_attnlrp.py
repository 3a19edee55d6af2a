"""``attnlrp`` (``hookviz.methods.attnlrp``) against LXT itself, on torchvision's vit_b_16
architecture at a reduced size with random weights: LXT's efficient mode (its patches of
torch's and zennit's classes, applied and put back around the reference pass) and hookviz's
hooks give maps within 1e-3 of their largest value; nothing of torch, zennit or the model
is changed by hookviz's pass."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from hookviz.errors import UsageError
from hookviz.methods.attnlrp import AttnLrpSettings, check_attnlrp
from tests.test_lrp import relevance_maps, same_state, state

pytest.importorskip("zennit")
pytest.importorskip("lxt")

SIDE = 64
TARGET = 3


def lxt_efficient():
    """LXT's zennit patch and its torchvision ViT patch map. ``lxt.efficient``'s own
    ``__init__`` imports every language model LXT covers, which transformers 5 lacks, so its
    packages are stood in for while the two modules load (and put back after)."""
    root = Path(importlib.util.find_spec("lxt").submodule_search_locations[0]) / "efficient"
    names = ("lxt.efficient", "lxt.efficient.models")
    saved = {name: sys.modules.get(name) for name in names}
    for name, path in zip(names, (root, root / "models")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    try:
        return importlib.import_module("lxt.efficient.zennit_patches"), importlib.import_module("lxt.efficient.models.vit_torch")
    finally:
        for name, module in saved.items():
            sys.modules.pop(name, None) if module is None else sys.modules.__setitem__(name, module)


def lxt_maps(model, batch, settings=AttnLrpSettings()) -> np.ndarray:
    """LXT's efficient AttnLRP, as its vit_torch example computes it: input times gradient."""
    import zennit.rules
    from zennit.composites import LayerMapComposite
    from zennit.core import BasicHook

    zennit_patches, vit = lxt_efficient()
    classes = (torch.nn.GELU, torch.nn.LayerNorm, torch.nn.MultiheadAttention, BasicHook)
    saved = {cls: dict(cls.__dict__) for cls in classes}
    try:
        for target, patch in vit.cp_LRP.items():
            assert patch(target)
        zennit_patches.monkey_patch_zennit()
        composite = LayerMapComposite(
            [
                (torch.nn.Conv2d, zennit.rules.Gamma(settings.attnlrp_conv_gamma)),
                (torch.nn.Linear, zennit.rules.Gamma(settings.attnlrp_linear_gamma)),
            ]
        )
        x = batch.clone().requires_grad_(True)
        with composite.context(model):
            model(x)[:, TARGET].sum().backward()
        return (x * x.grad).detach().numpy()
    finally:  # LXT's patches are for the whole process: put every class back
        for cls, members in saved.items():
            for name in [name for name in cls.__dict__ if name not in members]:
                delattr(cls, name)
            for name in ("forward", "backward"):
                if name in members:
                    setattr(cls, name, members[name])


def small_vit():
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=SIDE, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10
    ).eval()
    torch.nn.init.normal_(model.heads.head.weight, std=0.5)  # torchvision starts the head at zero: every logit 0
    return model


def test_attnlrp_equals_lxts_efficient_mode_and_changes_nothing():
    model = small_vit()
    torch.manual_seed(1)
    batch = torch.randn(2, 3, SIDE, SIDE)
    before, forwards = state(model), (torch.nn.GELU.forward, torch.nn.LayerNorm.forward, torch.nn.MultiheadAttention.forward)
    mine, figures = relevance_maps(model, batch, "conv_proj", "attnlrp", TARGET)
    assert same_state(before, state(model))
    assert (torch.nn.GELU.forward, torch.nn.LayerNorm.forward, torch.nn.MultiheadAttention.forward) == forwards
    theirs = lxt_maps(copy.deepcopy(model), batch)
    assert mine.shape == theirs.shape == (2, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert np.abs(mine - theirs).max() / np.abs(theirs).max() < 1e-3
    logits = model(batch)[:, TARGET].detach().double()
    for n, found in enumerate(figures):
        assert found["relevance"] == pytest.approx(float(theirs[n].astype(np.float64).sum()), rel=1e-4)
        assert found["score"] == pytest.approx(float(logits[n]), rel=1e-4)


def test_attnlrp_refuses_a_model_lxts_rules_do_not_cover_in_one_line():
    with pytest.raises(UsageError) as caught:
        check_attnlrp(torchvision.models.resnet18(weights=None))
    assert "\n" not in str(caught.value) and "VisionTransformer" in str(caught.value) and "lrp" in str(caught.value)
    model = small_vit()
    model.heads.add_module("act", torch.nn.Tanh())  # a layer type AttnLRP's rules leave out
    with pytest.raises(UsageError) as caught:
        check_attnlrp(model)
    assert "\n" not in str(caught.value) and "Tanh" in str(caught.value)


def test_attnlrp_settings_are_checked_in_one_line():
    with pytest.raises(UsageError) as caught:
        AttnLrpSettings(attnlrp_conv_gamma=-0.5)
    assert "\n" not in str(caught.value) and "conv_gamma" in str(caught.value)


def test_a_timm_vision_transformer_is_not_called_by_torchvisions_name():
    """timm's class is named VisionTransformer too: the refusal read 'VisionTransformer is not
    torchvision's VisionTransformer'."""
    import timm

    with pytest.raises(UsageError) as caught:
        check_attnlrp(timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=16, depth=1))
    assert str(caught.value) == (
        "cam='attnlrp': timm.models.vision_transformer.VisionTransformer is not torchvision's VisionTransformer, the "
        "model LXT's efficient AttnLRP rules cover; choose chefer or legrad for another transformer, lrp for a CNN, or "
        "a gradient method (integrated-gradients)"
    )


def _hf_vit():
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=4,
    )
    return ViTForImageClassification(config).eval()


@pytest.mark.slow
def test_lrp_on_a_timm_or_hugging_face_vit_advises_what_works_on_it():
    """Issue 37: ``--cam lrp`` on a timm ViT advised attnlrp, which refuses every timm and Hugging
    Face ViT. The advice names the attention methods, and the first of them explains the model."""
    import timm

    import hookviz
    from hookviz.methods.lrp import check_lrp

    timm_vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=4)
    for model in (timm_vit.eval(), _hf_vit()):
        with pytest.raises(UsageError) as caught:
            check_lrp(model)
        said = str(caught.value)
        assert "\n" not in said and "choose chefer, legrad or rollout for this transformer" in said, said
        assert "attnlrp covers torchvision's VisionTransformer only" in said
        with pytest.raises(UsageError):
            check_attnlrp(model)  # what the advice says: attnlrp is not for this model
        size = hookviz.InputOptions(resize=32, crop=32)
        result = hookviz.explain(model, torch.rand(3, 32, 32), cam="chefer", target=1, inputs=size)
        cam = result.layers[0].cams["chefer"]
        assert np.isfinite(cam).all() and float(np.abs(cam).max()) > 0
    with pytest.raises(UsageError) as caught:
        check_lrp(small_vit())
    assert "choose attnlrp for this vision transformer" in str(caught.value)
