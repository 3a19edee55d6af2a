"""timm's models as ``timm:NAME``: random weights (``pretrained=False``), weights files and a
Hugging Face cache the tests fill themselves; nothing is downloaded."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hookviz import Explainer, InputOptions, LoadedModel, Preprocessing, TargetOptions, explain
from hookviz.errors import UnknownModelError, WeightsError
from hookviz.models.loading import list_models, load_model

from .cli_helpers import hookviz_cli
from .conftest import SAMPLES, assert_same_cam, hand_gradcam, hub_snapshot

timm = pytest.importorskip("timm")

CAT = SAMPLES / "cat.png"


def invoke(*args):
    return hookviz_cli(*args, catch_exceptions=False)


# ----------------------------------------------------------------------------- loading


def test_none_is_timms_random_init_seeded_without_moving_the_callers_stream():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = load_model("timm:resnet18", "none", seed=1)
    assert torch.equal(torch.rand(3), expected)
    b = load_model("timm:resnet18", "none", seed=1)
    c = load_model("timm:resnet18", "none", seed=2)
    assert torch.equal(a.module.fc.weight, b.module.fc.weight) and not torch.equal(a.module.fc.weight, c.module.fc.weight)
    assert a.source == "timm" and a.weights == "none (random init, seed 1)" and not a.module.training


def test_imagenet_heads_get_torchvisions_class_names(tmp_path):
    loaded = load_model("timm:resnet18", "none")
    assert len(loaded.categories) == 1000 and loaded.categories[281] == "tabby"
    result = invoke(
        "run",
        "--model",
        "timm:resnet18",
        "--weights",
        "none",
        CAT,
        "--crop",
        64,
        "--resize",
        64,
        "--target",
        "tabby",
        "--pictures",
        "none",
        "--out",
        tmp_path,
        "--device",
        "cpu",
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "cat" / "report.json").read_text())
    assert report["target"] == {**report["target"], "index": 281, "name": "tabby"}
    assert all(score["name"] for score in report["top5"])


def test_a_weights_file_loads_state_dicts_and_safetensors(tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(3)
    state = {
        k: torch.randn_like(v) if v.is_floating_point() else v for k, v in timm.create_model("resnet18").state_dict().items()
    }
    torch.save(state, tmp_path / "model.pth")
    save_file(state, str(tmp_path / "model.safetensors"))
    for path in (tmp_path / "model.pth", tmp_path / "model.safetensors"):
        assert torch.equal(load_model("timm:resnet18", str(path)).module.fc.weight, state["fc.weight"])


def test_unknown_names_are_refused_with_suggestions():
    with pytest.raises(UnknownModelError, match=r"timm has no such model \(did you mean 'timm:convnext_tiny'"):
        load_model("timm:convnxt_tiny", "none")
    with pytest.raises(UnknownModelError, match="Invalid pretrained tag"):
        load_model("timm:convnext_tiny.no_such_tag", "DEFAULT")
    with pytest.raises(WeightsError, match=r"a timm pretrained tag goes after a dot in the name: model='timm:resnet18.a1_in1k'"):
        load_model("timm:resnet18", "a1_in1k")


def test_without_timm_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(UnknownModelError) as error:
        load_model("timm:resnet18", "none")
    assert str(error.value) == "model='timm:resnet18' needs timm: pip install 'hookviz[timm]'"


def test_the_factory_source_never_claims_a_timm_name():
    from hookviz.models.sources.factory import FactorySource

    assert not FactorySource().claims("timm:resnet18")
    assert FactorySource().claims("tests.conftest:tiny_net")


# ----------------------------------------------------------------------------- DEFAULT weights

VIT = "vit_tiny_patch16_224"
VIT_REPO = "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"  # what timm names as its DEFAULT


def test_default_weights_come_from_a_hub_cache_the_test_filled(hub_cache):
    from safetensors.torch import save_file

    assert timm.models.get_pretrained_cfg(VIT).hf_hub_id == VIT_REPO
    torch.manual_seed(4)
    state = {k: torch.randn_like(v) for k, v in timm.create_model(VIT).state_dict().items()}
    save_file(state, str(hub_snapshot(hub_cache, VIT_REPO) / "model.safetensors"))
    loaded = load_model(f"timm:{VIT}")
    assert torch.equal(loaded.module.head.weight, state["head.weight"])
    assert loaded.weights == f"DEFAULT (augreg_in21k_ft_in1k: {VIT_REPO}, Hugging Face cache)"


def test_default_weights_offline_and_not_cached_fail_in_one_line_naming_the_cache(hub_cache):
    with pytest.raises(WeightsError) as error:
        load_model(f"timm:{VIT}")
    message = str(error.value)
    assert "\n" not in message and str(hub_cache) in message and "HF_HUB_OFFLINE is set" in message
    assert message.startswith("weights='DEFAULT': timm/vit_tiny") and "weights='PATH'" in message
    result = invoke("run", "--model", f"timm:{VIT}", CAT, "--out", hub_cache.parent / "out")
    assert result.exit_code == 2 and result.stderr.startswith("hookviz: error: --weights DEFAULT: timm/vit_tiny")
    assert "--weights PATH" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_pickled_weights_file_in_the_cache_is_refused_and_never_run(hub_cache, tmp_path):
    from .test_checkpoints import _Exploit

    marker = tmp_path / "pwned"
    _Exploit.marker = str(marker)
    torch.save({"head.weight": _Exploit()}, hub_snapshot(hub_cache, VIT_REPO) / "pytorch_model.bin")
    with pytest.raises(WeightsError, match="refused"):
        load_model(f"timm:{VIT}")
    assert not marker.exists()


# ----------------------------------------------------------------------------- preprocessing


# A centre crop of 0.9 and of 0.95 (bicubic), and a whole photo squashed to 384x384.
@pytest.mark.parametrize("name", [VIT, "resnet50.a1_in1k", "convnext_tiny.in12k_ft_in1k_384"])
def test_preprocessing_equals_timms_own_eval_transform(name):
    from PIL import Image

    from hookviz.inputs.images import load_image, prepare
    from hookviz.models.sources.timm_models import timm_preprocessing

    with torch.device("meta"):  # the transform needs the model's config only, not its weights
        model = timm.create_model(name)
    config = timm.data.resolve_model_data_config(model)
    theirs = timm.data.create_transform(**config)(Image.open(CAT).convert("RGB"))
    processing, notes = timm_preprocessing(model)
    ours = prepare(load_image(CAT), processing).tensor
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    assert processing.interpolation == config["interpolation"] and notes == ()
    assert processing.crop == (config["crop_mode"] == "center")


# ----------------------------------------------------------------------------- layers and layouts


TRANSFORMERS = [
    # name, timm's arguments for a tiny copy, its default layer, the layout and CAM grid there
    ("vit_tiny_patch16_224", {"img_size": 64, "depth": 2}, "blocks.1.norm1", ("tokens", 1, (4, 4)), (4, 4)),
    ("deit_tiny_distilled_patch16_224", {"img_size": 64, "depth": 2}, "blocks.1.norm1", ("tokens", 2, (4, 4)), (4, 4)),
    ("deit3_small_patch16_224", {"img_size": 64, "depth": 2}, "blocks.1.norm1", ("tokens", 1, (4, 4)), (4, 4)),
    ("vit_little_patch16_reg4_gap_256", {"img_size": 64, "depth": 2}, "blocks.1.norm1", ("tokens", 4, (4, 4)), (4, 4)),
    ("eva02_tiny_patch14_224", {"img_size": 56, "depth": 2, "num_classes": 10}, "blocks.1.norm1", ("tokens", 1, (4, 4)), (4, 4)),
    (
        "beit_base_patch16_224",
        {"img_size": 64, "depth": 2, "embed_dim": 64, "num_heads": 2},
        "blocks.1.norm1",
        ("tokens", 1, (4, 4)),
        (4, 4),
    ),
    (
        "swin_tiny_patch4_window7_224",
        {"img_size": 64, "window_size": 4, "depths": (1, 1, 1, 1), "embed_dim": 32, "num_heads": (1, 2, 4, 8)},
        "layers.3.blocks.0.norm1",
        ("nhwc", 0, None),
        (2, 2),
    ),
]


@pytest.mark.parametrize("name, kwargs, path, layout, grid", TRANSFORMERS, ids=[t[0] for t in TRANSFORMERS])
def test_a_transformers_default_layer_is_its_last_blocks_first_norm_on_the_declared_grid(name, kwargs, path, layout, grid):
    torch.manual_seed(0)
    model = timm.create_model(name, **kwargs).eval()
    side = kwargs["img_size"]
    result = explain(model, torch.randn(3, side, side), target=3, inputs=InputOptions(resize=side, crop=side))
    layer = result.layers[0]
    assert layer.name == path
    assert result.layer_choice.startswith(f"{path} (LayerNorm), the first norm of the last transformer block")
    assert (layer.layout.kind, layer.layout.prefix, layer.layout.grid) == layout and layer.layout.declared
    assert layer.cam.shape == grid
    assert np.isfinite(layer.cam).all() and np.isfinite(layer.output).all()
    if layout[1]:  # a class token: the reason says why later layers are empty
        assert "class token" in result.layer_choice


def test_hookviz_layers_lists_a_timm_model_at_the_size_it_takes():
    result = invoke("layers", "--model", "timm:vit_little_patch16_reg4_gap_256", "--filter", "blocks.0.norm1")
    assert result.exit_code == 0, result.output
    assert "1x260x320" in result.stdout  # 4 registers + 16x16 patches at its own 256 pixels


def test_models_search_lists_timm_names_grouped_by_source(monkeypatch):
    result = invoke("models", "--search", "VIT_LITTLE reg4")
    lines = result.stdout.splitlines()
    assert result.exit_code == 0
    assert [line.split(":")[0] for line in lines if line.startswith("#")] == [
        "# built-in",
        "# torchvision classification",
        "# timm",
        "# hf",
        "# open_clip",
        "# factory",
        "# torchvision-video",  # classifiers of clips, registered after the photo sources
        "# torchvision segmentation",
        "# torchvision detection",
        "# ultralytics",  # by task, then by source
    ]
    assert any(line.startswith("timm:vit_little_patch16_reg4_gap_256  (256x256, DEFAULT ") for line in lines)
    assert not any(line == "resnet50" for line in lines)
    assert ("timm", "timm:resnet18", "224x224, DEFAULT a1_in1k") in list_models(filter="timm:resnet18")
    monkeypatch.setattr("hookviz.models.sources.timm_models._installed", lambda: False)
    result = invoke("models", "--search", "timm")
    assert "# timm: timm's models: --model timm:NAME (timm is not installed: pip install 'hookviz[timm]')" in result.stdout
    assert not any(line.startswith("timm:") for line in result.stdout.splitlines())


# ----------------------------------------------------------------------------- against pytorch-grad-cam


def _pgc_scaled(cam: np.ndarray, side: int) -> np.ndarray:
    """pytorch-grad-cam's post-processing: min-max per image, then bilinear resize to the input."""
    cam = cam - cam.min(axis=(1, 2), keepdims=True)
    cam = cam / (1e-7 + cam.max(axis=(1, 2), keepdims=True))
    return F.interpolate(torch.from_numpy(cam)[:, None].float(), size=(side, side), mode="bilinear")[:, 0].numpy()


def _vit_reshape(tensor, height=14, width=14):
    """pytorch-grad-cam's documented reshape_transform for ViT and DeiT (tutorials/vit_example.py)."""
    result = tensor[:, 1:, :].reshape(tensor.size(0), height, width, tensor.size(2))
    return result.transpose(2, 3).transpose(1, 2)


def _swin_reshape(tensor, height=7, width=7):
    """pytorch-grad-cam's documented reshape_transform for Swin (tutorials/swinT_example.py). It was
    written for timm's (B, 49, C) blocks, reading C as ``size(2)``; timm's Swin now works
    channels-last, (B, 7, 7, C), so C is read as ``size(-1)``, the same number for either."""
    result = tensor.reshape(tensor.size(0), height, width, tensor.size(-1))
    return result.transpose(2, 3).transpose(1, 2)


@pytest.mark.parametrize(
    "name, layer, reshape, grid",
    [
        ("vit_tiny_patch16_224", "blocks.11.norm1", _vit_reshape, (14, 14)),
        ("swin_tiny_patch4_window7_224", "layers.3.blocks.1.norm1", _swin_reshape, (7, 7)),
    ],
    ids=["vit", "swin"],
)
def test_raw_cams_equal_pytorch_grad_cams_with_its_reshape_transform(name, layer, reshape, grid):
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    torch.manual_seed(0)
    model = timm.create_model(name).eval()
    torch.manual_seed(1)
    batch = torch.randn(2, 3, 224, 224)
    target = 7
    loaded = LoadedModel(name, model, "seeded", None, Preprocessing())
    explainer = Explainer.create(loaded, target=TargetOptions(target=str(target)))  # the default layer, chosen by hookviz
    assert explainer.layers[0].path == layer
    results = explainer.explain_batch([explainer.prepare(image) for image in batch])
    ours = np.stack([r.layers[0].cam for r in results])
    assert ours.shape == (2, *grid) and ours.max() > 0
    module = model.get_submodule(layer)
    with GradCAM(model=model, target_layers=[module], reshape_transform=reshape) as cam:
        theirs = cam(input_tensor=batch, targets=[ClassifierOutputTarget(target)] * len(batch))
    for mine, reference in zip(_pgc_scaled(ours, 224), theirs):
        correlation = np.corrcoef(mine.ravel(), reference.ravel())[0, 1]
        assert correlation >= 0.999, correlation


@pytest.mark.slow
def test_convnext_at_384_pixels_is_read_channels_last_where_its_height_equals_its_channels():
    torch.manual_seed(0)
    model = timm.create_model("convnext_tiny").eval()
    image = torch.randn(3, 384, 384, generator=torch.Generator().manual_seed(1))
    layer = "stages.0.blocks.0.norm"
    result = explain(model, image, layers=[layer], target=3, inputs=InputOptions(resize=384, crop=384))
    assert result.layers[0].output.shape == (1, 96, 96, 96)  # timm's LayerNorm, channels-last
    assert (result.layers[0].layout.kind, result.layers[0].layout.basis) == ("nhwc", "data flow")
    assert_same_cam(result.layers[0].cam, hand_gradcam(model, layer, image, 3, channels_last=True))


# ----------------------------------------------------------------------------- what cannot be explained


@pytest.mark.parametrize(
    "args, line",
    [
        # The default tag is a masked-image-modelling checkpoint: features, no classes.
        (
            ["--model", "timm:eva02_tiny_patch14_224"],
            "--model timm:eva02_tiny_patch14_224: its output is an embedding, not class logits; explain its similarity "
            "to a reference photo with --target-image REF",
        ),
        (
            ["--model", "timm:vit_tiny_patch16_224", "--crop", "64", "--resize", "64"],
            "--crop 64: timm:vit_tiny_patch16_224 takes 224x224 inputs, not 64x64; pass --crop 224 or leave it out",
        ),
        (
            ["--model", "timm:inception_v3", "--crop", "64", "--resize", "64"],
            "the model failed a forward pass on a 1x3x64x64 input (RuntimeError: Calculated padded input size per "
            "channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't be greater than actual input size); if it "
            "needs another input size, pass --crop",
        ),
    ],
    ids=["no-head", "fixed-size", "too-small"],
)
def test_what_cannot_be_explained_is_said_in_one_line(args, line, tmp_path):
    result = invoke("run", *args, "--weights", "none", CAT, "--out", tmp_path / "out", "--device", "cpu")
    assert result.exit_code == 2
    assert result.stderr == f"hookviz: error: {line}\n"
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- the sweep

# name (a timm name, a tag where the default one has no head), the --crop it runs at (None:
# the size it insists on), the CAM grid expected there, and for transformers the layer and
# layout hookviz must choose.
SWEEP = [
    ("resnet18", 64, (2, 2), None),
    ("efficientnet_b0", 64, (2, 2), None),
    ("convnext_atto", 64, (2, 2), None),
    ("regnetx_002", 64, (2, 2), None),
    ("mobilenetv3_small_050", 64, (2, 2), None),
    ("ghostnet_050", 64, (2, 2), None),
    ("repvit_m0_9", 64, (2, 2), None),
    ("dla34", 64, (2, 2), None),
    ("mobilevit_xxs", 64, (2, 2), None),
    ("edgenext_xx_small", 64, (2, 2), None),
    ("efficientvit_b0", 64, (2, 2), None),
    ("fastvit_t8", 64, (2, 2), None),
    ("poolformer_s12", 64, (2, 2), None),
    ("mambaout_femto", 64, (2, 2), ("stages.3.blocks.2.norm", "nhwc", 0)),
    ("pvt_v2_b0", 64, (2, 2), ("stages.3.blocks.1.norm1", "tokens", 0)),
    ("vit_tiny_patch16_224", None, (14, 14), ("blocks.11.norm1", "tokens", 1)),
    ("deit_tiny_distilled_patch16_224", None, (14, 14), ("blocks.11.norm1", "tokens", 2)),
    ("vit_little_patch16_reg4_gap_256", None, (16, 16), ("blocks.13.norm1", "tokens", 4)),
    ("eva02_tiny_patch14_336.mim_in22k_ft_in1k", None, (24, 24), ("blocks.11.norm1", "tokens", 1)),
    ("swin_tiny_patch4_window7_224", None, (7, 7), ("layers.3.blocks.1.norm1", "nhwc", 0)),
    ("maxvit_pico_rw_256", None, (8, 8), ("stages.3.blocks.1.attn_grid.norm1", "nhwc", 0)),
    ("cait_xxs24_224", None, (14, 14), ("blocks_token_only.1.norm1", "tokens", 1)),
    ("mixer_s32_224", None, (7, 7), ("blocks.7.norm1", "tokens", 0)),
    ("levit_128s", None, (4, 4), None),
    ("hiera_tiny_224", None, (7, 7), ("blocks.11.norm1", "tokens", 0)),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, crop, grid, transformer", SWEEP, ids=[s[0].split(".")[0] for s in SWEEP])
def test_sweep_of_timm_architectures_through_hookviz_run(name, crop, grid, transformer, tmp_path):
    size = ["--crop", crop, "--resize", crop] if crop else []
    result = invoke(
        "run", "--model", f"timm:{name}", "--weights", "none", CAT, *size, "--out", tmp_path, "--device", "cpu", "--workers", 1
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "cat" / "report.json").read_text())
    assert report["logits"]["nonfinite"] == 0
    (layer,) = report["layers"]
    for key, stats in layer["stats"].items():
        assert stats is None or stats["nonfinite"] == 0, key
    assert layer["cam"]["shape"] == list(grid) and layer["cam"]["nonfinite"] == 0
    for kind in ("summary", "channels", "cam"):
        assert (tmp_path / "cat" / layer["pictures"][kind]).stat().st_size > 0, kind
    assert f"no --layer given: using {layer['name']} " in result.stderr
    if transformer is not None:
        path, kind, prefix = transformer
        assert layer["name"] == path
        assert (layer["layout"]["kind"], layer["layout"]["prefix"]) == (kind, prefix)
