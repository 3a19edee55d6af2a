"""The methods that read a vision transformer's attention (``rollout``, ``chefer``, ``legrad``)
and the attention access under them (``hookviz.anatomy.attention``), against references
written here from the published formulas (the authors' code is not packaged) and torch-cam's
``LeGrad``, on models with random weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from hookviz import InputOptions, explain
from hookviz.anatomy.attention import AttentionMaps, attention_recorded, attention_sites
from hookviz.errors import UsageError
from hookviz.methods import ExtraPasses, MethodContext, get_method
from hookviz.methods.rollout import RolloutOptions, rolled_out

SIDE = 64  # a 4x4 grid of 16-pixel patches


def _timm_vit(depth=3):
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=SIDE, depth=depth, num_classes=10).eval()


def _explained(model, image, cam, target, side=SIDE, **kwargs):
    result = explain(model, image, cam=cam, target=target, inputs=InputOptions(resize=side, crop=side), **kwargs)
    return result.layers[0]


class _Saved:
    """The reference's attention store: each block's probabilities and, after backward,
    their gradients (Chefer et al.'s ``save_attn`` and ``save_attn_gradients``)."""

    def __init__(self):
        self.attention, self.gradients = [], {}

    def keep(self, attention):
        index = len(self.attention)
        self.attention.append(attention)
        attention.register_hook(lambda grad: self.gradients.__setitem__(index, grad))


def _timm_reference_forward(attn, saved: _Saved):
    """timm's Attention written out by hand, softmax(q k^T * scale) kept."""

    def forward(x, attn_mask=None, is_causal=False):
        count, tokens, width = x.shape
        qkv = attn.qkv(x).reshape(count, tokens, 3, attn.num_heads, width // attn.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        weights = ((attn.q_norm(q) * attn.scale) @ attn.k_norm(k).transpose(-2, -1)).softmax(dim=-1)
        saved.keep(weights)
        return attn.proj(attn.norm((weights @ v).transpose(1, 2).reshape(count, tokens, width)))

    return forward


def _reference_rollout(attentions, start=0):
    """Chefer et al.'s ``compute_rollout_attention`` over head-averaged attention."""
    count, tokens = attentions[0].shape[0], attentions[0].shape[-1]
    eye = torch.eye(tokens).expand(count, tokens, tokens)
    matrices = [a.mean(dim=1) + eye for a in attentions]
    matrices = [m / m.sum(dim=-1, keepdim=True) for m in matrices]
    joint = matrices[start]
    for m in matrices[start + 1 :]:
        joint = m.bmm(joint)
    return joint


def _reference_chefer(attentions, gradients):
    """Chefer et al.'s ``generate_relevance``: R = I; R += mean_h (grad * cam)+ @ R."""
    tokens = attentions[0].shape[-1]
    R = torch.eye(tokens).expand(attentions[0].shape[0], tokens, tokens).clone()
    for cam, grad in zip(attentions, gradients):
        R = R + (grad * cam).clamp(min=0).mean(dim=1).bmm(R)
    return R


def _correlation(a, b) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def test_rollout_and_chefer_equal_the_published_formulas_on_timms_vit_tiny(monkeypatch):
    model = _timm_vit()
    image = torch.rand(3, SIDE, SIDE, generator=torch.Generator().manual_seed(1))
    fused = [block.attn.fused_attn for block in model.blocks]
    ours = _explained(model, image, "rollout,chefer", target=3)
    assert [block.attn.fused_attn for block in model.blocks] == fused  # switched for the pass only
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())

    saved = _Saved()
    for block in model.blocks:
        monkeypatch.setattr(block.attn, "forward", _timm_reference_forward(block.attn, saved))
    logits = model(image[None].requires_grad_(True))
    logits[0, 3].backward()
    gradients = [saved.gradients[i] for i in range(len(saved.attention))]
    rollout = _reference_rollout([a.detach() for a in saved.attention])[0, 0, 1:].reshape(4, 4)
    chefer = _reference_chefer([a.detach() for a in saved.attention], gradients)[0, 0, 1:].reshape(4, 4)
    assert float(chefer.abs().max()) > 1e-3 and float(rollout.std()) > 0
    assert _correlation(ours.cams["rollout"], rollout) >= 0.999
    assert _correlation(ours.cams["chefer"], chefer) >= 0.999
    np.testing.assert_allclose(ours.cams["rollout"], rollout.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.cams["chefer"], chefer.numpy(), rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard", [0.0, 0.6])
def test_every_rolled_out_row_sums_to_one(fusion, discard):
    model = _timm_vit()
    sites = attention_sites(model, "rollout")
    with torch.no_grad(), attention_recorded(model, sites) as seen:
        model(torch.rand(2, 3, SIDE, SIDE))
    maps = AttentionMaps(tuple(seen.probabilities), None, 1)
    rows = {}

    def tokens(gradients=None):
        return maps

    context = MethodContext(
        torch.zeros(2, 8, 4, 4),
        None,
        model,
        "blocks.2.norm1",
        settings=RolloutOptions(fusion, discard),
        passes=ExtraPasses(attention=tokens),
    )
    found = get_method("rollout").compute(context)
    fused = [getattr(p, {"mean": "mean", "max": "amax", "min": "amin"}[fusion])(dim=1) for p in maps.probabilities]
    if discard:
        fused = [_jacobgil_discarded(a, discard) for a in fused]
    rows["theirs"] = _jacobgil_rollout(fused)
    torch.testing.assert_close(rows["theirs"].sum(dim=-1), torch.ones(2, 17), rtol=0, atol=1e-5)
    torch.testing.assert_close(found, rows["theirs"][:, 0, 1:].reshape(2, 4, 4))


def _jacobgil_rollout(fused):
    """vit-explain's ``rollout``, image by image: ``(A + I) / 2``, each row divided by its own
    sum (not the broadcast of the next test), multiplied onto the result from the left."""
    joint = []
    for image in range(len(fused[0])):
        result = torch.eye(fused[0].shape[-1])
        for attention in fused:
            step = (attention[image] + torch.eye(len(result))) / 2
            result = torch.matmul(step / step.sum(dim=-1).unsqueeze(-1), result)
        joint.append(result)
    return torch.stack(joint)


def _jacobgil_discarded(fused, ratio):
    """vit-explain's discard: the weakest ``ratio`` of each image's fused matrix zeroed, the
    class token's own attention (flat index 0) kept."""
    flat = fused.flatten(1).clone()
    for image in range(len(flat)):
        _, indices = flat[image].topk(int(flat.shape[1] * ratio), largest=False)
        indices = indices[indices != 0]
        flat[image, indices] = 0
    return flat.reshape(fused.shape)


def test_vit_explains_row_normalisation_leaves_rows_that_do_not_sum_to_one():
    """jacobgil's vit-explain divides by ``a.sum(dim=-1)`` without ``keepdim``: each column j
    is divided by row j's sum, so the rolled-out rows drift from 1 once a discard makes the
    rows' sums differ; the rollout here divides each row by its own sum."""
    model = _timm_vit()
    with torch.no_grad(), attention_recorded(model, attention_sites(model, "rollout")) as seen:
        model(torch.rand(1, 3, SIDE, SIDE))
    fused = [_jacobgil_discarded(p.mean(dim=1), 0.9) for p in seen.probabilities]
    result = torch.eye(17)
    for attention in fused:
        a = (attention[0] + torch.eye(17)) / 2
        a = a / a.sum(dim=-1)  # vit-explain's line
        result = a @ result
    assert (result.sum(dim=-1) - 1).abs().max() > 0.05
    ours = rolled_out(fused)
    assert (ours.sum(dim=-1) - 1).abs().max() < 1e-5


def test_rollout_settings_check_themselves_in_one_line():
    with pytest.raises(UsageError, match="head_fusion='median'.*choose mean, max, min"):
        RolloutOptions(head_fusion="median")
    with pytest.raises(UsageError, match="discard_ratio=1.*from 0 up to"):
        RolloutOptions(discard_ratio=1)
    assert get_method("rollout").options is RolloutOptions and get_method("chefer").options is None


def _torchvision_vit():
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=3, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=5)
    nn.init.normal_(model.heads.head.weight)  # torchvision starts its head at zeros: no gradient would reach any block
    return model.eval()


def test_legrad_equals_torch_cams_legrad_with_the_models_own_head():
    from torchcam.methods import LeGrad

    model = _torchvision_vit()
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(2))
    ours = _explained(model, image, "legrad", target=4, side=32)
    assert ours.cams["legrad"].shape == (4, 4)

    def head(tokens):  # the model's own: the last norm, the class token, the head
        return model.heads(model.encoder.ln(tokens)[:, 0])

    with LeGrad(model, list(model.encoder.layers), score_projection=head) as extractor:
        extractor.model(image[None])
        theirs = extractor.compute_cams(4, normalized=False)[0][0]
    assert float(theirs.abs().max()) > 0
    assert _correlation(ours.cams["legrad"], theirs.detach()) >= 0.999
    np.testing.assert_allclose(ours.cams["legrad"], theirs.detach().numpy(), rtol=1e-3, atol=1e-7)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


@pytest.mark.slow  # open_clip's ViT-B-32 with random weights: ~15 s on 2 shared cores
def test_rollout_and_chefer_equal_the_published_formulas_on_open_clips_vit_b_32(monkeypatch):
    from hookviz import load_model

    prompts = ["a photo of a cat", "a photo of a dog"]
    loaded = load_model("open_clip:ViT-B-32", weights="none", seed=0, prompts=prompts)
    image = torch.rand(3, 224, 224, generator=torch.Generator().manual_seed(3))
    result = explain(loaded, image, cam="rollout,chefer", target=1)
    ours = result.layers[0]
    assert ours.name.startswith("visual.transformer.resblocks.11")

    saved = _Saved()
    blocks = loaded.module.visual.transformer.resblocks
    for block in blocks:
        monkeypatch.setattr(block, "attention", _clip_reference_attention(block, saved))
    batch = result.image.tensor[None].clone().requires_grad_(True)  # the photo as hookviz prepared it
    logits = loaded.module(batch)
    logits[0, 1].backward()
    gradients = [saved.gradients[i] for i in range(len(saved.attention))]
    rollout = _reference_rollout([a.detach() for a in saved.attention])[0, 0, 1:].reshape(7, 7)
    chefer = _reference_chefer([a.detach() for a in saved.attention], gradients)[0, 0, 1:].reshape(7, 7)
    assert _correlation(ours.cams["rollout"], rollout) >= 0.999
    assert _correlation(ours.cams["chefer"], chefer) >= 0.999


def _clip_reference_attention(block, saved: _Saved):
    """open_clip's ResidualAttentionBlock.attention written out by hand from its
    ``nn.MultiheadAttention``'s projections: softmax(q k^T / sqrt(d)) kept."""
    attn = block.attn

    def attention(q_x, k_x=None, v_x=None, attn_mask=None):
        count, tokens, width = q_x.shape
        heads = attn.num_heads
        q, k, v = nn.functional.linear(q_x, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.reshape(count, tokens, heads, width // heads).transpose(1, 2) for t in (q, k, v))
        weights = (q @ k.transpose(-2, -1) / (width // heads) ** 0.5).softmax(dim=-1)
        saved.keep(weights)
        return attn.out_proj((weights @ v).transpose(1, 2).reshape(count, tokens, width))

    return attention


def test_rollout_on_a_cnn_is_refused_in_one_line_naming_it(tmp_path):
    from torchvision.models import resnet18

    from .cli_helpers import hookviz_run
    from .conftest import SAMPLES

    with pytest.raises(UsageError, match=r"cam='rollout'.*ResNet has no attention blocks.*choose a CAM method such as gradcam"):
        explain(resnet18(weights=None).eval(), torch.rand(3, 32, 32), cam="rollout")
    result = hookviz_run(SAMPLES / "cat.png", "--cam", "gradcam,legrad", out=tmp_path / "out")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert result.stderr.startswith("hookviz: error: --cam legrad: ") and "has no attention blocks" in result.stderr


class _FusedAttention(nn.Module):
    """Attention through ``scaled_dot_product_attention`` with no switch to turn it off."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return nn.functional.scaled_dot_product_attention(q, k, v)


def test_attention_that_cannot_be_reached_is_refused_naming_the_module():
    model = nn.Sequential(nn.Linear(8, 8), _FusedAttention())
    with pytest.raises(UsageError, match=r"cam='chefer'.*Sequential computes attention in _FusedAttention \(1\).*cannot reach"):
        attention_sites(model, "chefer")


def test_the_switches_and_hooks_are_undone_when_the_pass_fails():
    model = _timm_vit(depth=2)
    sites = attention_sites(model, "legrad")
    assert [s.path for s in sites] == ["blocks.0.attn", "blocks.1.attn"] and sites[0].block == "blocks.0"
    fused = [block.attn.fused_attn for block in model.blocks]
    with pytest.raises(RuntimeError, match="the caller's own failure"):
        with attention_recorded(model, sites, layers=True):
            assert not any(block.attn.fused_attn for block in model.blocks)
            raise RuntimeError("the caller's own failure")
    assert [block.attn.fused_attn for block in model.blocks] == fused
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_multihead_attention_returns_what_its_caller_asked_for_and_the_same_output():
    model = _torchvision_vit()
    block = model.encoder.layers[0].self_attention
    x = torch.rand(2, 17, 16)
    with torch.no_grad():
        plain, none = block(x, x, x, need_weights=False)
        averaged = block(x, x, x)[1]
        with attention_recorded(model, attention_sites(model, "rollout")) as seen:
            out, weights = block(x, x, x, need_weights=False)
            _, averaged_again = block(x, x, x)
    assert none is None and weights is None
    torch.testing.assert_close(out, plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(averaged_again, averaged)
    assert seen.probabilities[0].shape == (2, 2, 17, 17)


def test_attention_methods_join_faithfulness_and_sanity():
    model = _timm_vit(depth=2)
    result = explain(
        model,
        torch.rand(3, SIDE, SIDE),
        cam="chefer,rollout,legrad",
        target=1,
        inputs=InputOptions(resize=SIDE, crop=SIDE),
        faithfulness=True,
        sanity=True,
    )
    layer = result.layers[0]
    assert set(layer.cams) == {"chefer", "rollout", "legrad"}
    assert layer.trust is not None and layer.trust.sanity is not None and layer.trust.deletion is not None
    assert set(layer.trust.methods) >= {"rollout", "legrad"}


def test_a_transformers_vit_is_read_with_eager_attention_for_the_pass_and_its_setting_restored():
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32, patch_size=8, num_hidden_layers=2, hidden_size=16, num_attention_heads=2,
        intermediate_size=32, num_labels=5, attn_implementation="sdpa",
    )  # fmt: skip
    model = ViTForImageClassification(config).eval()
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(4))
    result = explain(model, image, cam="rollout,chefer", target=2, inputs=InputOptions(resize=32, crop=32))
    ours = result.layers[0]
    assert model.config._attn_implementation == "sdpa"
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())

    model.config._attn_implementation = "eager"  # the reference: transformers' own output_attentions
    try:
        output = model(pixel_values=result.image.tensor[None].clone().requires_grad_(True), output_attentions=True)
        gradients = torch.autograd.grad(output.logits[0, 2], output.attentions)
    finally:
        model.config._attn_implementation = "sdpa"
    attentions = [a.detach() for a in output.attentions]
    rollout = _reference_rollout(attentions)[0, 0, 1:].reshape(4, 4)
    chefer = _reference_chefer(attentions, gradients)[0, 0, 1:].reshape(4, 4)
    assert float(chefer.abs().max()) > 1e-5 and float(rollout.std()) > 0  # transformers' init: small weights
    assert _correlation(ours.cams["chefer"], chefer) >= 0.999
    np.testing.assert_allclose(ours.cams["rollout"], rollout.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.cams["chefer"], chefer.numpy(), rtol=1e-3, atol=1e-7)


def test_a_vit_without_a_class_token_gets_legrad_and_a_one_line_refusal_of_the_class_token_methods():
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_little_patch16_reg4_gap_256", pretrained=False, img_size=SIDE, depth=2).eval()
    image = torch.rand(3, SIDE, SIDE)
    with pytest.raises(UsageError, match=r"cam='rollout'.*no class token, whose row it reads; choose legrad"):
        _explained(model, image, "rollout", target=1)
    found = _explained(model, image, "legrad", target=1).cams["legrad"]  # its 4 register tokens left out
    assert found.shape == (4, 4) and np.isfinite(found).all() and found.max() > 0


def test_legrad_on_a_transformers_vit_equals_each_blocks_own_score_differentiated_by_hand():
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32, patch_size=8, num_hidden_layers=3, hidden_size=16, num_attention_heads=2,
        intermediate_size=32, num_labels=5, attn_implementation="eager",
    )  # fmt: skip
    model = ViTForImageClassification(config).eval()
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(5))
    result = explain(model, image, cam="legrad", target=2, inputs=InputOptions(resize=32, crop=32))
    batch = result.image.tensor[None].clone().requires_grad_(True)
    output = model(pixel_values=batch, output_attentions=True, output_hidden_states=True)
    per_block = []
    for block, attention in enumerate(output.attentions):  # s_l: block l's tokens through the model's own head
        score = model.classifier(model.vit.layernorm(output.hidden_states[block + 1])[:, 0])[0, 2]
        (gradient,) = torch.autograd.grad(score, attention, retain_graph=True)
        per_block.append(gradient.clamp(min=0).mean(dim=(1, 2))[0, 1:])
    reference = torch.stack(per_block).mean(dim=0).reshape(4, 4)
    assert float(reference.max()) > 0
    np.testing.assert_allclose(result.layers[0].cams["legrad"], reference.numpy(), rtol=1e-3, atol=1e-9)


def test_a_swins_windowed_attention_is_refused_in_one_line():
    import timm

    torch.manual_seed(0)
    model = timm.create_model(
        "swin_tiny_patch4_window7_224", pretrained=False, img_size=SIDE, window_size=4, depths=(1, 1, 1, 1),
        embed_dim=32, num_heads=(1, 2, 4, 8), num_classes=5,
    ).eval()  # fmt: skip
    with pytest.raises(UsageError, match=r"layers\.0\.blocks\.0\.attn attends as 16x1x16x16 for 1 image\(s\).*windows"):
        _explained(model, torch.rand(3, SIDE, SIDE), "chefer", target=1)


def test_a_transformers_clips_image_tower_is_read_through_a_prompt(tmp_path, hub_cache):
    from hookviz import load_model

    from .test_hf_clip import PROMPTS, _folder

    folder, model, _ = _folder(tmp_path, "clip")
    loaded = load_model(f"hf:{folder}", prompts=PROMPTS)
    result = explain(loaded, torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(6)), cam="chefer,legrad", target=1)
    layer = result.layers[0]
    assert layer.name.startswith("vision_model.") and set(layer.cams) == {"chefer", "legrad"}

    tower = loaded.module.vision_model
    kernel = tower.config._attn_implementation
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in loaded.module.modules())
    batch = result.image.tensor[None].clone().requires_grad_(True)
    tower.config._attn_implementation = "eager"  # the reference: each CLIPAttention's own weights
    try:
        attentions = []
        hooks = [
            layer_.self_attn.register_forward_hook(lambda _m, _a, out: attentions.append(out[1]))
            for layer_ in tower.encoder.layers
        ]
        logits = loaded.module(batch)
        for hook in hooks:
            hook.remove()
        gradients = torch.autograd.grad(logits[0, 1], attentions)
    finally:
        tower.config._attn_implementation = kernel
    chefer = _reference_chefer([a.detach() for a in attentions], gradients)[0, 0, 1:].reshape(4, 4)
    assert float(chefer.abs().max()) > 0
    assert _correlation(layer.cams["chefer"], chefer) >= 0.999


def test_rollouts_settings_reach_it_from_explain_and_are_kept_in_the_report():
    model, photo = _timm_vit(depth=2), torch.rand(3, SIDE, SIDE)
    sized = InputOptions(resize=SIDE, crop=SIDE)
    mean = explain(model, photo, cam="rollout", inputs=sized)
    fused = explain(model, photo, cam="rollout", inputs=sized, head_fusion="max", discard_ratio=0.5)
    assert not np.allclose(mean.layers[0].cams["rollout"], fused.layers[0].cams["rollout"])
    assert fused.asked["settings"]["rollout"] == {"head_fusion": "max", "discard_ratio": 0.5}
    with pytest.raises(UsageError) as caught:
        explain(model, photo, cam="gradcam", inputs=sized, head_fusion="max")
    assert "\n" not in str(caught.value) and "only rollout takes it" in str(caught.value)
