"""Names for channels (``hookviz.concepts.naming``): CLIP-Dissect's SoftWPMI held to the formula
written out by hand, term by term, on a tiny open_clip model with seeded random weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from hookviz.concepts.naming import SoftWpmi, channel_names, read_vocabulary, soft_wpmi
from hookviz.errors import UsageError

TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
WORDS = ("fur", "stripes", "sky", "wheel", "grass")


def _by_hand(sims, a=10.0, lam=1.0, p_start=0.998, p_end=0.97, min_prob=1e-7):
    """CLIP-Dissect's soft_wpmi, one number at a time."""
    channels, count, concepts = len(sims), len(sims[0]), len(sims[0][0])
    given = [[0.0] * concepts for _ in range(channels)]
    for e in range(channels):
        for k in range(count):
            total = sum(math.exp(a * s) for s in sims[e][k])
            p_k = p_start - k / count * (p_start - p_end)
            for d in range(concepts):
                given[e][d] += math.log(1 + p_k * (math.exp(a * sims[e][k][d]) / total - 1) + min_prob)
    prior = [math.log(sum(math.exp(given[e][d]) for e in range(channels)) / channels) for d in range(concepts)]
    return [[given[e][d] - lam * prior[d] for d in range(concepts)] for e in range(channels)]


def test_soft_wpmi_is_clip_dissects_formula():
    sims = np.random.default_rng(0).uniform(-0.3, 0.4, size=(4, 6, 5))
    assert np.allclose(soft_wpmi(sims), _by_hand(sims.tolist()), atol=1e-9)
    assert np.allclose(soft_wpmi(sims, SoftWpmi(a=3.0, lam=0.5)), _by_hand(sims.tolist(), a=3.0, lam=0.5), atol=1e-9)


def test_a_channel_is_named_by_its_highest_score_and_the_runner_up_is_the_second():
    scores = np.array([[0.1, 2.0, -1.0], [3.0, 2.5, 2.9]])
    first, second = channel_names(scores, ("a", "b", "c"))
    assert (first.concept, first.score, first.runner_up, first.runner_up_score) == ("b", 2.0, "a", 0.1)
    assert (second.concept, second.runner_up) == ("a", "c")
    assert set(first.asdict()) == {"concept", "score", "runner_up", "runner_up_score"}


def test_the_vocabulary_is_one_concept_a_line_and_a_short_or_missing_one_is_refused(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("# concepts\nfur\n\nstripes \nfur\nsky\n")
    assert read_vocabulary(words) == ("fur", "stripes", "sky")
    words.write_text("fur\n")
    with pytest.raises(UsageError, match="at least two"):
        read_vocabulary(words)
    with pytest.raises(UsageError, match="cannot read it"):
        read_vocabulary(tmp_path / "missing.txt")


@pytest.fixture
def tiny_clip(monkeypatch):
    import open_clip.factory

    monkeypatch.setitem(open_clip.factory._MODEL_CONFIGS, "hookviz-tiny-dissect", TINY_CLIP)
    return "open_clip:hookviz-tiny-dissect"


@pytest.mark.slow  # open_clip's import (~5-10 s)
def test_names_from_a_seeded_random_open_clip_model_equal_the_hand_computation(tiny_clip):
    import open_clip

    from hookviz.concepts.naming import clip_concepts

    concepts = clip_concepts(tiny_clip, WORDS, weights="none", seed=0)
    rng = np.random.default_rng(1)
    crops = [[Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in range(4)] for _ in range(3)]
    sims = concepts.similarities(crops, batch=5)
    # the same model built by open_clip itself, seeded as hookviz seeds it, and its similarities by hand
    torch.manual_seed(0)
    model = open_clip.create_model("hookviz-tiny-dissect", pretrained=None).eval()
    tokens = open_clip.get_tokenizer("hookviz-tiny-dissect")(list(WORDS))
    with torch.no_grad():
        text = model.encode_text(tokens)
        text = text / text.norm(dim=-1, keepdim=True)
        for e, examples in enumerate(crops):
            for k, crop in enumerate(examples):
                image = model.encode_image(concepts.prepare(crop)[None])
                image = image / image.norm(dim=-1, keepdim=True)
                assert np.allclose(sims[e, k], (image @ text.T)[0].numpy(), atol=1e-5)
    names = channel_names(soft_wpmi(sims), WORDS)
    expected = _by_hand(sims.tolist())
    for name, row in zip(names, expected):
        best = int(np.argmax(row))
        assert name.concept == WORDS[best] and name.score == pytest.approx(row[best], abs=1e-9)
        assert name.runner_up == WORDS[int(np.argsort(row)[-2])]


@pytest.mark.slow  # open_clip's import
def test_missing_weights_say_in_one_line_where_to_put_them(tiny_clip, monkeypatch, tmp_path):
    from hookviz.concepts.naming import clip_concepts
    from hookviz.errors import WeightsError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(WeightsError) as failure:
        clip_concepts("open_clip:RN50", WORDS)
    message = str(failure.value)
    assert "\n" not in message and message.startswith("label_with='open_clip:RN50'")
    assert "empty-cache" in message and "hf download" in message and "weights=" not in message


def _colour_concepts():
    """A stand-in for CLIP: an image's embedding is its mean colour, and each concept's text a primary."""
    import torch.nn.functional as F

    from hookviz.concepts.naming import ClipConcepts

    def prepare(image):
        return torch.from_numpy(np.asarray(image, dtype=np.float32)).permute(2, 0, 1) / 255

    def embed(images):
        return F.normalize(images.mean(dim=(2, 3)) + 1e-3, dim=-1)

    return ClipConcepts(embed, torch.eye(3), prepare, ("red", "green", "blue"), "stand-in")


def test_an_atlas_is_labelled_channel_by_channel_from_its_crops(tmp_path):
    from hookviz.concepts.naming import label_atlas

    colours = {0: (220, 20, 20), 1: (20, 200, 30), 2: (10, 30, 230)}
    items = []
    for channel, colour in colours.items():
        tops = []
        for k in range(3):
            crop = f"crops/l/{channel}/{k}.png"
            (tmp_path / crop).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), tuple(max(0, c - 20 * k) for c in colour)).save(tmp_path / crop)
            tops.append({"source": f"p{k}.png", "score": 3.0 - k, "crop": crop})
        items.append({"index": channel, "top": tops})
    document = {"schema": "hookviz/atlas/1", "layers": [{"name": "l", "items": items}]}
    labelled = label_atlas(document, tmp_path, _colour_concepts())
    labels = [item["label"] for item in labelled["layers"][0]["items"]]
    assert [label["concept"] for label in labels] == ["red", "green", "blue"]
    assert all(label["score"] > label["runner_up_score"] for label in labels)
    assert "label" not in document["layers"][0]["items"][0]  # the given document is left as it was
