"""Attention blocks as each model source declares them (``hookviz.anatomy.attention_blocks``),
read before the type detection, and open_clip's towers that detection left untested: its own
``Attention`` (recomputed from q and k), scaled cosine attention and an attentional pooler
(refused in one line), and blocks that run sequence first (``batch_first=False``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

from hookviz import InputOptions, explain, load_model
from hookviz.anatomy.attention import DeclaredAttention, attention_recorded, attention_sites, detected_attention
from hookviz.anatomy.attention_blocks import open_clip_attention, torchvision_attention
from hookviz.errors import UsageError
from hookviz.inputs.images import Preprocessing
from hookviz.models.sources.base import LoadedModel

SIDE = 32  # a 4x4 grid of 8-pixel patches


class _Tower(nn.Module):
    """An open_clip image tower as a classifier over its ``output_dim`` features."""

    def __init__(self, visual):
        super().__init__()
        self.visual = visual

    def forward(self, image):
        return self.visual(image)


def _open_clip_tower(**kwargs) -> _Tower:
    from open_clip.transformer import VisionTransformer

    torch.manual_seed(0)
    visual = VisionTransformer(image_size=SIDE, patch_size=8, width=32, layers=2, heads=4, mlp_ratio=2, output_dim=5, **kwargs)
    return _Tower(visual).eval()


def _maps(model, cam, declared=None, target=1):
    loaded = LoadedModel("tower", model, "seeded", None, Preprocessing(), declared_attention=declared)
    image = torch.rand(3, SIDE, SIDE, generator=torch.Generator().manual_seed(3))
    result = explain(loaded, image, cam=cam, target=target, inputs=InputOptions(resize=SIDE, crop=SIDE))
    return result.layers[0].cams


def _reference_probabilities(attn, x):
    """open_clip's ``Attention`` (qk_norm, scale_heads) probabilities written out by hand."""
    heads, width = attn.num_heads, x.shape[-1]
    q, k, _ = (x @ attn.in_proj_weight.T + attn.in_proj_bias).split(width, dim=-1)
    q, k = (t.unflatten(-1, (heads, width // heads)).permute(0, 2, 1, 3) for t in (q, k))
    logits = torch.einsum("nhqd,nhkd->nhqk", attn.ln_q(q), attn.ln_k(k)) / (width // heads) ** 0.5
    return logits.softmax(dim=-1)


def test_open_clips_own_attention_is_recomputed_from_q_and_k_with_the_same_output():
    model = _open_clip_tower(qk_norm=True, scale_heads=True)
    declared = open_clip_attention(model)
    assert declared.refused is None and [s.kind for s in declared.sites] == ["open_clip", "open_clip"]
    assert [s.path for s in declared.sites] == [f"visual.transformer.resblocks.{i}.attn" for i in range(2)]
    assert detected_attention(model).sites == declared.sites  # a factory's model reads the same blocks
    attn = model.visual.transformer.resblocks[0].attn
    with torch.no_grad():
        attn.head_scale.mul_(torch.linspace(0.5, 2.0, 4).view(4, 1, 1))  # a scale that shows when it is dropped
    x = torch.randn(2, 17, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        fused = attn(x)
        with attention_recorded(model, attention_sites(model, "rollout", declared)) as seen:
            replayed = attn(x)
    torch.testing.assert_close(replayed, fused, rtol=1e-5, atol=1e-5)
    causal = torch.ones(17, 17, dtype=torch.bool).triu(1)  # a text tower's mask: True is masked
    additive = torch.randn(2 * 4, 17, 17, generator=torch.Generator().manual_seed(2))  # (N * heads, L, L)
    for mask in (causal, additive):
        with torch.no_grad():
            fused_masked = attn(x, attn_mask=mask)
            with attention_recorded(model, declared.sites):
                torch.testing.assert_close(attn(x, attn_mask=mask), fused_masked, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(seen.probabilities[0], _reference_probabilities(attn, x), rtol=1e-5, atol=1e-6)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    cams = _maps(model, "rollout,chefer,legrad", declared)
    assert all(cams[name].shape == (4, 4) and np.isfinite(cams[name]).all() for name in ("rollout", "chefer", "legrad"))
    assert float(np.abs(cams["chefer"]).max()) > 0


def test_scaled_cosine_attention_and_an_attentional_pooler_are_refused_in_one_line_naming_the_module():
    model = _open_clip_tower(scaled_cosine_attn=True)
    with pytest.raises(UsageError, match=r"cam='rollout'.*Attention \(visual\.transformer\.resblocks\.0\.attn\).*scaled cosine"):
        attention_sites(model, "rollout", open_clip_attention(model))
    with pytest.raises(UsageError, match=r"cam='chefer'.*cannot reach") as refused:
        _maps(model, "chefer", open_clip_attention(model))
    assert len(str(refused.value).splitlines()) == 1
    pooled = _open_clip_tower(attentional_pool=True, attn_pooler_queries=4, attn_pooler_heads=1)
    with pytest.raises(UsageError, match=r"AttentionalPooler \(visual\.attn_pool\).*attentional pooler"):
        attention_sites(pooled, "legrad", open_clip_attention(pooled))


def _sequence_first(model: _Tower) -> _Tower:
    """The same tower with its blocks built ``batch_first=False`` (as open_clip's towers were
    before 2.24, and as a caller may build them), the same weights."""
    from open_clip.transformer import Transformer

    other = copy.deepcopy(model)
    blocks = other.visual.transformer
    first = Transformer(32, 2, 4, mlp_ratio=2, batch_first=False)
    first.load_state_dict(blocks.state_dict())
    other.visual.transformer = first.eval()
    return other


@pytest.mark.parametrize("cam", ["rollout", "chefer", "legrad"])
def test_open_clip_blocks_run_sequence_first_give_the_batch_first_maps(cam):
    model = _open_clip_tower()
    other = _sequence_first(model)
    assert not other.visual.transformer.resblocks[0].attn.batch_first
    image = torch.rand(1, 3, SIDE, SIDE)
    with torch.no_grad():
        torch.testing.assert_close(other(image), model(image), rtol=1e-5, atol=1e-5)
    declared = open_clip_attention(other)
    assert declared.refused is None and {s.kind for s in declared.sites} == {"multihead"}
    ours = _maps(other, cam, declared)[cam]
    assert float(np.abs(ours).max()) > 0
    np.testing.assert_allclose(ours, _maps(model, cam, open_clip_attention(model))[cam], rtol=1e-4, atol=1e-7)


def test_the_declaration_comes_before_the_detection():
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=SIDE, patch_size=8, depth=3, num_classes=4)
    model = model.eval()
    found = detected_attention(model)
    two = DeclaredAttention(found.sites[:2], None, "the first two blocks only")
    truncated = copy.deepcopy(model)
    truncated.blocks = truncated.blocks[:2]  # the rollout reads only the blocks' attention, not the head
    np.testing.assert_allclose(_maps(model, "rollout", two)["rollout"], _maps(truncated, "rollout")["rollout"], rtol=1e-5)
    refused = DeclaredAttention(
        (), "computes attention in Mixer (blocks.1.attn), whose probabilities hookviz cannot reach (said)"
    )
    with pytest.raises(UsageError, match=r"cam='legrad'.*VisionTransformer computes attention in Mixer \(blocks\.1\.attn\)"):
        _maps(model, "legrad", refused)


def test_each_source_declares_its_models_attention():
    loaded = load_model("timm:vit_tiny_patch16_224", weights="none", seed=0)
    declared = loaded.declared_attention
    assert declared is not None and declared.origin.startswith("timm")
    assert [s.path for s in declared.sites] == [f"blocks.{i}.attn" for i in range(12)] and declared.refused is None
    resnet = load_model("resnet18", weights="none", seed=0)
    cnn = resnet.declared_attention
    assert cnn is not None and cnn.sites == () and cnn.refused is None
    with pytest.raises(UsageError, match=r"cam='rollout'.*ResNet has no attention blocks"):
        attention_sites(resnet.module, "rollout", cnn)
    from torchvision.models import VisionTransformer

    vit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)
    paths = [s.path for s in torchvision_attention(vit).sites]
    assert paths == [f"encoder.layers.encoder_layer_{i}.self_attention" for i in range(2)]
    assert paths == [s.path for s in detected_attention(vit).sites]


def test_a_transformers_classifier_loaded_from_its_folder_declares_its_vision_towers_attention(tmp_path, hub_cache):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=SIDE, patch_size=8, num_hidden_layers=2, hidden_size=16, num_attention_heads=2,
        intermediate_size=32, num_labels=5, attn_implementation="sdpa",
    )  # fmt: skip
    ViTForImageClassification(config).eval().save_pretrained(tmp_path / "vit")
    loaded = load_model(f"hf:{tmp_path / 'vit'}", weights="DEFAULT")
    declared = loaded.declared_attention
    assert declared is not None and declared.origin.startswith("transformers") and declared.refused is None
    assert [(s.path, s.kind) for s in declared.sites] == [(f"vit.layers.{i}.attention", "transformers") for i in range(2)]
    image = torch.rand(3, SIDE, SIDE, generator=torch.Generator().manual_seed(3))
    size = InputOptions(resize=SIDE, crop=SIDE)
    ours = explain(loaded, image, cam="chefer", target=1, inputs=size).layers[0].cams["chefer"]
    detected = explain(loaded.module, image, cam="chefer", target=1, inputs=size).layers[0].cams["chefer"]
    assert float(np.abs(ours).max()) > 0 and loaded.module.config._attn_implementation == "sdpa"
    np.testing.assert_allclose(ours, detected, rtol=1e-5, atol=1e-9)
