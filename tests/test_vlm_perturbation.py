"""Perturbation of a vision-language model's answer (``hookviz.vlm.perturbation``) equals captum
0.9's ``LLMAttribution(FeatureAblation(model))`` over an ``ImageMaskInput`` with the same masks,
on the tiny LLaVA (tests/vlm_models.py): feature ablation over a segment map, occlusion over
overlapping windows (``mask_list``). Batching the masks changes no number, and on the families
whose inputs are laid out otherwise (Qwen2-VL's patches, Idefics3's tiles) too."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from .conftest import SAMPLES
from .vlm_models import load_llava

transformers = pytest.importorskip("transformers")
captum_attr = pytest.importorskip("captum.attr")

PROMPT = "describe the photo ."
ANSWER = "a black cat sits on the mat"


@pytest.fixture(scope="module")
def llava(llava_folder):
    """(model, processor, conversation, photo) of the tiny LLaVA explaining ``ANSWER`` about a 40 x 32 photo."""
    from hookviz.vlm.conversation import answer_conversation

    model, processor = load_llava(llava_folder)
    photo = Image.open(SAMPLES / "cat.png").convert("RGB").resize((40, 32))
    return model, processor, answer_conversation(model, processor, photo, PROMPT, ANSWER), photo


def _captum(llava, forward_in_tokens: bool, **masks):
    """captum's token attributions (T, K): LLMAttribution(FeatureAblation) over ImageMaskInput."""
    from hookviz.vlm.conversation import model_inputs

    model, processor, talk, photo = llava
    image = captum_attr.ImageMaskInput(
        image=photo, processor_fn=lambda shown: model_inputs(model, processor, shown, PROMPT), **masks
    )
    explainer = captum_attr.LLMAttribution(captum_attr.FeatureAblation(model), tokenizer=processor.tokenizer)
    # captum's default decodes token by token with a cache, which transformers 5 feeds no pixel values after the
    # first step of generate's own loop: without the cache, each token is a pass of the whole sequence
    result = explainer.attribute(image, target=talk.answer_ids, forward_in_tokens=forward_in_tokens, use_cached_outputs=False)
    return result, image


def test_feature_ablation_equals_captums_llm_attribution_with_the_same_segments(llava):
    from hookviz.vlm.perturbation import feature_ablation, superpixels

    _, _, talk, photo = llava
    segments = superpixels(photo, 6) + 3  # ids need not start at 0
    ours = feature_ablation(*llava, segments)
    theirs, image = _captum(llava, False, mask=segments)
    assert ours.drops.shape == (len(talk.answer_ids), len(segments.unique())) and ours.drops.abs().max() > 1e-3
    torch.testing.assert_close(ours.drops, theirs.token_attr, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.drops.sum(0), theirs.seq_attr, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.maps, image.format_pixel_attr(ours.drops), rtol=0, atol=0)


def test_occlusion_equals_captum_over_the_windows_token_by_token_and_maps_their_mean(llava):
    from hookviz.vlm.perturbation import occlusion

    _, _, _, photo = llava
    ours = occlusion(*llava, window=20, stride=12)
    assert len(ours.features) == 2 * 3  # rows 0, 12; columns 0, 12, 24 (the last hangs over the edge)
    theirs, image = _captum(llava, True, mask_list=list(ours.features))
    torch.testing.assert_close(ours.drops, theirs.token_attr, rtol=1e-5, atol=1e-5)
    covered = ours.features.sum(0)
    torch.testing.assert_close(ours.maps, image.format_pixel_attr(ours.drops) / covered, rtol=1e-6, atol=1e-6)


def _passes(model, run):
    """``run()``'s result and how many forward passes of ``model`` it made."""
    count = []
    hook = model.register_forward_pre_hook(lambda *_: count.append(1))
    try:
        return run(), len(count)
    finally:
        hook.remove()


def test_one_pass_scores_every_token_of_a_batch_of_masks_and_batching_changes_nothing(llava, monkeypatch):
    from hookviz.vlm.perturbation import feature_ablation

    model, _, talk, photo = llava
    segments = torch.arange(4).repeat_interleave(10)[None].expand(32, -1)  # four bands of 10 columns
    whole, passes = _passes(model, lambda: feature_ablation(*llava, segments, baseline="mean"))
    assert passes == 2 and len(talk.answer_ids) == 7  # the photo, then the four masks together
    monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", "1")
    one_by_one, passes = _passes(model, lambda: feature_ablation(*llava, segments, baseline="mean"))
    assert passes == 1 + 4
    torch.testing.assert_close(one_by_one.drops, whole.drops, rtol=1e-5, atol=1e-6)


def _conversation(name, tmp_path):
    """A family's tiny model, processor, a conversation answering ``ANSWER`` and the photo."""
    from hookviz.vlm.conversation import answer_conversation

    from . import vlm_families

    folder = vlm_families.BUILDERS[name](tmp_path / name)
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = transformers.AutoProcessor.from_pretrained(folder)
    photo = vlm_families.photo()
    return model, processor, answer_conversation(model, processor, photo, PROMPT, ANSWER), photo


@pytest.mark.parametrize("name", ["qwen2_vl", "paligemma", "idefics3"])
def test_a_familys_masks_batched_score_as_each_alone(name, tmp_path, monkeypatch):
    from hookviz.vlm.perturbation import feature_ablation

    model, processor, talk, photo = _conversation(name, tmp_path)
    segments = torch.arange(6).repeat_interleave(8)[None].expand(photo.height, -1)
    batched = feature_ablation(model, processor, talk, photo, segments)
    monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET", "1")
    alone = feature_ablation(model, processor, talk, photo, segments)
    assert batched.drops.abs().max() > 1e-4
    torch.testing.assert_close(batched.drops, alone.drops, rtol=1e-5, atol=1e-6)


def test_masks_of_another_size_or_an_unknown_baseline_are_refused_in_one_line(llava):
    from hookviz.errors import UsageError
    from hookviz.vlm.perturbation import feature_ablation

    with pytest.raises(UsageError, match=r"give \(K, 32, 40\), masks of the photo's size"):
        feature_ablation(*llava, torch.zeros(40, 32, dtype=torch.long))
    with pytest.raises(UsageError, match="grey.*: choose white, black, mean"):
        feature_ablation(*llava, torch.zeros(32, 40, dtype=torch.long), baseline="grey")


def test_run_maps_each_token_by_occlusion_and_feature_ablation_through_the_cli(llava_folder, tmp_path):
    import json

    import numpy as np

    from .cli_helpers import hookviz_run

    result = hookviz_run(
        SAMPLES / "cat.png",
        *("--prompt", PROMPT, "--answer", "a black cat", "--cam", "occlusion,feature-ablation", "--save-tensors"),
        model=f"hf:{llava_folder}",
        weights=None,
        out=tmp_path / "out",
    )
    assert result.exit_code == 0, result.output
    tensors = np.load(tmp_path / "out" / "cat" / "tensors.npz")
    photo = Image.open(SAMPLES / "cat.png")
    assert photo.size == (451, 300)  # CLIP's processor sees its centre square, so the maps keep that square
    for method in ("occlusion", "feature-ablation"):
        maps = [tensors[f"photo/{method}/token{k}"] for k in range(3)]
        assert all(m.shape == (300, 300) and np.isfinite(m).all() and np.abs(m).max() > 0 for m in maps)
    assert json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["text"] == "a black cat"
