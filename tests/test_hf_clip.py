"""transformers' CLIP and SigLIP checkpoints as ``hf:FOLDER`` with text prompts: tiny models
built from configs, saved with a tokenizer built here from a hand-written vocabulary (no
sentencepiece: the SigLIP folder carries a CLIP tokenizer, which its AutoTokenizer reads as
any other); the hub is switched off throughout."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hookviz import explain, load_model

from .cli_helpers import hookviz_cli
from .conftest import SAMPLES, hub_snapshot

transformers = pytest.importorskip("transformers")

CAT = SAMPLES / "cat.png"
PROMPTS = ["a photo of a cat", "a photo of a dog", "a car"]
SIZE, PATCH = 32, 8
GRID = SIZE // PATCH
LAYER = "vision_model.encoder.layers.1.layer_norm1"


def invoke(*args):
    return hookviz_cli(*args)


def _tokenizer():
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for letter in "abcdefghijklmnopqrstuvwxyz0123456789":
        vocab[letter] = len(vocab)
        vocab[letter + "</w>"] = len(vocab)
    return transformers.CLIPTokenizer(vocab=vocab, merges=[]), len(vocab)


def _configs(vocab_size: int):
    text = {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 24,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 1,
    }
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": SIZE,
        "patch_size": PATCH,
    }
    return text, vision


def _folder(tmp_path, kind: str, tokenizer: bool = True):
    """A ``CLIPModel`` or ``SiglipModel`` saved with save_pretrained, its image processor and
    (unless not ``tokenizer``) its tokenizer; returns (folder, model, tokenizer)."""
    tok, vocab_size = _tokenizer()
    text, vision = _configs(vocab_size)
    torch.manual_seed(0)
    if kind == "clip":
        model = transformers.CLIPModel(transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
        processor = transformers.CLIPImageProcessor(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE})
    else:
        model = transformers.SiglipModel(transformers.SiglipConfig(text_config=text, vision_config=vision))
        with torch.no_grad():  # transformers initialises the bias at 0: a shift the test can see
            model.logit_bias.fill_(-1.5)
        processor = transformers.SiglipImageProcessor(size={"height": SIZE, "width": SIZE})
    folder = tmp_path / kind
    model.eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    if tokenizer:
        tok.save_pretrained(folder)
    return folder, model, tok


def _logits_per_image(model, tok, kind: str, image: torch.Tensor) -> torch.Tensor:
    """transformers' own: ``model(**inputs).logits_per_image``, the prompts padded as its model card pads them."""
    padding = "max_length" if kind == "siglip" else True
    inputs = tok(PROMPTS, padding=padding, max_length=24, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return model(pixel_values=image, **inputs).logits_per_image


def reshape_transform(tensor, height=GRID, width=GRID):
    """pytorch-grad-cam's ViT/CLIP example's reshape_transform: drop the class token, grid, NCHW."""
    result = tensor[:, 1:, :].reshape(tensor.size(0), height, width, tensor.size(2))
    return result.transpose(2, 3).transpose(1, 2)


class LogitsPerImage(torch.nn.Module):
    """pytorch-grad-cam's Hugging Face CLIP example: the model's ``logits_per_image``."""

    def __init__(self, model, inputs):
        super().__init__()
        self.model, self.inputs = model, inputs

    def forward(self, image):
        return self.model(pixel_values=image, **self.inputs).logits_per_image


def _pgc_scaled(cam: np.ndarray, size: int) -> np.ndarray:
    cam = cam - cam.min()
    cam = cam / (1e-7 + cam.max())
    return F.interpolate(torch.from_numpy(cam)[None, None].float(), size=(size, size), mode="bilinear")[0, 0].numpy()


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_run_explains_a_folder_over_its_prompts(kind, tmp_path, hub_cache):
    folder, model, tok = _folder(tmp_path, kind)
    result = invoke(
        "run",
        "--model",
        f"hf:{folder}",
        "--weights",
        "DEFAULT",
        *[a for p in PROMPTS for a in ("--prompt", p)],
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
    assert sorted(score["name"] for score in report["top5"]) == sorted(PROMPTS)
    assert report["layers"][0]["name"] == LAYER
    assert report["declared_layout"]["prefix"] == (1 if kind == "clip" else 0)
    total = sum(score["probability"] for score in report["top5"])
    if kind == "clip":
        assert total == pytest.approx(1.0, abs=1e-5)
    else:  # sigmoids, each prompt on its own
        scores = torch.tensor([score["score"] for score in report["top5"]])
        assert [s["probability"] for s in report["top5"]] == pytest.approx(scores.sigmoid().tolist(), rel=1e-5)
        assert total != pytest.approx(1.0, abs=1e-3)
    target = report["target"]
    assert f"target {target['name']}; top-5: {target['name']} {target['probability']:.3f}" in result.stdout


def test_faithfulness_follows_a_siglips_sigmoid(tmp_path, hub_cache):
    from hookviz.explaining.explainer import Explainer
    from hookviz.tasks.base import ClassScore

    folder, model, tok = _folder(tmp_path, "siglip")
    explainer = Explainer.create(load_model(f"hf:{folder}", prompts=PROMPTS))
    image = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))
    theirs = _logits_per_image(model, tok, "siglip", image)
    targets = [ClassScore(1, PROMPTS[1], 0.0, 0.0), ClassScore(2, PROMPTS[2], 0.0, 0.0)]
    scorer = explainer.task.probability_scorer(targets, explainer.target, explainer.task_options)
    with torch.no_grad():
        scores = scorer(explainer.model.module(image), torch.arange(2))
    assert torch.allclose(scores, torch.stack([theirs[0, 1], theirs[1, 2]]).sigmoid(), atol=1e-6)


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_logits_and_probabilities_are_the_models_own(kind, tmp_path, hub_cache):
    folder, model, tok = _folder(tmp_path, kind)
    loaded = load_model(f"hf:{folder}", prompts=PROMPTS)
    assert loaded.categories == tuple(PROMPTS) and loaded.input_size == (SIZE, SIZE)
    image = torch.randn(3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    theirs = _logits_per_image(model, tok, kind, image[None])[0]
    with torch.no_grad():
        assert torch.allclose(loaded.module(image[None])[0], theirs, atol=1e-6)
    ours = explain(loaded, image)
    best = int(theirs.argmax())
    probabilities = theirs.sigmoid() if kind == "siglip" else theirs.softmax(0)
    assert ours.target.index == best and ours.target.name == PROMPTS[best]
    assert ours.target.logit == pytest.approx(float(theirs[best]), rel=1e-5)
    assert [s.probability for s in ours.top5] == pytest.approx([float(probabilities[s.index]) for s in ours.top5], rel=1e-5)


def test_a_cached_repository_loads_as_its_folder_does(tmp_path, hub_cache):
    folder, model, tok = _folder(tmp_path, "clip")
    snapshot = hub_snapshot(hub_cache, "hookviz-test/tiny-clip")
    for path in folder.iterdir():
        (snapshot / path.name).write_bytes(path.read_bytes())
    loaded = load_model("hf:hookviz-test/tiny-clip", prompts=PROMPTS)
    assert loaded.weights == "DEFAULT (hookviz-test/tiny-clip, Hugging Face cache)"
    image = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.allclose(loaded.module(image), _logits_per_image(model, tok, "clip", image), atol=1e-6)
    random = load_model("hf:hookviz-test/tiny-clip", "none", seed=1, prompts=PROMPTS)
    assert random.weights == "none (random init, seed 1)" and random.categories == tuple(PROMPTS)
    with torch.no_grad():
        assert not torch.allclose(random.module(image), loaded.module(image))


def test_clip_cam_equals_pytorch_grad_cams_clip_example(tmp_path, hub_cache):
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    folder, model, tok = _folder(tmp_path, "clip")
    loaded = load_model(f"hf:{folder}", prompts=PROMPTS)
    image = torch.randn(3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    inputs = tok(PROMPTS, padding=True, return_tensors="pt")
    theirs_model = LogitsPerImage(model, inputs).eval()
    with torch.no_grad():
        best = int(theirs_model(image[None])[0].argmax())
    ours = explain(loaded, image)
    assert ours.layers[0].name == LAYER and ours.target.index == best
    target_layer = model.vision_model.encoder.layers[-1].layer_norm1
    with GradCAM(model=theirs_model, target_layers=[target_layer], reshape_transform=reshape_transform) as cam:
        theirs = cam(input_tensor=image[None], targets=[ClassifierOutputTarget(best)])[0]
    mine = _pgc_scaled(ours[LAYER].cam, SIZE)
    assert theirs.max() > 0
    assert np.corrcoef(mine.ravel(), theirs.ravel())[0, 1] >= 0.999


def _one_line_error(result, line: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("hookviz: error: " + line), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def _run(tmp_path, model: str, *args):
    return invoke("run", "--model", model, *args, "--out", tmp_path / "out", "--device", "cpu", CAT)


def test_a_folder_without_tokenizer_is_refused_in_one_line(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "clip", tokenizer=False)
    result = _run(tmp_path, f"hf:{folder}", "--prompt", "a cat")
    _one_line_error(result, f"--model hf:{folder}: {folder} has no tokenizer (none of tokenizer.json, vocab.json")
    assert not (tmp_path / "out").exists()


def test_a_clip_folder_without_prompts_names_the_options(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "siglip")
    result = _run(tmp_path, f"hf:{folder}")
    _one_line_error(
        result,
        f"--model hf:{folder}: a SigLIP model is explained by text prompts; pass --prompt TEXT (repeatable) "
        "or --prompts FILE (one a line)",
    )


def test_a_clip_folder_without_prompts_names_explains_arguments_from_python(tmp_path, hub_cache):
    from hookviz.errors import UsageError

    folder, _, _ = _folder(tmp_path, "clip")
    with pytest.raises(UsageError) as caught:
        explain(f"hf:{folder}", torch.zeros(3, 32, 32), weights="none")
    assert str(caught.value) == (
        f"model='hf:{folder}': a CLIP model is explained by text prompts; pass prompts=['TEXT', ...] "
        "(hookviz.options.read_prompts(path) reads a file of them, one a line)"
    )


def test_prompts_for_an_image_classifier_are_refused_in_one_line(tmp_path, hub_cache):
    config = transformers.ViTConfig(
        image_size=SIZE, patch_size=PATCH, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    folder = tmp_path / "vit"
    transformers.ViTForImageClassification(config).save_pretrained(folder)
    result = _run(tmp_path, f"hf:{folder}", "--prompt", "a cat")
    _one_line_error(result, f"--prompt a cat: hf:{folder} has no text tower; text prompts explain CLIP and SigLIP models")


def test_a_tokenizer_naming_its_own_code_is_refused(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "clip")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["hookviz_custom.Tokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    result = _run(tmp_path, f"hf:{folder}", "--prompt", "a cat")
    _one_line_error(result, f"--model hf:{folder}: {folder} needs its own Python code (auto_map in tokenizer_config.json)")


# ----------------------------------------------------------------------------- found by a hostile user


def test_a_prompts_file_saved_with_a_byte_order_mark_names_its_first_prompt_as_written(tmp_path, hub_cache):
    """Notepad's UTF-8 starts with a BOM: it was kept in the first prompt, which --target then never matched."""
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes("a photo of a cat\r\na car\r\n".encode("utf-8-sig"))
    result = _run(tmp_path, f"hf:{folder}", "--prompts", prompts, "--target", "a photo of a cat", "--pictures", "none")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    assert report["target"]["name"] == "a photo of a cat"
    assert sorted(score["name"] for score in report["top5"]) == ["a car", "a photo of a cat"]


@pytest.mark.parametrize(
    "lines, line",
    [
        # A prompt is a class: twice, it split its probability and --target matched two classes.
        ("a cat\n\na dog\n  a cat\n", "--prompts PROMPTS: line 4 ('a cat') repeats line 1; give each prompt once"),
        (
            "a dog\r\n\r\na\x00cat\r\n",
            "--prompts PROMPTS: line 3 ('a\\x00cat') holds a control character; a prompt is one line of text",
        ),
        ("a dog\na\x0ccat\n", "--prompts PROMPTS: line 2 ('a\\x0ccat') holds a control character"),
    ],
)
def test_a_prompt_given_twice_or_with_control_characters_is_refused_in_one_line(tmp_path, hub_cache, lines, line):
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(lines.encode())
    _one_line_error(_run(tmp_path, f"hf:{folder}", "--prompts", prompts), line.replace("PROMPTS", str(prompts)))
    assert not (tmp_path / "out").exists()


def test_prompts_in_any_script_with_emoji_and_joiners_are_classes_as_written(tmp_path, hub_cache):
    """Format characters (a zero-width joiner) and a no-break space are text, not control characters."""
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = ["un chat\u00a0noir", "famille \U0001f468\u200d\U0001f469\u200d\U0001f467", "ネコ"]
    result = explain(f"hf:{folder}", torch.zeros(3, SIZE, SIZE), prompts=prompts, weights="none")
    assert result.prompts == tuple(prompts)


def test_a_tokenizer_config_naming_another_class_is_refused_in_one_line(tmp_path, hub_cache):
    """It loaded, then failed to pad: "hookviz: error: ValueError: Asking to pad ...", naming no file."""
    folder, _, _ = _folder(tmp_path, "clip")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NoSuchTokenizer"}))
    result = _run(tmp_path, f"hf:{folder}", "--prompt", "a cat", "--prompt", "a dog")
    _one_line_error(result, f"--model hf:{folder}: {folder}'s tokenizer cannot tokenize the prompts (")
    assert "save the model's own tokenizer" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_reference_photo_for_a_model_explained_by_prompts_is_refused_in_one_line(tmp_path, hub_cache):
    """It made the model an embedding of its logits over the prompts, and explained their cosine similarity."""
    folder, _, _ = _folder(tmp_path, "clip")
    result = _run(tmp_path, f"hf:{folder}", "--prompt", "a cat", "--prompt", "a dog", "--target-image", CAT)
    _one_line_error(result, f"--target-image: hf:{folder} is explained by its text prompts, one class each; drop --target-image")
    assert not (tmp_path / "out").exists()


def test_a_prompts_file_that_never_ends_is_refused_in_one_line(tmp_path, hub_cache, monkeypatch):
    """It was read whole: ``--prompts /dev/zero`` filled the memory. Here a limit of 1 KiB stands
    in for the 64 MiB one, and a 2 KiB file for the endless one."""
    import hookviz.options.model as model_options

    monkeypatch.setattr(model_options, "MAX_PROMPTS_BYTES", 1024)
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\n" * 400)
    result = _run(tmp_path, f"hf:{folder}", "--prompts", prompts)
    _one_line_error(result, f"--prompts {prompts}: holds more than 1,024 bytes; give a text file with one prompt a line")


# ----------------------------------------------------------------------------- listing, long prompts, several files


def _listed_paths(output: str) -> list[str]:
    return [line.split()[0] for line in output.splitlines()[1:] if line.strip()]


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_layers_lists_the_image_tower_without_prompts_and_run_takes_its_paths(kind, tmp_path, hub_cache):
    """It asked for prompts: listing a CLIP model's layers needs none."""
    folder, _, _ = _folder(tmp_path, kind)
    listed = invoke("layers", "--model", f"hf:{folder}", "--filter", "layers.0.mlp.fc1")
    assert listed.exit_code == 0, listed.output
    (path,) = _listed_paths(listed.stdout)
    assert path == "vision_model.encoder.layers.0.mlp.fc1"
    ran = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "a cat", "--prompt", "a dog", "--layer", path)
    assert ran.exit_code == 0, ran.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    assert [layer["name"] for layer in report["layers"]] == [path]


def test_layers_lists_the_same_paths_with_prompts_or_without(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "clip")
    without = invoke("layers", "--model", f"hf:{folder}")
    given = invoke("layers", "--model", f"hf:{folder}", "--prompt", "a cat", "--prompt", "a dog")
    assert without.exit_code == 0 and given.exit_code == 0, without.output + given.output
    assert _listed_paths(without.stdout) == _listed_paths(given.stdout)
    assert "vision_model.encoder.layers.1.layer_norm1" in _listed_paths(without.stdout)


def test_a_prompt_longer_than_the_text_tower_takes_is_scored_cut_and_said_once(tmp_path, hub_cache):
    """It was cut to the tokenizer's limit (here 24 tokens, CLIP's 77) without a word."""
    folder, _, _ = _folder(tmp_path, "clip")
    long, longer = "a cat " * 10, "a photo of a dog " * 10
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", long, "--prompt", "a car", "--prompt", longer)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("hookviz: note: ")]
    assert len(notes) == 1, result.stderr
    (note,) = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["notes"]
    assert notes[0] == "hookviz: note: " + note
    # 'a', then 'c', 'a', 't': the test's tokenizer knows letters; 40 of them, and its start and end
    assert note == (
        "--prompt: prompt 1 ('a cat a cat a cat a cat a cat a cat a c…') is 42 tokens, more than the 24 the model's "
        "text tower takes: it is scored on its first 24 tokens only; so is 1 other prompt; shorten it to be scored as written"
    )


def test_prompts_within_the_text_towers_length_bring_no_note(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "clip")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "a cat", "--prompt", "a dog", "--pictures", "none")
    assert result.exit_code == 0, result.output
    assert "note:" not in result.stderr
    assert json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["notes"] == []


def test_prompts_files_given_twice_are_all_read_after_the_prompt_texts(tmp_path, hub_cache):
    """The second --prompts replaced the first without a word."""
    folder, _, _ = _folder(tmp_path, "clip")
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("a cat\na dog\n")
    second.write_text("a car\n")
    result = _run(
        tmp_path, f"hf:{folder}", "--weights", "none", "--prompts", first, "--prompt", "a bird", "--prompts", second,
        "--pictures", "none",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    assert report["asked"]["prompts"] == ["a bird", "a cat", "a dog", "a car"]


def test_a_prompt_in_two_prompts_files_is_refused_in_one_line(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "clip")
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_text("a cat\na dog\n")
    second.write_text("a car\na dog\n")
    result = _run(tmp_path, f"hf:{folder}", "--prompts", first, "--prompts", second)
    _one_line_error(result, f"--prompts {second}: line 2 ('a dog') repeats line 2 of {first}; give each prompt once")
    assert not (tmp_path / "out").exists()


def test_a_prompt_in_a_prompts_file_and_given_by_prompt_is_refused_naming_both(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\na dog\n")
    result = _run(tmp_path, f"hf:{folder}", "--prompt", "a dog", "--prompts", prompts)
    _one_line_error(result, f"--prompts {prompts}: line 2 ('a dog') repeats --prompt 'a dog'; give each prompt once")
    assert not (tmp_path / "out").exists()


def test_read_prompts_refuses_a_prompt_twice_naming_the_file_and_line(tmp_path):
    from hookviz.errors import UsageError
    from hookviz.options import read_prompts

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\na dog\na cat\n")
    with pytest.raises(UsageError, match=r"^prompts_file=.*prompts.txt'\): line 3 \('a cat'\) repeats line 1;"):
        read_prompts(prompts)


def test_prompts_that_differ_only_in_case_are_refused_naming_both(tmp_path, hub_cache):
    """CLIP's tokenizer lowercases: prompts 'a Cat' and 'a cat' were two classes that always tied."""
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a dog\na CAT\n")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "a cat", "--prompts", prompts)
    _one_line_error(
        result,
        f"--prompt: prompt 1 ('a cat') and --prompts {prompts}: line 2 ('a CAT') are one prompt to the model's "
        "tokenizer (the same tokens",
    )
    assert "their classes would always tie; give it once" in result.stderr
    assert not (tmp_path / "out").exists()


def test_target_names_the_class_written_as_it_is_before_one_in_another_case():
    """Classes 'a Cat' and 'a cat' of a model that tells them apart: --target 'a cat' took the first."""
    from hookviz.errors import UsageError

    from .conftest import TinyNet

    names = ["a Cat", "a cat", "a dog", "a car", "a cup"]
    image = torch.zeros(3, 16, 16)
    assert explain(TinyNet(), image, categories=names, target="a cat").target.index == 1
    with pytest.raises(UsageError, match=r"names 2 classes written otherwise \('a Cat', 'a cat'\)"):
        explain(TinyNet(), image, categories=names, target="A CAT")


def test_a_target_that_is_one_prompts_text_and_another_prompts_index_is_refused(tmp_path, hub_cache):
    """Prompts '1' and '0' with --target 1 explained class 1, the prompt '0', without a word."""
    folder, _, _ = _folder(tmp_path, "clip")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "1", "--prompt", "0", "--target", "1")
    _one_line_error(result, "--target 1: ambiguous: class 1 is '0', and class 0 is named '1'; rename the class")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_prompts_file_in_utf16_with_its_byte_order_mark_is_read(tmp_path, hub_cache, encoding):
    """Windows PowerShell's `>` writes UTF-16 with a byte-order mark: it was refused as not UTF-8."""
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    bom = "\ufeff" if encoding == "utf-16-be" else ""  # "utf-16" writes its own, in this machine's order
    prompts.write_bytes((bom + "a cat\r\nune tête\r\n").encode(encoding))
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompts", prompts, "--pictures", "none")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["asked"]["prompts"] == ["a cat", "une tête"]


def test_the_prompts_go_through_the_text_tower_in_parts_with_the_same_features(tmp_path, monkeypatch):
    """All prompts went through the text tower at once: 100,000 of them needed tens of GB."""
    from hookviz.models.sources import clip_logits

    monkeypatch.setattr(clip_logits, "TEXT_BATCH", 4, raising=False)
    _, model, tok = _folder(tmp_path, "clip")
    prompts = [f"a {a}{b}" for a in "abc" for b in "xyz"]  # 9 prompts: parts of 4, 4 and 1
    tokens = dict(tok(prompts, padding=True, return_tensors="pt"))
    seen: list[int] = []
    handle = model.text_model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(len(kwargs["input_ids"])), with_kwargs=True
    )
    try:
        wrapper = clip_logits.TransformersClipLogits(model, tokens)
    finally:
        handle.remove()
    assert seen == [4, 4, 1]
    with torch.no_grad():
        whole = model.get_text_features(**tokens)
    whole = getattr(whole, "pooler_output", whole)
    torch.testing.assert_close(wrapper.text_features, whole / whole.norm(dim=-1, keepdim=True), rtol=1e-5, atol=1e-6)


def test_the_same_prompts_file_given_twice_is_refused_naming_the_file(tmp_path, hub_cache):
    """Each of its prompts was refused as given twice, naming --prompt and a prompt, not the file."""
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\na dog\n")
    result = _run(tmp_path, f"hf:{folder}", "--prompts", prompts, "--prompts", tmp_path / "." / "prompts.txt")
    _one_line_error(result, f"--prompts {tmp_path / '.' / 'prompts.txt'}: the same file given twice; give each file once")
    assert not (tmp_path / "out").exists()


def test_a_target_that_is_top_and_a_prompts_text_is_refused(tmp_path, hub_cache):
    """A prompt 'top' (the garment) and --target top explained the best prompt, whichever it was."""
    folder, _, _ = _folder(tmp_path, "clip")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "a skirt", "--prompt", "top", "--target", "top")
    _one_line_error(result, "--target top: ambiguous: the best class, and class 1 is named 'top'; rename the class")
    assert not (tmp_path / "out").exists()


def test_a_long_prompt_is_shortened_where_shown_and_its_note_said_once(tmp_path, hub_cache):
    """A 300-word prompt: each photo's line and each picture's title show its start, not 1,200
    characters (they wrapped over the panels); the note that it is cut to the text tower's
    length is said once per run, and report.json keeps the prompt as given."""
    folder, _, _ = _folder(tmp_path, "clip")
    long = " ".join(["cat"] * 300)
    photos = tmp_path / "photos"
    photos.mkdir()
    for k in range(3):
        (photos / f"p{k}.png").write_bytes(CAT.read_bytes())
    result = invoke(
        "run", "--model", f"hf:{folder}", "--prompt", long, "--prompt", "a dog", "--target", long,
        "--pictures", "none", "--workers", "1", "--out", tmp_path / "out", "--device", "cpu", photos,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert sum("is 902 tokens" in line for line in lines) == 1
    per_photo = [line for line in lines if "top-5:" in line]
    # the prompt's shown part, not the whole line: the line also holds the photo's path, whose
    # length is where pytest keeps its temporary folders (303 characters on a busy machine)
    assert len(per_photo) == 3 and all(_shown_long_prompt(line) for line in per_photo)
    report = json.loads((tmp_path / "out" / "p0" / "report.json").read_text())
    assert report["target"]["name"] == long
    title = explain(f"hf:{folder}", CAT, prompts=[long, "a dog"], target=long).figure()._suptitle.get_text()
    assert _shown_long_prompt(title)  # the title names the model's folder and the photo: paths too


def _shown_long_prompt(text: str) -> bool:
    """Whether each place ``text`` shows the 300-word prompt of "cat"s shows its start only:
    a few words, cut with "…"."""
    shown = re.findall(r"cat(?: cat)+…?", text)  # two words at least: not the photo's name, cat.png
    return bool(shown) and all(part.endswith("…") and len(part) <= 60 for part in shown)


# ----------------------------------------------------------------------------- found in round three (issue 26)


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_one_prompt_keeps_the_probabilities_the_model_declares(kind, tmp_path, hub_cache):
    """A CLIP given one prompt was scored as a binary classifier: probabilities sigmoid, 0.52.
    Its softmax over one prompt is 1.0, and the run says that it ranks nothing; a SigLIP
    scores each prompt on its own, one as well as many."""
    folder, _, _ = _folder(tmp_path, kind)
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "a photo of a cat", "--pictures", "none")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    target = report["target"]
    notes = [line for line in result.stderr.splitlines() if line.startswith("hookviz: note: ")]
    if kind == "clip":
        assert report["prediction"]["probabilities"] == "softmax" and target["probability"] == 1.0
        (note,) = report["notes"]
        assert note.startswith("--prompt: prompt 1 ('a photo of a cat') is the only prompt: one prompt cannot rank")
        assert "the CAMs explain the prompt's logit" in note
        assert notes == [f"hookviz: note: {note}"]
    else:
        assert report["prediction"]["probabilities"] == "sigmoid"
        assert target["probability"] == pytest.approx(float(torch.tensor(target["score"]).sigmoid()), rel=1e-5)
        assert report["notes"] == [] and notes == []


def test_a_long_prompt_from_a_file_is_named_by_its_file_and_line(tmp_path, hub_cache):
    """The note said '--prompt: prompt 3' of a prompt given on line 4 of a --prompts file."""
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a dog\n\na car\n" + "a cat " * 10 + "\n")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "a bird", "--prompts", prompts)
    assert result.exit_code == 0, result.output
    (note,) = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["notes"]
    assert note.startswith(f"--prompts {prompts}: line 4 ('a cat a cat a cat a cat a cat a cat a c…') is 42 tokens")


def test_read_prompts_names_its_file_and_line_in_explains_messages(tmp_path, hub_cache):
    from hookviz.errors import UsageError
    from hookviz.options import read_prompts

    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a dog\na DOG\n")
    with pytest.raises(UsageError) as caught:
        explain(f"hf:{folder}", torch.zeros(3, SIZE, SIZE), prompts=read_prompts(prompts), weights="none")
    assert str(caught.value).startswith(
        f"prompts_file='{prompts}': line 1 ('a dog') and prompts_file='{prompts}': line 2 ('a DOG') are one prompt"
    )


@pytest.mark.parametrize(
    "lines, line",
    [
        ("a dog\n\u200b\n", "--prompts PROMPTS: line 2 ('\\u200b') holds only invisible characters"),
        ("a dog\n\u200b\u2060\ufeff \u3000\n", "--prompts PROMPTS: line 2 ("),
        (
            "a cat\na dog\na\u200b cat\n",
            "--prompts PROMPTS: line 3 ('a\\u200b cat') differs from --prompts PROMPTS: line 1 ('a cat') only in "
            "spacing or invisible characters; give each prompt once",
        ),
        ("a dog\na\u3000\u00a0cat\na cat\n", "--prompts PROMPTS: line 3 ('a cat') differs from --prompts PROMPTS: line 2"),
    ],
    ids=["zero-width-space", "invisible-only", "zero-width-inside", "wide-spaces"],
)
def test_invisible_prompts_and_ones_that_differ_only_invisibly_are_refused(tmp_path, hub_cache, lines, line):
    """A zero-width-space line was a class no picture or message could show."""
    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(lines, encoding="utf-8")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompts", prompts)
    _one_line_error(result, line.replace("PROMPTS", str(prompts)))
    assert not (tmp_path / "out").exists()


def test_an_invisible_prompt_given_by_prompt_is_refused(tmp_path, hub_cache):
    folder, _, _ = _folder(tmp_path, "clip")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompt", "a dog", "--prompt", "\u200b\u200d")
    _one_line_error(result, "--prompt: prompt 2 ('\\u200b\\u200d') holds only invisible characters; a prompt is a visible text")


def _prompts_file(tmp_path, count: int):
    """``count`` prompts the test's tokenizer tells apart, one a line."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"a {x}{y}\n" for x in "abcdefgh" for y in "abcdefgh"[:count]))
    return prompts


def test_many_prompts_say_how_far_their_encoding_got(tmp_path, hub_cache, monkeypatch):
    """Ten thousand prompts went through the text tower for 10 minutes without a word. Here
    parts of 4 prompts stand in for 256, and HOOKVIZ_PROGRESS_EVERY=0 for the 10 s between lines."""
    from hookviz.models.sources import clip_logits

    monkeypatch.setattr(clip_logits, "TEXT_BATCH", 4, raising=False)
    monkeypatch.setenv("HOOKVIZ_PROGRESS_EVERY", "0")
    folder, _, _ = _folder(tmp_path, "clip")
    result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompts", _prompts_file(tmp_path, 1), "--pictures", "none")
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "prompts through the text tower" in line]
    assert [re.sub(r"about .*", "about T left", line) for line in said] == [
        "hookviz: encoding 8 prompts through the text tower: 4 done, about T left"
    ]


def test_a_run_stopped_while_encoding_its_prompts_says_there_is_nothing_to_resume(tmp_path, hub_cache, monkeypatch):
    """Interrupted while its prompts were encoded, a run said "rerun with --skip-existing to
    resume", with nothing to resume. Ctrl-C comes here as the second part is encoded."""
    import os
    import signal

    from hookviz.models.sources import clip_logits

    monkeypatch.setattr(clip_logits, "TEXT_BATCH", 4, raising=False)
    original, parts = clip_logits._text_features, []

    def interrupted(model, tokens):
        parts.append(len(tokens["input_ids"]))
        if len(parts) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # taken in hand by the command's handler, in this thread
        return original(model, tokens)

    monkeypatch.setattr(clip_logits, "_text_features", interrupted)
    folder, _, _ = _folder(tmp_path, "clip")
    handler = signal.getsignal(signal.SIGINT)
    try:
        result = _run(tmp_path, f"hf:{folder}", "--weights", "none", "--prompts", _prompts_file(tmp_path, 2))
    finally:
        signal.signal(signal.SIGINT, handler)  # the command leaves its process ignoring a second Ctrl-C
    assert result.exit_code == 130, result.output
    assert result.stderr.splitlines()[-1] == (
        "hookviz: interrupted while encoding the prompts (4 of 16 through the text tower): stopped before any image "
        "was explained; this run wrote nothing to resume"
    )
    assert "--skip-existing" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow  # a process of its own (~10 s): the render workers' warnings reach only the real stderr
def test_prompts_in_scripts_no_font_here_draws_are_said_once_not_per_glyph(tmp_path, hub_cache):
    """A Japanese and a Hindi prompt printed 37 "Glyph ... missing from font(s) DejaVu Sans"
    warnings and drew empty boxes without a word that would last."""
    import os
    import subprocess
    import sys

    from hookviz.fonts import undrawable

    folder, _, _ = _folder(tmp_path, "clip")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\nネコ बिल्ली\n", encoding="utf-8")
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, "-m", "hookviz", "run", "--model", f"hf:{folder}", "--weights", "none", "--prompts", str(prompts),
         "--target", "ネコ बिल्ली", "--pictures", "cam", "--workers", "1", "--out", str(out), "--device", "cpu", str(CAT)],
        capture_output=True, text=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"}, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "Glyph" not in completed.stderr and "UserWarning" not in completed.stderr, completed.stderr
    assert list(out.glob("cat/*cam*.png"))
    notes = [line for line in completed.stderr.splitlines() if "no font here can draw" in line]
    report = json.loads((out / "cat" / "report.json").read_text(encoding="utf-8"))
    assert report["target"]["name"] == "ネコ बिल्ली"  # kept whole
    missing = undrawable("ネコ बिल्ली")
    if missing:  # as on a machine with DejaVu Sans alone (matplotlib's own)
        assert notes == [
            f"hookviz: note: --prompts {prompts}: line 2 ('ネコ बिल्ली') holds characters no font here can draw "
            f"({' '.join(missing)}): the pictures show empty boxes for them; report.json keeps the prompts whole; "
            "install a font that has them (Noto Sans CJK, Noto Sans Devanagari) for the pictures to show them"
        ]
    else:  # a font that has them is installed: the pictures draw with it
        assert notes == []


def test_prompts_from_a_file_for_a_model_without_text_tower_name_the_file(tmp_path, hub_cache):
    """It said '--prompt a cat: ... drop --prompt' of prompts given by --prompts FILE."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\na dog\n")
    result = _run(tmp_path, "tests.conftest:tiny_net", "--prompts", prompts)
    _one_line_error(result, f"--prompts {prompts}: tests.conftest:tiny_net has no text tower; text prompts explain CLIP")
    assert result.stderr.rstrip().endswith("drop --prompts")
    both = _run(tmp_path, "tests.conftest:tiny_net", "--prompt", "a car", "--prompts", prompts)
    _one_line_error(both, "--prompt a car: tests.conftest:tiny_net has no text tower")
    assert both.stderr.rstrip().endswith("drop --prompt and --prompts")
