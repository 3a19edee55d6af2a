"""open_clip's CLIP models, explained through text prompts (``--prompt``, ``--prompts``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hookviz import explain, load_model

from .cli_helpers import hookviz_cli
from .conftest import SAMPLES

CAT = SAMPLES / "cat.png"
#: A small registered config (63M parameters with its text tower; 7x7 patches of 32 at 224).
ARCH = "ViT-S-32"
PROMPTS = ["a photo of a cat", "a photo of a dog", "a photo of a car"]
LAYER = "visual.transformer.resblocks.11.ln_1"
#: A file time no run writes (2001-09-09): a report that keeps it was not rewritten.
PLANTED_NS = 10**18


def invoke(*args):
    return hookviz_cli(*args)


class ImageTextLogits(torch.nn.Module):
    """pytorch-grad-cam's CLIP example's classifier: the model's ``logits_per_image``
    (scale x normalised image features @ normalised text features.T) over the prompts."""

    def __init__(self, clip, text):
        super().__init__()
        self.clip, self.text = clip, text

    def forward(self, image):
        image_features, text_features, scale = self.clip(image, self.text)[:3]
        return scale * image_features @ text_features.T


def reshape_transform(tensor, height=7, width=7):
    """pytorch-grad-cam's ViT/CLIP reshape_transform: drop the class token, grid, NCHW."""
    result = tensor[:, 1:, :].reshape(tensor.size(0), height, width, tensor.size(2))
    return result.transpose(2, 3).transpose(1, 2)


def _pgc_scaled(cam: np.ndarray, size: int) -> np.ndarray:
    cam = cam - cam.min()
    cam = cam / (1e-7 + cam.max())
    return F.interpolate(torch.from_numpy(cam)[None, None].float(), size=(size, size), mode="bilinear")[0, 0].numpy()


@pytest.mark.slow  # ~20 s on 2 shared cores: importing open_clip alone takes ~10 s
def test_clip_cam_equals_pytorch_grad_cams_clip_example():
    import open_clip
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    loaded = load_model(f"open_clip:{ARCH}", weights="none", seed=0, prompts=PROMPTS)
    assert loaded.categories == tuple(PROMPTS)
    torch.manual_seed(0)  # the same random initialisation, built by open_clip itself
    clip = open_clip.create_model(ARCH).eval()
    theirs_model = ImageTextLogits(clip, open_clip.get_tokenizer(ARCH)(PROMPTS)).eval()
    image = torch.randn(3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = theirs_model(image[None])[0]
    best = int(logits.argmax())

    ours = explain(loaded, image)
    assert ours.layers[0].name == LAYER  # the default layer: the last block's first norm
    assert ours.target.index == best and ours.target.name == PROMPTS[best]
    assert ours.target.logit == pytest.approx(float(logits[best]), rel=1e-4)
    assert ours.target.probability == pytest.approx(float(logits.softmax(0)[best]), rel=1e-4)
    target_layer = clip.visual.transformer.resblocks[-1].ln_1
    with GradCAM(model=theirs_model, target_layers=[target_layer], reshape_transform=reshape_transform) as cam:
        theirs = cam(input_tensor=image[None], targets=[ClassifierOutputTarget(best)])[0]
    mine = _pgc_scaled(ours[LAYER].cam, 224)
    assert theirs.max() > 0
    assert np.corrcoef(mine.ravel(), theirs.ravel())[0, 1] >= 0.999


@pytest.mark.slow  # ~3 s after open_clip's import (~10 s), which a lone run pays
def test_prompts_from_a_file_are_the_classes_and_target_names_one(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS[:2]) + "\n\n")
    result = invoke(
        "run",
        "--model",
        f"open_clip:{ARCH}",
        "--weights",
        "none",
        "--prompts",
        prompts,
        "--prompt",
        PROMPTS[2],
        "--target",
        PROMPTS[1],
        "--topk",
        "3",
        "--pictures",
        "none",
        "--out",
        tmp_path / "out",
        "--device",
        "cpu",
        CAT,
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    # --prompt's texts first, then the file's lines: "a photo of a dog" is class 2
    assert report["target"]["name"] == PROMPTS[1] and report["target"]["index"] == 2
    assert sorted(score["name"] for score in report["top5"]) == sorted(PROMPTS)
    assert sum(score["probability"] for score in report["top5"]) == pytest.approx(1.0, abs=1e-5)
    assert report["declared_layout"]["prefix"] == 1
    assert "WARNING" not in result.stderr  # open_clip's "No pretrained weights loaded" is hookviz's to say


@pytest.mark.slow  # open_clip's import
def test_default_weights_missing_offline_name_the_cache_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    result = invoke(
        "run",
        "--model",
        f"open_clip:{ARCH.replace('S', 'B')}",
        "--prompt",
        "a cat",
        "--out",
        tmp_path / "out",
        "--device",
        "cpu",
        CAT,
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        "hookviz: error: --weights DEFAULT: timm/vit_base_patch32_clip_224.openai "
        f"is not in the Hugging Face cache ({tmp_path / 'hub'})"
    )
    assert result.stderr.count("\n") == 1


def _missing_open_clip(monkeypatch):
    monkeypatch.setattr("hookviz.models.sources.open_clip_models._installed", lambda: False)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--model", "tests.conftest:tiny_net", "--prompt", "a cat"],
            "--prompt a cat: tests.conftest:tiny_net has no text tower; text prompts explain CLIP and SigLIP models",
        ),
        (
            ["--model", "open_clip:ViT-S-32"],
            "--model open_clip:ViT-S-32: a CLIP model is explained by text prompts; pass --prompt TEXT (repeatable) "
            "or --prompts FILE (one a line)",
        ),
        (["--model", "open_clip:ViT-S-32", "--prompts", "EMPTY"], "--prompts EMPTY: the file holds no prompt"),
        (["--model", "open_clip:ViT-S-32", "--prompts", "MISSING"], "--prompts MISSING: no such file"),
        (["--model", "open_clip:ViT-S-32", "--prompt", "  "], "--prompt '  ': a prompt is a non-empty text"),
        (
            ["--model", "open_clip:ViT-S-32", "--prompt", "a cat", "UNINSTALLED"],
            "--model open_clip:ViT-S-32 needs open_clip: pip install 'hookviz[clip]'",
        ),
    ],
    ids=["no-text-tower", "no-prompts", "empty-file", "missing-file", "blank-prompt", "not-installed"],
)
def test_bad_prompts_are_refused_in_one_line(args, line, tmp_path, monkeypatch):
    empty, missing = tmp_path / "empty.txt", tmp_path / "missing.txt"
    empty.write_text("\n  \n")
    if "UNINSTALLED" in args:
        _missing_open_clip(monkeypatch)
        args = [a for a in args if a != "UNINSTALLED"]
    args = [str(empty) if a == "EMPTY" else str(missing) if a == "MISSING" else a for a in args]
    line = line.replace("EMPTY", str(empty)).replace("MISSING", str(missing))
    result = invoke(
        "run", *args, "--weights", "none", CAT, "--out", tmp_path / "out", "--device", "cpu", "--crop", "64", "--resize", "64"
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"hookviz: error: {line}")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def _run_prompts(tmp_path, *prompts, skip=True):
    args = [f"--prompt={text}" for text in prompts]
    return invoke(
        "run", "--model", f"open_clip:{ARCH}", "--weights", "none", *args, "--pictures", "none",
        "--out", tmp_path / "out", "--device", "cpu", *(["--skip-existing"] if skip else []), CAT,
    )  # fmt: skip


@pytest.mark.slow  # open_clip's import, three loads
def test_skip_existing_redoes_a_photo_explained_with_other_prompts(tmp_path):
    report = tmp_path / "out" / "cat" / "report.json"
    assert _run_prompts(tmp_path, *PROMPTS[:2], skip=False).exit_code == 0
    assert json.loads(report.read_text())["asked"]["prompts"] == PROMPTS[:2]
    # a time of its own, not the clock's: a rewrite within the file system's time step would read as kept
    os.utime(report, ns=(PLANTED_NS, PLANTED_NS))
    same = _run_prompts(tmp_path, *PROMPTS[:2])
    assert same.exit_code == 0, same.output
    assert report.stat().st_mtime_ns == PLANTED_NS  # the same prompts: skipped
    other = _run_prompts(tmp_path, PROMPTS[0], PROMPTS[2])
    assert other.exit_code == 0, other.output
    document = json.loads(report.read_text())
    assert document["asked"]["prompts"] == [PROMPTS[0], PROMPTS[2]]  # other prompts: redone
    assert sorted(score["name"] for score in document["top5"]) == sorted([PROMPTS[0], PROMPTS[2]])
    del document["asked"]["prompts"]  # as an older hookviz wrote it: the prompts are unknown
    report.write_text(json.dumps(document))
    os.utime(report, ns=(PLANTED_NS, PLANTED_NS))
    assert _run_prompts(tmp_path, PROMPTS[0], PROMPTS[2]).exit_code == 0
    assert json.loads(report.read_text())["asked"]["prompts"] == [PROMPTS[0], PROMPTS[2]]
    assert report.stat().st_mtime_ns != PLANTED_NS  # redone


@pytest.mark.slow  # open_clip's import and model
def test_explain_takes_a_clip_models_name_with_its_prompts():
    image = torch.randint(0, 256, (3, 96, 96), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    result = explain(f"open_clip:{ARCH}", image, weights="none", prompts=PROMPTS, target=PROMPTS[2], layers=[LAYER])
    assert result.target.name == PROMPTS[2] and sorted(s.name for s in result.top5) == sorted(PROMPTS)
    assert result.prompts == tuple(PROMPTS)
    assert np.isfinite(result[LAYER].cam).all()


@pytest.mark.parametrize(
    "kwargs, line",
    [
        (  # the arguments explain has, not the command's
            {},
            f"model='open_clip:{ARCH}': a CLIP model is explained by text prompts; pass prompts=['TEXT', ...] "
            "(hookviz.options.read_prompts(path) reads a file of them, one a line)",
        ),
        (
            {"model": torch.nn.Conv2d(3, 3, 1), "prompts": ["a cat"]},
            "prompts=['a cat']: the model is built already; pass its name",
        ),
        (  # it named the command's --model open_clip:ARCH
            {"model": "resnet18", "prompts": ["a cat"]},
            "prompts='a cat': resnet18 has no text tower; text prompts explain CLIP and SigLIP models "
            "(model='open_clip:ARCH', or an hf: CLIPModel or SiglipModel); drop prompts",
        ),
    ],
)
def test_explain_refuses_prompts_it_cannot_use_in_one_line(kwargs, line):
    from hookviz.errors import UsageError

    kwargs = {"model": f"open_clip:{ARCH}", "weights": "none", **kwargs}
    with pytest.raises(UsageError) as caught:
        explain(kwargs.pop("model"), torch.zeros(3, 64, 64), **kwargs)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


#: A SigLIP-style config small enough to build in a test: a ``logit_bias`` as open_clip's SigLIP
#: configs have (``init_logit_bias``); its name has no "siglip", which would make open_clip
#: fetch SigLIP's tokenizer, so the bundled CLIP tokenizer stands in.
TINY_SIGMOID = {
    "embed_dim": 32,
    "init_logit_bias": -10,
    "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture
def tiny_sigmoid(monkeypatch):
    """``open_clip:hookviz-tiny-sigmoid``, registered with open_clip for the test only."""
    import open_clip.factory

    monkeypatch.setitem(open_clip.factory._MODEL_CONFIGS, "hookviz-tiny-sigmoid", TINY_SIGMOID)
    return "open_clip:hookviz-tiny-sigmoid"


@pytest.mark.slow  # open_clip's import (~5-10 s); the model itself builds in 0.1 s
def test_a_siglip_models_probabilities_are_sigmoids(tiny_sigmoid, tmp_path):
    prompts = [f"--prompt={text}" for text in PROMPTS]
    out = tmp_path / "out"
    result = invoke(
        "run", "--model", tiny_sigmoid, "--weights", "none", *prompts, "--pictures", "none",
        "--out", out, "--device", "cpu", CAT,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert len(report["top5"]) == 3
    for score in report["top5"]:  # each prompt on its own, as SigLIP is trained
        assert score["probability"] == pytest.approx(float(torch.tensor(score["score"]).sigmoid()), rel=1e-5)
    assert sum(score["probability"] for score in report["top5"]) < 0.5  # a logit_bias of -10: not a softmax


def _run_sigmoid(model, out, *extra):
    prompts = [f"--prompt=a photo of a {thing}" for thing in ("cat", "dog", "car", "bird", "boat", "tree", "cup")]
    return invoke(
        "run", "--model", model, "--weights", "none", *prompts, "--pictures", "none", "--layer", "visual.conv1",
        "--out", out, "--device", "cpu", *extra, CAT,
    )  # fmt: skip


@pytest.mark.slow  # open_clip's import
def test_diff_makes_a_siglips_probability_from_its_logits_as_sigmoids(tiny_sigmoid, tmp_path):
    new = _run_sigmoid(tiny_sigmoid, tmp_path / "new")
    assert new.exit_code == 0, new.output
    report = json.loads((tmp_path / "new" / "cat" / "report.json").read_text())
    assert report["prediction"]["probabilities"] == "sigmoid"
    shown = {score["name"] for score in report["top5"]}
    outside = next(
        f"a photo of a {t}" for t in ("cat", "dog", "car", "bird", "boat", "tree", "cup") if f"a photo of a {t}" not in shown
    )
    # The same model and photo, explained for a prompt the new run's top-5 lacks: the diff
    # reads its probability from the new run's logits, which must give the baseline's own.
    base = _run_sigmoid(tiny_sigmoid, tmp_path / "base", "--target", outside)
    assert base.exit_code == 0, base.output
    result = invoke("diff", tmp_path / "base", tmp_path / "new", "--pictures", "none", "--out", tmp_path / "diff.json")
    assert result.exit_code == 0, result.output
    (image,) = json.loads((tmp_path / "diff.json").read_text())["images"]
    assert image["target"]["before"]["name"] == outside
    assert image["probability_change"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow  # open_clip's import
def test_layers_lists_the_image_tower_without_prompts_and_run_takes_its_paths(tiny_sigmoid, tmp_path):
    """It asked for prompts: listing a CLIP model's layers needs none."""
    listed = invoke("layers", "--model", tiny_sigmoid, "--filter", "resblocks.1.ln_1")
    assert listed.exit_code == 0, listed.output
    (path,) = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert path == "visual.transformer.resblocks.1.ln_1"
    out = tmp_path / "out"
    ran = invoke(
        "run", "--model", tiny_sigmoid, "--weights", "none", "--prompt", "a cat", "--prompt", "a dog", "--layer", path,
        "--pictures", "none", "--out", out, "--device", "cpu", CAT,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert [layer["name"] for layer in report["layers"]] == [path]


@pytest.mark.slow  # open_clip's import
def test_a_prompt_longer_than_the_context_length_is_scored_cut_and_said_once(tiny_sigmoid, tmp_path):
    """It was cut to the tokenizer's context length (here 16 tokens, CLIP's 77) without a word."""
    out, long = tmp_path / "out", "a photo of a cat " * 5  # 25 words, each one token of CLIP's BPE
    result = invoke(
        "run", "--model", tiny_sigmoid, "--weights", "none", "--prompt", "a dog", "--prompt", long,
        "--pictures", "none", "--layer", "visual.conv1", "--out", out, "--device", "cpu", CAT,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (note,) = json.loads((out / "cat" / "report.json").read_text())["notes"]
    assert note == (
        "--prompt: prompt 2 ('a photo of a cat a photo of a cat a pho…') is 27 tokens, more than the 16 the model's "
        "text tower takes: it is scored on its first 16 tokens only; shorten it to be scored as written"
    )
    assert [line for line in result.stderr.splitlines() if "note:" in line] == [f"hookviz: note: {note}"]


#: TINY_SIGMOID without its logit_bias: a CLIP, whose probabilities are a softmax over the prompts.
TINY_SOFTMAX = {key: value for key, value in TINY_SIGMOID.items() if key != "init_logit_bias"}


@pytest.fixture
def tiny_softmax(monkeypatch):
    """``open_clip:hookviz-tiny-softmax``, registered with open_clip for the test only."""
    import open_clip.factory

    monkeypatch.setitem(open_clip.factory._MODEL_CONFIGS, "hookviz-tiny-softmax", TINY_SOFTMAX)
    return "open_clip:hookviz-tiny-softmax"


@pytest.mark.slow  # open_clip's import
@pytest.mark.parametrize("kind", ["softmax", "sigmoid"])
def test_one_prompt_keeps_the_probabilities_the_model_declares(kind, tiny_softmax, tiny_sigmoid, tmp_path):
    """`--prompt "a photo of a cat"` alone was scored as a binary classifier's one logit:
    probabilities sigmoid, 0.523. A CLIP's softmax over one prompt is 1.0, said to rank nothing."""
    model = tiny_softmax if kind == "softmax" else tiny_sigmoid
    out = tmp_path / "out"
    result = invoke(
        "run", "--model", model, "--weights", "none", "--prompt", "a photo of a cat", "--pictures", "none",
        "--layer", "visual.conv1", "--out", out, "--device", "cpu", CAT,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["prediction"]["probabilities"] == kind
    notes = [line for line in result.stderr.splitlines() if "note:" in line]
    if kind == "softmax":
        assert report["target"]["probability"] == 1.0
        (note,) = report["notes"]
        assert note.startswith("--prompt: prompt 1 ('a photo of a cat') is the only prompt: one prompt cannot rank")
        assert notes == [f"hookviz: note: {note}"]
    else:  # a SigLIP scores each prompt on its own: one as well as several
        assert report["target"]["probability"] < 0.01  # its logit_bias of -10
        assert report["notes"] == [] and notes == []


@pytest.mark.slow  # open_clip's import
def test_prompts_that_differ_only_in_case_are_refused_naming_both(tiny_softmax, tmp_path):
    """open_clip's tokenizer lowercases: 'a cat' and 'A cat' were two classes that always tied."""
    result = invoke(
        "run", "--model", tiny_softmax, "--weights", "none", "--prompt", "a dog", "--prompt", "a cat",
        "--prompt", "A  Cat", "--out", tmp_path / "out", "--device", "cpu", CAT,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "hookviz: error: --prompt: prompt 2 ('a cat') and --prompt: prompt 3 ('A  Cat') are one prompt to the model's "
        "tokenizer (the same tokens: it does not tell them apart, by case or past its length), so their classes "
        "would always tie; give it once\n"
    )
    assert not (tmp_path / "out").exists()
