"""torchvision's video classifiers by name, their token layouts, Grad-CAM's --time-weights, and
their maps against independent references (pytorch-grad-cam, torch-cam, captum, a hand-written
reshape of the tokens), all on random weights at reduced input sizes: nothing is downloaded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.models import video

import hookviz
from hookviz.models.sources.torchvision_video import TorchvisionVideoSource, clip_frames, video_preprocessing

ZOO = ["mc3_18", "mvit_v1_b", "mvit_v2_s", "r2plus1d_18", "r3d_18", "s3d", "swin3d_b", "swin3d_s", "swin3d_t"]


def _correlation(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    return float(np.corrcoef(a, b)[0, 1])


def _recorded(model, layer, clip, target):
    """The layer's output and its gradient of the target's logit, recorded by hand."""
    kept = {}

    def keep(module, args, output):
        tensor = output[0] if isinstance(output, tuple) else output
        tensor.retain_grad()
        kept["output"] = tensor

    handle = model.get_submodule(layer).register_forward_hook(keep)
    try:
        model(clip[None])[0, target].backward()
    finally:
        handle.remove()
    return kept["output"].detach(), kept["output"].grad.detach()


def _gradcam(activations, gradients, per_frame=False):
    """Grad-CAM of (1, C, T, H, W) by hand: clip weights (mean over T, H, W) or frame weights (over H, W)."""
    axes = (3, 4) if per_frame else (2, 3, 4)
    weights = gradients.mean(dim=axes, keepdim=True)
    return torch.relu((weights * activations).sum(dim=1))[0].numpy()


def _small_mvit():
    from torchvision.models.video.mvit import MSBlockConfig, MViT

    blocks = [
        MSBlockConfig(1, 8, 8, [3, 3, 3], [3, 3, 3], [1, 1, 1], [1, 2, 2]),
        MSBlockConfig(2, 8, 16, [3, 3, 3], [3, 3, 3], [1, 2, 2], [1, 1, 1]),
    ]
    torch.manual_seed(0)
    return MViT(
        spatial_size=(48, 48),
        temporal_size=8,
        block_setting=blocks,
        residual_pool=True,
        residual_with_cls_embed=False,
        rel_pos_embed=True,
        proj_after_attn=True,
        num_classes=5,
    ).eval()


def test_the_zoo_is_listed_with_its_frames_sizes_and_transform():
    source = TorchvisionVideoSource()
    assert source.names() == ZOO and all(source.claims(name) for name in ZOO) and not source.claims("resnet18")
    assert source.describe("swin3d_t") == "video: 32 frames of 224x224"
    entry = video.R3D_18_Weights.DEFAULT
    pretrained = video_preprocessing(entry, True)
    assert (pretrained.resize, pretrained.size, pretrained.frames) == (128, 112, 16)
    assert pretrained.mean == (0.43216, 0.394666, 0.37645) and pretrained.std == (0.22803, 0.22145, 0.216989)
    assert type(pretrained.transform.function).__name__ == "VideoClassification" and not pretrained.transform.applied
    assert clip_frames(video.MViT_V2_S_Weights.DEFAULT) == 16 and clip_frames(video.S3D_Weights.DEFAULT) == 128
    assert pretrained.to_json()["frames"] == 16


def test_a_video_model_loads_as_a_clip_model_with_kinetics_categories():
    loaded = TorchvisionVideoSource().load("r3d_18", "none", seed=0)
    assert loaded.sample_kind == "video" and loaded.task == "classify" and len(loaded.categories) == 400
    assert loaded.categories[0] == "abseiling" and loaded.preprocessing.transform is None
    assert (loaded.preprocessing.size, loaded.preprocessing.frames) == (112, 16) and loaded.input_size is None
    assert not loaded.module.training
    with pytest.raises(hookviz.errors.WeightsError, match="KINETICS400_V1"):
        TorchvisionVideoSource().load("r3d_18", "IMAGENET", seed=0)


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_gradcam_of_r3d_18_equals_pytorch_grad_cam_and_torch_cam():
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
    from torchcam.methods import GradCAM as TorchCamGradCAM

    torch.manual_seed(0)
    model = video.r3d_18(weights=None, num_classes=7).eval()
    clip = torch.randn(3, 16, 64, 48)
    target = int(model(clip[None]).argmax())
    ours = hookviz.explain(model, clip, layers=["layer4"], target=target).layers[0].cam
    assert ours.shape == (2, 4, 3)  # (T', H', W'): 16 frames / 8, 64 / 16, 48 / 16
    with GradCAM(model=model, target_layers=[model.layer4]) as reference:
        output = reference.activations_and_grads(clip[None])
        model.zero_grad()
        output[0, target].backward()
        activations = reference.activations_and_grads.activations[0].numpy()
        gradients = reference.activations_and_grads.gradients[0].numpy()
        theirs = reference.get_cam_image(
            clip[None], model.layer4, [ClassifierOutputTarget(target)], activations, gradients, False
        )
    assert _correlation(ours, np.maximum(theirs[0], 0)) >= 0.999
    with TorchCamGradCAM(model, target_layer="layer4") as extractor:
        scores = model(clip[None])
        torchcam = extractor(class_idx=target, scores=scores, normalized=False)[0][0].detach().numpy()
    assert torchcam.shape == ours.shape and _correlation(ours, torchcam) >= 0.999


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_frame_time_weights_equal_a_hand_computation_and_differ_from_clip_weights():
    torch.manual_seed(1)
    model = video.r3d_18(weights=None, num_classes=5).eval()
    clip = torch.randn(3, 8, 32, 32)
    target = int(model(clip[None]).argmax())
    activations, gradients = _recorded(model, "layer3", clip.clone().requires_grad_(False), target)
    by_frame = hookviz.explain(model, clip, layers=["layer3"], target=target, time_weights="frame").layers[0].cam
    by_clip = hookviz.explain(model, clip, layers=["layer3"], target=target, time_weights="clip").layers[0].cam
    np.testing.assert_allclose(by_frame, _gradcam(activations, gradients, per_frame=True), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(by_clip, _gradcam(activations, gradients), rtol=1e-4, atol=1e-6)
    assert by_frame.shape == (2, 4, 4) and not np.allclose(by_frame, by_clip, rtol=1e-3)


def test_time_weights_is_checked():
    with pytest.raises(hookviz.errors.UsageError, match="time_weights"):
        hookviz.explain(video.r3d_18(weights=None, num_classes=3).eval(), torch.randn(3, 8, 16, 16), time_weights="slice")


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_integrated_gradients_of_a_clip_equal_captums():
    from captum.attr import IntegratedGradients

    torch.manual_seed(2)
    model = video.r3d_18(weights=None, num_classes=4).eval()
    clip = torch.randn(3, 4, 16, 24)
    target = int(model(clip[None]).argmax())
    explained = hookviz.explain(model, clip, target=target, cam="integrated-gradients", steps=8)
    ours = explained.pixel_maps["integrated-gradients"].map
    theirs = IntegratedGradients(model).attribute(clip[None], target=target, n_steps=8, method="gausslegendre")
    assert ours.shape == (3, 4, 16, 24)
    np.testing.assert_allclose(ours, theirs[0].detach().numpy(), rtol=1e-3, atol=1e-6)


def test_swin3d_maps_equal_a_hand_reshape_of_its_channels_last_output():
    torch.manual_seed(3)
    model = video.swin3d_t(weights=None, num_classes=5).eval()
    clip = torch.randn(3, 8, 64, 32)
    target = int(model(clip[None]).argmax())
    layer = hookviz.explain(model, clip, layers=["features.2"], target=target).layers[0]
    output, gradient = _recorded(model, "features.2", clip, target)
    assert output.shape == (1, 4, 8, 4, 192)  # (N, T', H', W', C): channels last
    expected = _gradcam(output.permute(0, 4, 1, 2, 3), gradient.permute(0, 4, 1, 2, 3))
    assert layer.layout.kind == "ndhwc" and layer.layout.declared
    np.testing.assert_allclose(layer.cam, expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(layer.maps["output"], output[0].sum(-1).numpy(), rtol=1e-4, atol=1e-4)


def test_mvit_maps_equal_a_hand_reshape_of_its_pooled_tokens():
    model = _small_mvit()
    clip = torch.randn(3, 8, 48, 48, generator=torch.Generator().manual_seed(4))
    target = int(model(clip[None]).argmax())
    processing = hookviz.Preprocessing(resize=48, size=48)
    found = hookviz.explain(model, clip, layers=["blocks.0", "blocks.1"], target=target, preprocessing=processing)
    for layer, grid in zip(found.layers, [(4, 12, 12), (4, 6, 6)]):
        output, gradient = _recorded(model, layer.name, clip, target)
        assert output.shape[1] == 1 + int(np.prod(grid))  # the class token, then the pooled (T', H', W') grid

        def grid_of(tokens, grid=grid):
            return tokens[:, 1:].reshape(1, *grid, -1).permute(0, 4, 1, 2, 3)

        assert layer.layout.kind == "tokens" and layer.layout.grid == grid and layer.layout.prefix == 1
        np.testing.assert_allclose(layer.cam, _gradcam(grid_of(output), grid_of(gradient)), rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # about 8 s of CPU: r3d_18 on 16 frames of 112x112, twice
def test_a_video_file_through_hookviz_run_with_a_video_classifier_by_name(tmp_path):
    """``hookviz run --model r3d_18`` on a video file: 16 frames (the weights' clip length) by
    default, 4 with ``--frames 4``, and the clip pictures written."""
    import json

    from tests.cli_helpers import hookviz_run
    from tests.video_clips import encode

    clip = encode(tmp_path / "walk.mp4", frames=48, width=160, height=120)
    result = hookviz_run(clip, model="r3d_18", layer="layer3", out=tmp_path / "out")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "walk" / "report.json").read_text())
    assert report["asked"]["target"]["sample"]["frames"] == 16
    assert report["preprocessing"]["input_size"] == [16, 112, 112]
    written = {p.name for p in (tmp_path / "out" / "walk").iterdir()}
    assert {"layer3.frames.png", "layer3.time.png", "layer3.animation.webp", "layer3.cam.png"} <= written
    four = hookviz_run(clip, "--frames", "4", model="r3d_18", layer="layer3", out=tmp_path / "four")
    assert four.exit_code == 0, four.output
    assert json.loads((tmp_path / "four" / "walk" / "report.json").read_text())["preprocessing"]["input_size"] == [4, 112, 112]
