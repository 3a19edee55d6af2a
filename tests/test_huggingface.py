"""Hugging Face transformers classifiers as ``hf:ORG/NAME``: tiny models built from configs,
saved into a hub cache the test lays out itself; the hub is switched off throughout."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hookviz import InputOptions, explain
from hookviz.cli import app
from hookviz.errors import UnknownModelError, WeightsError
from hookviz.models.loading import load_model

from .cli_helpers import hookviz_cli, hookviz_run
from .conftest import SAMPLES, hub_snapshot

transformers = pytest.importorskip("transformers")

REPO = "hookviz-test/tiny-vit"
LABELS = {0: "cat", 1: "dog", 2: "tabby, tabby cat"}


def _tiny_vit():
    config = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    torch.manual_seed(0)
    return transformers.ViTForImageClassification(config).eval()


def _save(folder, model, processor=None):
    model.save_pretrained(folder)
    (
        processor or transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    ).save_pretrained(folder)


@pytest.fixture
def cached_vit(hub_cache):
    model = _tiny_vit()
    _save(hub_snapshot(hub_cache, REPO), model)
    return model


def test_default_weights_come_from_the_hub_cache(cached_vit, hub_cache):
    loaded = load_model(f"hf:{REPO}")
    for name, value in cached_vit.state_dict().items():
        assert torch.equal(loaded.module.state_dict()[name], value), name
    assert loaded.weights == f"DEFAULT ({REPO}, Hugging Face cache)"
    assert loaded.categories == ("cat", "dog", "tabby, tabby cat")
    processing = loaded.preprocessing
    assert (processing.size, processing.crop, processing.mean, processing.interpolation) == (32, False, (0.5,) * 3, "bilinear")
    assert not loaded.module.training and loaded.module.dtype == torch.float32


def test_none_is_built_from_the_config_seeded_without_moving_the_callers_stream(cached_vit):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = load_model(f"hf:{REPO}", "none", seed=1).module.classifier.weight
    assert torch.equal(torch.rand(3), expected)
    b = load_model(f"hf:{REPO}", "none", seed=1).module.classifier.weight
    c = load_model(f"hf:{REPO}", "none", seed=2).module.classifier.weight
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a, cached_vit.classifier.weight)


def test_a_state_dict_file_loads_into_the_model(cached_vit, tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "finetuned.safetensors"
    torch.manual_seed(5)
    state = {k: torch.randn_like(v) for k, v in cached_vit.state_dict().items()}
    save_file(state, str(path))
    loaded = load_model(f"hf:{REPO}", str(path))
    assert torch.equal(loaded.module.classifier.weight, state["classifier.weight"])


def test_offline_and_not_cached_fails_in_one_line_naming_the_cache(hub_cache):
    with pytest.raises(WeightsError) as error:
        load_model("hf:google/vit-base-patch16-224")
    message = str(error.value)
    assert message.startswith(
        f"weights='DEFAULT': google/vit-base-patch16-224 is not in the Hugging Face cache ({hub_cache}) and HF_HUB_OFFLINE is set;"
    )
    assert "\n" not in message and message.endswith(
        "or pass weights='PATH' (a state_dict or .safetensors file) or weights='none'"
    )
    # Random weights still need the config.
    with pytest.raises(WeightsError) as error:
        load_model("hf:google/vit-base-patch16-224", "none")
    assert str(error.value).startswith("model='hf:google/vit-base-patch16-224': google/vit-base-patch16-224 is not in")
    assert str(error.value).endswith("as hookviz needs its config.json with any weights")


def test_a_folder_saved_with_save_pretrained_loads_too(tmp_path, hub_cache):
    model = _tiny_vit()
    _save(tmp_path / "my-vit", model)
    loaded = load_model(f"hf:{tmp_path / 'my-vit'}")
    assert torch.equal(loaded.module.classifier.weight, model.classifier.weight)
    assert "folder" in loaded.weights


def test_a_model_that_is_no_image_classifier_is_refused_in_one_line(hub_cache):
    config = transformers.BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8)
    config.save_pretrained(hub_snapshot(hub_cache, "hookviz-test/bert"))
    with pytest.raises(UnknownModelError, match="'bert' model, which transformers has no image classifier for"):
        load_model("hf:hookviz-test/bert")


def test_without_transformers_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UnknownModelError, match=r"needs transformers: pip install 'hookviz\[hf\]'"):
        load_model(f"hf:{REPO}")


def test_preprocessing_matches_the_image_processor(cached_vit, hub_cache):
    from PIL import Image

    from hookviz.inputs.images import load_image, prepare

    loaded = load_model(f"hf:{REPO}")
    processor = transformers.AutoImageProcessor.from_pretrained(str(hub_snapshot(hub_cache, REPO)))
    theirs = processor(images=Image.open(SAMPLES / "cat.png").convert("RGB"), return_tensors="pt")["pixel_values"][0]
    ours = prepare(load_image(SAMPLES / "cat.png"), loaded.preprocessing).tensor
    assert ours.shape == theirs.shape == (3, 32, 32)
    difference = (ours - theirs).abs()
    assert difference.mean() < 0.02, difference.mean()  # two resizers of the same filter: a level or two apart


def test_run_explains_the_last_blocks_first_norm_on_the_declared_grid(cached_vit, tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(
        SAMPLES / "cat.png",
        "--target",
        "tabby",
        "--device",
        "cpu",
        model=f"hf:{REPO}",
        weights=None,
        out=out,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "no --layer given: using vit.layers.1.layernorm_before (LayerNorm), the first norm" in result.stderr
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["target"]["name"] == "tabby, tabby cat"
    assert report["declared_layout"]["prefix"] == 1
    layer = report["layers"][0]
    assert layer["layout"] == {"kind": "tokens", "prefix": 1, "grid": [4, 4], "basis": "declared"}
    assert layer["cam"]["shape"] == [4, 4] and layer["cam"]["nonfinite"] == 0
    assert all(layer["pictures"][kind] for kind in ("summary", "channels", "cam"))


def test_a_distilled_deit_drops_both_of_its_tokens():
    config = transformers.DeiTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=4,
    )
    torch.manual_seed(0)
    model = transformers.DeiTForImageClassificationWithTeacher(config).eval()
    result = explain(model, torch.randn(3, 32, 32), target=1, inputs=InputOptions(resize=32, crop=32))
    layer = result.layers[0]
    assert layer.name.endswith("layers.1.layernorm_before")
    assert layer.output.shape == (1, 2 + 16, 32)
    assert layer.layout.prefix == 2 and layer.layout.declared and layer.cam.shape == (4, 4)
    assert np.isfinite(layer.cam).all() and layer.cam.max() > 0


def test_a_swin_is_explained_at_its_last_blocks_first_norm():
    config = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4, num_labels=4
    )
    torch.manual_seed(0)
    model = transformers.SwinForImageClassification(config).eval()
    result = explain(model, torch.randn(3, 32, 32), target=1, inputs=InputOptions(resize=32, crop=32))
    layer = result.layers[0]
    assert layer.name.endswith("layers.1.blocks.0.layernorm_before")
    assert layer.output.shape == (1, 16, 32) and layer.cam.shape == (4, 4)
    assert np.isfinite(layer.cam).all()


def test_layers_and_models_list_a_cached_classifier(cached_vit):
    cli = CliRunner()
    result = cli.invoke(app, ["layers", "--model", f"hf:{REPO}", "--filter", "vit.layers.1.layernorm_before"])
    assert result.exit_code == 0, result.output
    assert "1x17x32" in result.stdout  # a class token and a 4x4 grid, at the processor's 32 pixels
    result = cli.invoke(app, ["models", "--search", "hf:"])
    assert f"hf:{REPO}  (vit, 3 classes, cached)" in result.stdout.splitlines()


def test_models_lists_cached_clip_siglip_and_backbones_with_what_they_need(hub_cache):
    configs = {  # config.json alone: listing reads no weights
        "hookviz-test/clip": transformers.CLIPConfig(architectures=["CLIPModel"]),
        "hookviz-test/siglip": transformers.SiglipConfig(architectures=["SiglipModel"]),
        "hookviz-test/dinov2": transformers.Dinov2Config(architectures=["Dinov2Model"]),
        "hookviz-test/vit": transformers.ViTConfig(architectures=["ViTModel"]),
        "hookviz-test/bert": transformers.BertConfig(architectures=["BertForMaskedLM"]),
    }
    for repo, config in configs.items():
        config.save_pretrained(hub_snapshot(hub_cache, repo))
    result = hookviz_cli("models", "--search", "hf:")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "hf:hookviz-test/clip  (clip, text tower: needs --prompt TEXT, cached)" in lines
    assert "hf:hookviz-test/siglip  (siglip, text tower: needs --prompt TEXT, cached)" in lines
    backbones = lines.index(next(line for line in lines if line.startswith("# hf embedding")))
    assert lines[backbones + 1 : backbones + 3] == [
        "hf:hookviz-test/dinov2  (dinov2, backbone (embedding): needs --target-image PATH, cached)",
        "hf:hookviz-test/vit  (vit, backbone (embedding): needs --target-image PATH, cached)",
    ]
    assert not any("bert" in line for line in lines)  # no image model: not listed


def _custom_code_folder(folder, marker, model_type="hookviz_custom"):
    """A folder whose config.json names its own modelling code, which writes ``marker`` if it is ever imported."""
    folder.mkdir()
    (folder / "modeling_custom.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PretrainedConfig, PreTrainedModel\n"
        "class MyConfig(PretrainedConfig):\n    model_type = 'hookviz_custom'\n"
        "class MyModel(PreTrainedModel):\n    config_class = MyConfig\n"
    )
    auto_map = {"AutoConfig": "modeling_custom.MyConfig", "AutoModelForImageClassification": "modeling_custom.MyModel"}
    (folder / "config.json").write_text(
        json.dumps({"model_type": model_type, "architectures": ["MyModel"], "auto_map": auto_map})
    )
    return folder


def _at_a_terminal(argv, typed: bytes, env: dict) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal for stdin, stdout and stderr, ``typed`` already typed."""
    import os
    import subprocess

    master, slave = os.openpty()
    try:
        process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    finally:
        os.close(slave)
    os.write(master, typed)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return process.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def _custom_code_refusal(folder) -> str:
    return (
        f"--model hf:{folder}: {folder} needs its own Python code (auto_map in config.json), which hookviz never "
        "runs; load the model yourself and pass the module to hookviz.explain"
    )


@pytest.mark.slow  # a fresh interpreter: about 10 s
def test_a_folder_naming_its_own_code_is_refused_at_a_terminal_without_asking_or_running_it(tmp_path):
    import os

    marker = tmp_path / "the-folder's-code-ran"
    folder = _custom_code_folder(tmp_path / "custom", marker)
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "1",
    }  # transformers copies the code under HF_HOME
    code, output = _at_a_terminal(
        [
            sys.executable,
            "-m",
            "hookviz",
            "run",
            "--model",
            f"hf:{folder}",
            str(SAMPLES / "cat.png"),
            "--out",
            str(tmp_path / "out"),
        ],
        b"y\n",
        env,
    )
    assert code == 2, output
    assert not marker.exists()
    assert "Do you wish" not in output and "trust_remote_code=True" not in output
    errors = [line for line in output.splitlines() if line.startswith("hookviz: error:")]
    assert errors == [f"hookviz: error: {_custom_code_refusal(folder)}"], output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("model_type", ["hookviz_custom", "vit"])  # a type of its own, or one transformers knows
def test_a_folder_naming_its_own_code_is_refused_with_yes_typed(tmp_path, hub_cache, monkeypatch, capsys, model_type):
    import io

    marker = tmp_path / "the-folder's-code-ran"
    folder = _custom_code_folder(tmp_path / "custom", marker, model_type)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # what transformers' prompt would read
    with pytest.raises(UnknownModelError) as error:
        load_model(f"hf:{folder}")
    assert str(error.value) == _custom_code_refusal(folder).replace(f"--model hf:{folder}", f"model='hf:{folder}'")
    assert not marker.exists()
    assert "Do you wish" not in capsys.readouterr().out


def test_an_image_processor_naming_its_own_code_is_refused_too(cached_vit, hub_cache):
    path = hub_snapshot(hub_cache, REPO) / "preprocessor_config.json"
    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, "auto_map": {"AutoImageProcessor": "processing_custom.MyProcessor"}}))
    with pytest.raises(UnknownModelError, match=r"needs its own Python code \(auto_map in preprocessor_config.json\)"):
        load_model(f"hf:{REPO}")


@pytest.mark.parametrize("weights", ["DEFAULT", "none"])
def test_transformers_is_always_told_not_to_trust_remote_code(cached_vit, monkeypatch, weights):
    calls = []

    def spy(owner, method):
        original = getattr(owner, method).__func__

        def recording(cls, *args, **kwargs):
            calls.append((f"{owner.__name__}.{method}", kwargs.get("trust_remote_code", "not given")))
            return original(cls, *args, **kwargs)

        monkeypatch.setattr(owner, method, classmethod(recording))

    spy(transformers.AutoConfig, "from_pretrained")
    spy(transformers.AutoImageProcessor, "from_pretrained")
    spy(transformers.AutoModelForImageClassification, "from_pretrained")
    spy(transformers.AutoModelForImageClassification, "from_config")
    load_model(f"hf:{REPO}", weights)
    model_call = "from_pretrained" if weights == "DEFAULT" else "from_config"
    assert {name for name, _ in calls} == {
        "AutoConfig.from_pretrained",
        "AutoImageProcessor.from_pretrained",
        f"AutoModelForImageClassification.{model_call}",
    }
    assert all(trust is False for _, trust in calls), calls


class _Records:
    """The warnings transformers logs while loading: its stderr handler hangs on the same logger."""

    def __init__(self):
        import logging

        self.records: list = []
        self.handler = logging.Handler(logging.WARNING)
        self.handler.emit = self.records.append
        self.logger = logging.getLogger("transformers")

    def __enter__(self):
        self.logger.addHandler(self.handler)
        return self.records

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)


def _backbone_folder(folder, kind: str):
    """A checkpoint of a bare backbone (no classifier), as vit-base-patch16-224-in21k and DINOv2 are."""
    common = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    model = (
        transformers.ViTModel(transformers.ViTConfig(**common))
        if kind == "vit"
        else transformers.Dinov2Model(transformers.Dinov2Config(**common))
    )
    _save(folder, model)
    return folder


def _pgc_scaled(cam: np.ndarray, size: int) -> np.ndarray:
    """pytorch-grad-cam's post-processing: min-max, then bilinear resize to the input."""
    cam = cam - cam.min()
    cam = cam / (1e-7 + cam.max())
    return torch.nn.functional.interpolate(torch.from_numpy(cam)[None, None].float(), size=(size, size), mode="bilinear")[
        0, 0
    ].numpy()


class _SimilarityToConceptTarget:
    """pytorch-grad-cam's target from its embeddings tutorial (the installed package does not ship it)."""

    def __init__(self, features):
        self.features = features

    def __call__(self, model_output):
        return torch.nn.CosineSimilarity(dim=0)(model_output, self.features)


@pytest.mark.parametrize("kind", ["vit", "dinov2"])
def test_a_backbone_is_an_embedding_whose_cam_is_pytorch_grad_cams_similarity_to_concept(tmp_path, hub_cache, kind):
    from pytorch_grad_cam import GradCAM

    folder = _backbone_folder(tmp_path / kind, kind)
    loaded = load_model(f"hf:{folder}")
    assert loaded.task == "embed" and loaded.notes[0] == "the embedding is the model's pooler_output"
    generator = torch.Generator().manual_seed(1)
    image, reference = torch.randn(3, 32, 32, generator=generator), torch.randn(3, 32, 32, generator=generator)
    layer = "vit.layers.1.layernorm_before" if kind == "vit" else "dinov2.encoder.layer.1.norm1"  # each block's first norm
    ours = explain(loaded, image, layers=[layer], target_image=[reference])
    model = loaded.module
    with torch.no_grad():
        concept = model(reference[None])[0]

    def tokens_to_grid(tensor):
        return tensor[:, 1:, :].reshape(tensor.shape[0], 4, 4, tensor.shape[2]).permute(0, 3, 1, 2)

    target = model.get_submodule(layer)
    with GradCAM(model=model, target_layers=[target], reshape_transform=tokens_to_grid) as cam:
        theirs = cam(input_tensor=image[None], targets=[_SimilarityToConceptTarget(concept)])[0]
    mine = _pgc_scaled(ours[layer].cam, 32)
    assert theirs.max() > 0
    assert np.corrcoef(mine.ravel(), theirs.ravel())[0, 1] >= 0.999


def test_a_backbone_without_its_poolers_weights_is_explained_by_its_class_token(tmp_path, hub_cache):
    from safetensors.torch import load_file, save_file

    folder = _backbone_folder(tmp_path / "vit", "vit")
    state = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if not k.startswith("pooler.")}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    loaded = load_model(f"hf:{folder}")
    assert loaded.notes == (
        "the embedding is the class token of last_hidden_state (its pooler's weights are not in the checkpoint)",
    )
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = loaded.module.vit(pixel_values=image).last_hidden_state[:, 0]
        torch.testing.assert_close(loaded.module(image), expected)


def test_the_command_explains_a_backbone_with_a_reference_and_asks_for_one_without(tmp_path, hub_cache):
    folder = _backbone_folder(tmp_path / "dinov2", "dinov2")
    cat, out = SAMPLES / "cat.png", tmp_path / "out"
    base = ["run", "--model", f"hf:{folder}", str(cat), "--out", str(out), "--pictures", "none", "--device", "cpu"]
    refused = hookviz_cli(*base)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith(f"hookviz: error: --model hf:{folder}: its output is an embedding, not class logits;")
    assert "--target-image REF" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    result = hookviz_cli(*base, "--target-image", SAMPLES / "coffee.png")
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["task"] == "embed" and "the embedding is the model's pooler_output" in report["notes"]


def test_a_classifier_folder_without_its_head_weights_is_still_refused(tmp_path, hub_cache):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "vit"
    _save(folder, _tiny_vit())
    state = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if not k.startswith("classifier.")}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with _Records() as records, pytest.raises(UnknownModelError) as error:
        load_model(f"hf:{folder}")
    assert str(error.value) == (
        f"model='hf:{folder}': {folder} has no classifier head (classifier.bias, classifier.weight not in the "
        "checkpoint: transformers would initialise them at random), and hookviz explains a class's logit; choose a "
        "checkpoint fine-tuned for image classification"
    )
    assert [record.getMessage() for record in records] == []


@pytest.mark.parametrize("weights", ["DEFAULT", "none"])
def test_a_segformer_segmentation_checkpoint_is_refused_as_segmentation(tmp_path, hub_cache, weights):
    config = transformers.SegformerConfig(
        depths=[1] * 4, hidden_sizes=[8, 16, 24, 32], num_attention_heads=[1] * 4, decoder_hidden_size=16, num_labels=4
    )
    torch.manual_seed(0)
    transformers.SegformerForSemanticSegmentation(config).save_pretrained(tmp_path / "segformer")
    with pytest.raises(UnknownModelError) as error:
        load_model(f"hf:{tmp_path / 'segformer'}", weights)
    assert str(error.value).startswith(
        f"model='hf:{tmp_path / 'segformer'}': {tmp_path / 'segformer'} is a semantic segmentation model "
        "(SegformerForSemanticSegmentation), not an image classifier;"
    )


def test_weights_missing_from_the_backbone_are_noted_and_a_clean_load_logs_nothing(tmp_path, hub_cache):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "vit"
    _save(folder, _tiny_vit())
    with _Records() as records:
        assert load_model(f"hf:{folder}").notes == ()
    assert records == []
    state = load_file(str(folder / "model.safetensors"))
    del state["vit.layernorm.weight"]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with _Records() as records:
        loaded = load_model(f"hf:{folder}")
    assert loaded.notes == (f"1 of the model's weights are not in {folder} and were initialised at random: vit.layernorm.weight",)
    assert records == []


class _RunsCode:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch '{self.marker}'",))


def _weights_file_folder(folder, kind: str, marker):
    """A save_pretrained folder whose weights file is cut short, or a pickle that would run code."""
    from safetensors.torch import save_file

    model = _tiny_vit()
    _save(folder, model)
    (folder / "model.safetensors").unlink()
    state = dict(model.state_dict())
    if kind == "truncated":
        save_file(state, str(folder / "model.safetensors"))
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    else:
        torch.save({**state, "payload": _RunsCode(marker)}, folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize(
    "kind, words",
    [
        ("truncated", "'s weights file is not readable safetensors ("),
        ("code", "'s weights file holds pickled Python objects that could run code when loaded, so it was not loaded"),
    ],
)
def test_a_folder_with_a_broken_or_unsafe_weights_file_is_refused_in_one_line(tmp_path, hub_cache, kind, words):
    marker = tmp_path / "the-pickle-ran"
    folder = _weights_file_folder(tmp_path / "vit", kind, marker)
    out = tmp_path / "out"
    result = hookviz_cli("run", "--model", f"hf:{folder}", SAMPLES / "cat.png", "--out", out)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"hookviz: error: --weights DEFAULT: {folder}{words}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "--debug" not in result.stderr
    assert not marker.exists() and not out.exists()


@pytest.mark.parametrize(
    "flag, words",
    [
        (
            "--faithfulness",
            "--faithfulness follows the target class's probability as pixels are deleted; an embedding similarity "
            "model's target has no such probability; drop --faithfulness",
        ),
        (
            "--sanity",
            "--sanity explains each image's target again on randomised copies of the model; an embedding similarity "
            "model's target is made by the model itself (a similarity to references it embedded)",
        ),
    ],
)
def test_a_backbones_trust_measures_are_refused_in_one_line(tmp_path, hub_cache, flag, words):
    """Both failed with "AttributeError: 'Embed' object has no attribute ..."."""
    folder = _backbone_folder(tmp_path / "vit", "vit")
    out = tmp_path / "out"
    reference = ["--target-image", str(SAMPLES / "coffee.png")]
    args = ["run", "--model", f"hf:{folder}", str(SAMPLES / "cat.png"), *reference, flag, "--out", str(out), "--device", "cpu"]
    result = hookviz_cli(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"hookviz: error: {words}") and result.stderr.endswith(f"drop {flag}\n")
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_backbone_refusing_the_crop_asked_for_names_it_in_one_line(tmp_path, hub_cache):
    """ViTModel takes only its image_size: the reference's embedding, the run's first pass, failed
    as "hookviz: error: ValueError: Input image size (64*64) doesn't match model (32*32)", exit 1."""
    folder = _backbone_folder(tmp_path / "vit", "vit")
    out = tmp_path / "out"
    reference = SAMPLES / "coffee.png"
    args = ["run", "--model", f"hf:{folder}", str(SAMPLES / "cat.png"), "--target-image", str(reference), "--crop", "64"]
    result = hookviz_cli(*args, "--out", out, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"hookviz: error: --target-image {reference}: the model failed a forward pass on it, a 1x3x64x64 input (ValueError: "
    )
    assert result.stderr.rstrip().endswith("pass --crop (or leave it out)")
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_resize_for_a_model_that_resizes_the_whole_photo_is_refused_in_one_line(tmp_path, hub_cache):
    """A Hugging Face image processor resizes the whole photo: --resize 16 changed nothing, silently."""
    folder = _backbone_folder(tmp_path / "vit", "vit")
    out = tmp_path / "out"
    args = ["run", "--model", f"hf:{folder}", str(SAMPLES / "cat.png"), "--target-image", str(SAMPLES / "coffee.png")]
    result = hookviz_cli(*args, "--resize", "16", "--out", out, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "hookviz: error: --resize 16: the model's preprocessing resizes the whole photo to 32x32, so a shorter side "
        "has no effect; change that size with --crop, or drop --resize\n"
    )
    assert not out.exists()
