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


#: Each video classifier of ``hookviz models`` at the smallest clip it takes: r3d's family and
#: Swin3D take any; S3D's last pooling needs 16 frames of 224x224 (a 2x7x7 map); MViT's forward
#: reads its positional encoding's 8x56x56 token grid: exactly 16 frames of 224x224, its defaults.
SMALLEST = {
    "mc3_18": ("--frames", "4", "--resize", "32", "--crop", "32"),
    "r2plus1d_18": ("--frames", "4", "--resize", "32", "--crop", "32"),
    "r3d_18": ("--frames", "4", "--resize", "32", "--crop", "32"),
    "s3d": ("--frames", "16"),
    "swin3d_t": ("--frames", "4", "--resize", "64", "--crop", "64"),
    "swin3d_s": ("--frames", "4", "--resize", "64", "--crop", "64"),
    "swin3d_b": ("--frames", "4", "--resize", "64", "--crop", "64"),
    "mvit_v1_b": (),
    "mvit_v2_s": (),
}


@pytest.mark.slow  # hookviz models reads every source's names: about 5 s of CPU, measured
def test_every_video_model_hookviz_models_lists_is_run_below():
    from tests.cli_helpers import hookviz_cli

    listed = hookviz_cli("models")
    assert listed.exit_code == 0, listed.output
    video_models = {line.split()[0] for line in listed.output.splitlines() if "(video:" in line}
    assert video_models == set(SMALLEST) == set(ZOO)


@pytest.mark.slow  # 3 s (r3d_18) to 40 s (mvit at its 16x224x224) of CPU each, measured
@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_every_video_model_runs_on_a_clip_through_its_source(tmp_path, name):
    """``hookviz run clip.mp4 --model NAME --weights none``: each video model loaded by name (its
    source's own builder, random weights), on a video file, at the smallest clip it takes; the
    report says the frames and size used."""
    import json

    from tests.cli_helpers import hookviz_run
    from tests.video_clips import encode

    clip = encode(tmp_path / "walk.mp4", frames=20, width=64, height=48)
    result = hookviz_run(clip, *SMALLEST[name], "--pictures", "cam", model=name, out=tmp_path / "out")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "walk" / "report.json").read_text())
    given = dict(zip(SMALLEST[name][::2], SMALLEST[name][1::2]))
    frames, side = int(given.get("--frames", 16)), int(given.get("--crop", 224))
    assert report["preprocessing"]["input_size"] == [frames, side, side]
    assert report["preprocessing"]["frames"] == frames and report["layers"][0]["cam"]["shape"][0] >= 1
    assert (tmp_path / "out" / "walk" / f"{report['layers'][0]['name']}.cam.png").stat().st_size > 0


@pytest.mark.slow  # builds mvit_v2_s and r3d_18: about 4 s of CPU, measured
def test_mvit_takes_16_frames_of_224_pixels_not_its_token_grid():
    """MViT's ``pos_encoding.spatial_size`` is its 56x56 token grid after the 4-pixel patch
    step; the input it takes is 16x224x224, and a clip of other frames is refused in one line."""
    loaded = TorchvisionVideoSource().load("mvit_v2_s", "none", seed=0)
    assert loaded.module.pos_encoding.spatial_size == (56, 56)
    assert (loaded.input_size, loaded.input_frames, loaded.preprocessing.size) == ((224, 224), 16, 224)
    r3d = TorchvisionVideoSource().load("r3d_18", "none", seed=0)
    assert (r3d.input_size, r3d.input_frames) == (None, None)  # any clip size and length
    with pytest.raises(
        hookviz.errors.UsageError, match=r"^frames=8: mvit_v2_s takes clips of 16 frames; pass frames=16 or leave it out$"
    ):
        hookviz.explain(loaded, torch.zeros(3, 8, 224, 224), frames=8)


@pytest.mark.slow  # a pass and a 64-tile figure: about 3 s of CPU, measured
def test_the_channels_of_an_mvit_layer_are_drawn_with_its_token_grid_slices():
    """The channels picture of a layer of tokens tiles each channel's (T', H', W') grid: its
    title names the grid's slices, not the (tokens, channels) tensor's last axes."""
    model = _small_mvit()
    clip = torch.randn(3, 8, 48, 48, generator=torch.Generator().manual_seed(5))
    found = hookviz.explain(model, clip, layers=["blocks.0"], preprocessing=hookviz.Preprocessing(resize=48, size=48))
    figure = found.figure("blocks.0", "channels")
    title = figure.texts[0].get_text() if figure.texts else figure._suptitle.get_text()
    assert "each tile: all 4 slices along the first axis" in title, title


def test_hookviz_layers_traces_a_clip_model_on_the_clip_it_takes():
    """``hookviz layers`` traces a clip model on its kind's blank clip: the model's own frames
    (VideoNet's 6, declared), not 8 frames of a zero photo's size."""
    from tests.cli_helpers import hookviz_cli

    listed = hookviz_cli("layers", "--model", "tests.video_clips:video_net_of_6_frames", "--crop", "32")
    assert listed.exit_code == 0, listed.output
    assert "1x8x6x16x16" in listed.output.split("features.3")[1].splitlines()[0], listed.output
