"""Maps of one and three spatial dimensions: a tiny Conv1d model of (3, 64) signals and a tiny
Conv3d model of (3, T, H, W) clips, explained through ``hookviz.explain`` and saved, their
numbers checked against plain torch, torch-cam's 3-D Grad-CAM and hand computations. The
clip's sides differ (T=6, H=10, W=12), so a swapped axis changes a shape or a number."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from torch import nn

import hookviz
from hookviz.anatomy.featuremaps import DATA_FLOW, GUESSED, NCDHW, NCL, TOKENS, layout_of
from hookviz.anatomy.slices import MAX_SLICES, along_depth, tiling

CLIP = (3, 6, 10, 12)


def signal_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv1d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv1d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 5),
    )  # fmt: skip


def clip_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv3d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv3d(8, 8, 3, stride=(1, 2, 2), padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(8, 5),
    )  # fmt: skip


def _signal() -> torch.Tensor:
    return torch.randn(3, 64, generator=torch.Generator().manual_seed(1))


def _clip() -> torch.Tensor:
    return torch.randn(*CLIP, generator=torch.Generator().manual_seed(2))


# ----------------------------------------------------------------------------- layouts


def test_layouts_of_one_and_three_spatial_dimensions():
    assert layout_of((1, 8, 64), (64,), flow="ncl") == layout_of((1, 8, 64), (224, 224), flow="ncl")
    assert layout_of((1, 8, 64), (64,), flow="ncl").kind == NCL and layout_of((1, 8, 64), (64,), flow="ncl").basis == DATA_FLOW
    guessed = layout_of((1, 8, 64), (64,))  # a signal's model: channels first, as its input lies
    assert (guessed.kind, guessed.basis, guessed.rank) == (NCL, GUESSED, 1)
    assert layout_of((1, 8, 6, 5, 6), (6, 10, 12)).kind == NCDHW and layout_of((1, 8, 6, 5, 6), (6, 10, 12)).rank == 3
    assert layout_of((1, 8, 6, 5, 6), (224, 224)) is None  # a 5-D tensor of a photo's model: nothing says what
    assert layout_of((1, 197, 768), (224, 224)).kind == TOKENS  # tokens are read over a photo's grid, as before
    assert layout_of((1, 197, 768), (64,)).kind == NCL  # a signal model's 3-D tensor: channels first, never tokens


def test_a_tiling_shows_at_most_sixteen_slices_and_says_which():
    tiles = tiling((40, 4, 5))
    assert len(tiles.indices) == MAX_SLICES and tiles.indices[0] == 0 and tiles.indices[-1] == 39
    assert "16 of 40 slices along the first axis, 0 to 39" in tiles.note() and tiles.brief() == "16 of 40 frames, in rows"
    assert tiling((6, 10, 12)).indices == tuple(range(6)) and "all 6 slices" in tiling((6, 10, 12)).note()
    flat = tiles.flat(np.arange(16 * 20, dtype=float).reshape(16, 4, 5), np.nan)
    assert flat.shape == tiles.shape and np.isnan(flat).sum() == flat.size - 16 * 20
    top, left = tiles.origin(5)
    assert flat[top, left] == 5 * 20  # slice 5's first value where the tiling says it lies


def test_slices_along_depth_are_what_trilinear_resizing_makes():
    volume = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    resized = torch.nn.functional.interpolate(volume[None, None], size=(8, 4, 5), mode="trilinear", align_corners=False)[0, 0]
    np.testing.assert_allclose(along_depth(volume.numpy(), 8, tuple(range(8))), resized.numpy(), atol=1e-6)


# ----------------------------------------------------------------------------- the numbers


def test_channel_sums_and_profiles_are_plain_torch_sums():
    model, x = signal_model(), _signal()
    explanation = hookviz.explain(model, x, layers=["2"])
    layer = explanation["2"]
    with torch.no_grad():
        out = model[:3](x[None])
    np.testing.assert_allclose(layer.maps["output"], out[0].sum(0).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.profiles["output"], out[0].mean(1).numpy(), rtol=1e-5, atol=1e-6)
    assert layer.layout.kind == NCL and layer.ranks == dict.fromkeys(("input", "output", "grad_input", "grad_output"), 1)
    clip_net, clip = clip_model(), _clip()
    clip_layer = hookviz.explain(clip_net, clip, layers=["2"])["2"]
    with torch.no_grad():
        out = clip_net[:3](clip[None])
    assert out.shape[2:] == (6, 5, 6) and clip_layer.maps["output"].shape == (6, 5, 6)
    np.testing.assert_allclose(clip_layer.maps["output"], out[0].sum(0).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        clip_layer.maps["input"], clip_net[:2](clip[None])[0].sum(0).detach().numpy(), rtol=1e-5, atol=1e-5
    )


def test_gradcam_of_a_conv3d_is_torch_cams():
    from torchcam.methods import GradCAM

    model, clip = clip_model(), _clip()
    explanation = hookviz.explain(model, clip, layers=["2"])
    ours = explanation["2"].cam
    with GradCAM(model, target_layer="2", input_shape=CLIP) as extractor:
        scores = model(clip[None])
        theirs = extractor(explanation.target.index, scores, normalized=False)[0][0].detach().numpy()
    assert ours.shape == theirs.shape == (6, 5, 6)
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] >= 0.999
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-7)


def test_deletion_and_insertion_of_a_signal_and_a_clip_are_the_hand_computed_curves():
    for model, x, mode in ((signal_model(), _signal(), "linear"), (clip_model(), _clip(), "trilinear")):
        explanation = hookviz.explain(model, x, layers=["2"], faithfulness=True)
        trust = explanation["2"].trust
        cam = torch.from_numpy(explanation["2"].cam)[None, None]
        ranked = torch.nn.functional.interpolate(cam, size=tuple(x.shape[1:]), mode=mode, align_corners=False).flatten()
        order = np.argsort(-ranked.numpy(), kind="stable")
        target = explanation.target.index
        positions = order.size
        for fraction, deleted, inserted in zip(trust.deletion.fractions, trust.deletion.deletion, trust.deletion.insertion):
            k = round(fraction * positions)
            gone = torch.zeros(positions, dtype=torch.bool)
            gone[torch.from_numpy(order[:k].copy())] = True
            gone = gone.reshape(x.shape[1:])
            with torch.no_grad():
                p_deleted = model(torch.where(gone, 0.0, x)[None]).softmax(1)[0, target].item()
                p_inserted = model(torch.where(gone, x, 0.0)[None]).softmax(1)[0, target].item()
            assert deleted == pytest.approx(p_deleted, abs=1e-6)
            assert inserted == pytest.approx(p_inserted, abs=1e-6)
        assert trust.road is not None and np.isfinite(trust.road.combined)


def test_imputation_of_a_signal_is_linear_between_the_samples_kept():
    from hookviz.trust.road import noisy_linear_imputation

    signal = torch.randn(2, 12, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([0, 0, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0], dtype=torch.bool)
    imputed = noisy_linear_imputation(signal, keep, 0.0, torch.Generator().manual_seed(0))
    expected = signal.clone()
    expected[:, :2] = signal[:, 2:3]  # before the first kept sample: its value
    for i, t in zip((3, 4, 5), (0.25, 0.5, 0.75)):
        expected[:, i] = signal[:, 2] * (1 - t) + signal[:, 6] * t
    expected[:, 8] = (signal[:, 7] + signal[:, 9]) / 2
    expected[:, 10:] = signal[:, 9:10]
    torch.testing.assert_close(imputed, expected, atol=1e-5, rtol=1e-5)


def test_imputation_of_a_clip_makes_each_voxel_the_weighted_mean_of_its_26_neighbours():
    import itertools

    from hookviz.trust.road import noisy_linear_imputation

    clip = torch.randn(1, 5, 6, 7, generator=torch.Generator().manual_seed(0))
    keep = torch.ones(5, 6, 7, dtype=torch.bool)
    keep[1:4, 2:5, 2:4] = False
    imputed = noisy_linear_imputation(clip, keep, 0.0, torch.Generator().manual_seed(0))[0]
    weight = {1: 1 / 14, 2: 1 / 28, 3: 1 / 56}  # faces, edges, corners
    for t, y, x in zip(*torch.nonzero(~keep, as_tuple=True)):
        mean = sum(
            weight[sum(map(abs, o))] * imputed[t + o[0], y + o[1], x + o[2]]
            for o in itertools.product((-1, 0, 1), repeat=3)
            if any(o)
        )
        assert imputed[t, y, x].item() == pytest.approx(float(mean), abs=1e-5)
    assert torch.equal(imputed[keep], clip[0][keep])


def test_a_clips_iterative_imputation_equals_the_exact_solve():
    import numpy as np
    from scipy.sparse.linalg import spsolve

    from hookviz.trust.road import _conjugate_gradients, _linear_system

    generator = torch.Generator().manual_seed(2)
    clip = torch.randn(3, 8, 16, 16, generator=generator).numpy().reshape(3, -1)
    coarse = torch.rand(1, 1, 4, 4, 4, generator=generator)  # a CAM-like smooth map, its top 90 % removed
    relevance = torch.nn.functional.interpolate(coarse, size=(8, 16, 16), mode="trilinear")[0, 0].numpy()
    keep = (relevance < np.percentile(relevance, 10)).reshape(-1)
    system, right = _linear_system(clip, keep, np.flatnonzero(~keep), (8, 16, 16))
    exact = np.asarray(spsolve(system, right))
    np.testing.assert_allclose(_conjugate_gradients(system, right), exact, rtol=0, atol=1e-5)
    assert np.abs(exact).max() > 0.1  # values to be close to, not zeros


def test_the_sanity_check_randomises_a_clip_models_layers():
    explanation = hookviz.explain(clip_model(), _clip(), layers=["2"], sanity=True)
    sanity = explanation["2"].trust.sanity
    assert sanity.shape == (6, 5, 6) and len(sanity.correlations) == len(sanity.layers) == 3
    assert sanity.maps.shape == (4, 6, 5, 6) and not np.allclose(sanity.maps[0], sanity.maps[-1])


# ----------------------------------------------------------------------------- saved, compared, drawn


def _saved(explanation, folder, **options):
    files = explanation.save(folder, save_tensors=True, **options)
    return {path.name for path in files}, json.loads((folder / "report.json").read_text())


@pytest.mark.slow  # over 1.4 s of CPU, measured
@pytest.mark.parametrize("which", ["signal", "clip"])
def test_saved_pictures_tensors_and_report(tmp_path, which):
    model, x = (signal_model(), _signal()) if which == "signal" else (clip_model(), _clip())
    explanation = hookviz.explain(model, x, layers=["2"], faithfulness=True, sanity=True)
    names, report = _saved(explanation, tmp_path, pictures=("summary", "channels", "cam"))
    assert {"2.summary.png", "2.channels.png", "2.cam.png", "2.faithfulness.png", "2.sanity.png", "tensors.npz"} <= names
    layer = report["layers"][0]
    assert layer["layout"]["kind"] == ("ncl" if which == "signal" else "ncdhw")
    assert layer["cam"]["shape"] == list(explanation["2"].cam.shape)
    with np.load(tmp_path / "tensors.npz") as stored:
        np.testing.assert_array_equal(stored["2/output"], explanation["2"].output)
        assert stored["input"].shape == (1, *x.shape)
    from PIL import Image

    for name in ("2.summary.png", "2.channels.png", "2.cam.png", "2.sanity.png"):
        pixels = np.asarray(Image.open(tmp_path / name).convert("L"))
        assert pixels.std() > 10, name  # drawn, not blank


def test_a_kind_that_cannot_draw_a_rank_is_skipped_with_one_note(tmp_path):
    from hookviz.render.kinds import KINDS, PictureKind, register_kind, usual_reuse_key
    from hookviz.render.kinds.summary import build

    saved = KINDS.snapshot()
    try:
        register_kind(PictureKind("flatonly", "flatonly", "flat", "photos' maps only", build, _flat_key, ranks=(2,)))
        explanation = hookviz.explain(clip_model(), _clip(), layers=["2"])
        names, report = _saved(explanation, tmp_path, pictures=("summary", "flatonly"))
    finally:
        KINDS.restore(saved)
    layer = report["layers"][0]
    assert "2.summary.png" in names and layer["pictures"]["flatonly"] is None
    assert layer["notes"].count("flatonly picture not drawn: it draws maps of 2 spatial dimensions, and this map has 3") == 1
    assert usual_reuse_key is not None


def _flat_key(explanation, layer, options):
    from hookviz.render.kinds import usual_reuse_key

    return usual_reuse_key(explanation, layer, ())


def _run_folder(folder, explanation):
    from hookviz.store.run_records import ImageStatus, RunRecord
    from hookviz.store.runfolder import open_run

    explanation.save(folder / "sample", pictures="none", save_tensors=True)
    return open_run(folder, "base", [RunRecord(images=(ImageStatus("sample", "sample", "done"),))])


def test_a_clip_run_compared_with_itself_has_no_drift_and_with_another_model_some(tmp_path):
    from hookviz.compare.diffing import compare

    clip = _clip()
    base = _run_folder(tmp_path / "base", hookviz.explain(clip_model(), clip, layers=["2"]))
    same = _run_folder(tmp_path / "same", hookviz.explain(clip_model(), clip, layers=["2"]))
    changed_model = clip_model()
    with torch.no_grad():
        changed_model[2].weight.mul_(1.5)
    changed = _run_folder(tmp_path / "changed", hookviz.explain(changed_model, clip, layers=["2"]))
    itself = compare(base, same).images[0]
    assert not itself.findings and itself.layers[0].cam.corr == pytest.approx(1.0)
    output = next(t for t in itself.layers[0].tensors if t.name == "output")
    assert output.tensor.max_abs == 0 and output.map.max_abs == 0 and output.map is not None
    moved = compare(base, changed).images[0]
    output = next(t for t in moved.layers[0].tensors if t.name == "output")
    assert output.tensor.max_abs > 0 and output.map.max_abs > 0 and moved.findings
    assert moved.layers[0].cam.corr < 0.999


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_every_picture_kind_draws_a_signal_and_a_clip_or_says_why_not():
    from hookviz.render.kinds import kinds

    for model, x in ((signal_model(), _signal()), (clip_model(), _clip())):
        explanation = hookviz.explain(model, x, layers=["2"], cam=["gradcam", "gradcam++"], faithfulness=True, sanity=True)
        layer = explanation["2"]
        for kind in kinds():
            assert set(kind.ranks) <= {1, 2, 3}, kind.name
            if kind.compares:
                continue
            figure = kind.figure(explanation, layer, **kind.options(_pictures()))
            drawn = figure is not None
            fits = kind.applies(explanation) and kind.unfit(layer, explanation) is None  # a clip's picture: not for a signal
            assert drawn == (fits and kind.name != "cam_topk"), kind.name


def _pictures():
    from hookviz.options import PictureOptions

    return PictureOptions()


def test_a_signal_or_clip_tensor_is_taken_as_the_models_input():
    from hookviz.errors import UsageError

    clip = _clip()
    one = hookviz.explain(clip_model(), clip[None], layers=["2"])  # a batch of one clip
    np.testing.assert_array_equal(np.asarray(one.image.tensor), clip.numpy())
    tiles = tiling(CLIP[1:])
    assert one.image.shown.shape == (*tiles.shape, 3) and one.image.shown.dtype == np.uint8
    signal = hookviz.explain(signal_model(), _signal(), layers=["0"])
    assert signal.image.shown.shape[1] == 64 and signal["0"].cam.shape == (64,)
    with pytest.raises(UsageError, match=r"a signal's \(C, L\) or a clip's \(C, T, H, W\), not \(2, 3, 6, 10, 12\)"):
        hookviz.explain(clip_model(), torch.stack([clip, clip]), layers=["2"])


def _target_score(model, target: int):
    return lambda x: model(x)[:, target]


@pytest.mark.parametrize("which", ["signal", "clip"])
def test_integrated_gradients_of_a_signal_and_a_clip_are_captums(which):
    """Integrated gradients over a (C, L) signal or a (C, T, H, W) clip (its path was shaped for
    a photo's four axes: a signal's failed in the model, a clip's in the product)."""
    from captum.attr import IntegratedGradients

    model, x = (signal_model(), _signal()) if which == "signal" else (clip_model(), _clip())
    explanation = hookviz.explain(model, x, layers=["2"], cam="integrated-gradients", steps=8)
    ours = explanation.pixel_maps["integrated-gradients"].map
    theirs = IntegratedGradients(_target_score(model, explanation.target.index)).attribute(
        x[None], baselines=torch.zeros_like(x[None]), n_steps=8, method="gausslegendre"
    )[0]
    assert ours.shape == tuple(x.shape)
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_integrated_gradients_baselines_of_a_signal_are_its_mean_and_its_1d_blur():
    from scipy.ndimage import gaussian_filter1d

    from hookviz.methods.integrated_gradients import baseline

    x = _signal()[None]
    np.testing.assert_allclose(baseline(x, "mean").numpy(), np.broadcast_to(x.mean(-1, keepdim=True).numpy(), x.shape))
    sigma = 0.1 * 64  # a tenth of the side, its radius 3 sigmas: scipy's truncate
    theirs = gaussian_filter1d(x.numpy().astype(np.float64), sigma, axis=-1, mode="mirror", truncate=20 / sigma)
    np.testing.assert_allclose(baseline(x, "blur").numpy(), theirs, rtol=1e-5, atol=1e-6)
    clip = _clip()[None]
    assert baseline(clip, "blur").shape == clip.shape and baseline(clip, "mean").shape == clip.shape


def test_scorecam_of_a_signal_weighs_each_channel_by_the_score_of_the_signal_it_masks():
    """Score-CAM at a Conv1d's layer (refused before: '1 spatial dimensions and the input 1')."""
    model, x = signal_model(), _signal()
    explanation = hookviz.explain(model, x, layers=["2"], cam="scorecam")
    target = explanation.target.index
    with torch.no_grad():
        maps = model[:3](x[None])[0]  # (8, 64): the layer's channels at the signal's own length
        low, high = maps.amin(-1, keepdim=True), maps.amax(-1, keepdim=True)
        masks = (maps - low) / (high - low + 1e-8)
        scores = torch.stack([model((x * mask)[None])[0, target] for mask in masks])
    expected = torch.relu((torch.softmax(scores.double(), 0).float()[:, None] * maps).sum(0))
    np.testing.assert_allclose(explanation["2"].cam, expected.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("which", ["signal", "clip"])
def test_guided_gradcam_of_a_signal_and_a_clip_are_captums(which):
    from captum.attr import GuidedGradCam

    model, x = (signal_model(), _signal()) if which == "signal" else (clip_model(), _clip())
    explanation = hookviz.explain(model, x, layers=["2"], cam="guided-gradcam")
    mode = "linear" if which == "signal" else "trilinear"
    reference = GuidedGradCam(model, model[2])
    theirs = reference.attribute(x[None].requires_grad_(True), target=explanation.target.index, interpolate_mode=mode)
    theirs = theirs[0].detach().numpy()
    np.testing.assert_allclose(explanation.pixel_maps["guided-gradcam"].map, theirs, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("which, takes", [("signal", "signals, (C, L) tensors"), ("clip", "clips, (C, T, H, W) tensors")])
def test_a_photo_given_to_a_model_of_signals_or_clips_is_one_line_naming_what_it_takes(which, takes, tmp_path):
    """explain() let the model's own RuntimeError out; a run failed each photo in the model's
    words after creating its folder."""
    from hookviz.errors import UsageError
    from tests.cli_helpers import hookviz_cli
    from tests.conftest import SAMPLES

    factory = signal_model if which == "signal" else clip_model
    with pytest.raises(UsageError, match=rf"^model='Sequential' takes {re.escape(takes)} \(its first convolution is a "):
        hookviz.explain(factory(), SAMPLES / "cat.png")
    done = hookviz_cli("run", "--model", f"tests.test_ranks:{factory.__name__}", "--out", tmp_path / "out", SAMPLES / "cat.png")
    lines = done.output.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1, done.output
    assert lines[0].startswith(f"hookviz: error: --model tests.test_ranks:{factory.__name__} takes {takes}")
    assert lines[0].endswith(
        "give hookviz.explain such a tensor, or have the model name a sample kind that reads its files (hookviz_sample_kind)"
    )
    assert not (tmp_path / "out").exists()
