"""Embedding models: explained by the cosine similarity of their output to a reference's."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from hookviz import explain

from .cli_helpers import hookviz_cli
from .conftest import SAMPLES

CAT, COFFEE = SAMPLES / "cat.png", SAMPLES / "coffee.png"


def invoke(*args):
    return hookviz_cli(*args)


class SimilarityToConceptTarget:
    """pytorch-grad-cam's target from its embeddings tutorial ("Pixel Attribution for
    embeddings"), as the tutorial defines it (the installed package does not ship it)."""

    def __init__(self, features):
        self.features = features

    def __call__(self, model_output):
        cosine_similarity = torch.nn.CosineSimilarity(dim=0)
        return cosine_similarity(model_output, self.features)


def _resnet18_embedder():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    model.fc = torch.nn.Identity()
    return model.eval()


def _pgc_scaled(cam: np.ndarray, size: int) -> np.ndarray:
    """pytorch-grad-cam's post-processing: min-max, then bilinear resize to the input."""
    cam = cam - cam.min()
    cam = cam / (1e-7 + cam.max())
    return F.interpolate(torch.from_numpy(cam)[None, None].float(), size=(size, size), mode="bilinear")[0, 0].numpy()


@pytest.mark.slow  # ~5 s on 2 shared cores: resnet18 through both libraries
def test_embedding_cam_equals_pytorch_grad_cams_similarity_to_concept():
    from pytorch_grad_cam import GradCAM

    model = _resnet18_embedder()
    generator = torch.Generator().manual_seed(1)
    image, reference = torch.randn(3, 112, 112, generator=generator), torch.randn(3, 112, 112, generator=generator)
    with torch.no_grad():
        concept = model(reference[None])[0]
    ours = explain(model, image, layers=["layer4"], target_image=[reference])
    with GradCAM(model=model, target_layers=[model.layer4]) as cam:
        theirs = cam(input_tensor=image[None], targets=[SimilarityToConceptTarget(concept)])[0]
    mine = _pgc_scaled(ours["layer4"].cam, 112)
    assert theirs.max() > 0
    assert np.corrcoef(mine.ravel(), theirs.ravel())[0, 1] >= 0.999
    assert np.abs(mine - theirs).max() / np.abs(theirs).max() < 1e-3
    with torch.no_grad():
        expected = F.cosine_similarity(model(image[None]), concept[None]).item()
    assert ours.target.logit == pytest.approx(expected, abs=1e-5)
    # The concept given as its embedding (a 1-D tensor) is the same concept.
    again = explain(model, image, layers=["layer4"], target_image=concept)
    np.testing.assert_allclose(again["layer4"].cam, ours["layer4"].cam, rtol=1e-5, atol=1e-8)


def test_a_folder_of_references_is_one_concept_their_mean_embedding(tmp_path):
    model = _resnet18_embedder()
    folder = tmp_path / "refs"
    folder.mkdir()
    for photo in (CAT, COFFEE):
        shutil.copy(photo, folder / photo.name)
    image = torch.randn(3, 112, 112, generator=torch.Generator().manual_seed(2))
    from hookviz import Explainer, LayerOptions, LoadedModel, Preprocessing

    prepare = Explainer.create(
        LoadedModel("r", model, "seeded", None, Preprocessing(resize=128, size=112)), layers=LayerOptions(("layer4",))
    ).prepare
    with torch.no_grad():
        mean = torch.stack([model(prepare(p).tensor[None])[0] for p in (CAT, COFFEE)]).mean(0)
    found = explain(model, image, layers=["layer4"], target_image=folder, preprocessing=Preprocessing(resize=128, size=112))
    given = explain(model, image, layers=["layer4"], target_image=mean)
    assert [score.name for score in found.top5] == [str(folder)]
    assert found.target.logit == pytest.approx(given.target.logit, abs=1e-5)
    np.testing.assert_allclose(found["layer4"].cam, given["layer4"].cam, rtol=1e-4, atol=1e-8)


def test_a_tiny_timm_model_without_head_is_explained_by_its_similarity():
    import timm

    torch.manual_seed(0)
    model = timm.create_model("test_vit", num_classes=0).eval()
    image = torch.randn(3, 160, 160, generator=torch.Generator().manual_seed(3))
    result = explain(model, image, target_image=[COFFEE, CAT])
    assert result.task == "embed"
    assert {s.name for s in result.top5} == {str(COFFEE), str(CAT)}
    cams = [layer for layer in result.layers if layer.cam is not None]
    assert cams and np.isfinite(cams[0].cam).all()


def test_each_target_image_gets_its_own_cam_through_the_cli(tmp_path):
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--model",
        "tests.conftest:tiny_net",
        "--weights",
        "none",
        "--target-image",
        COFFEE,
        "--target-image",
        CAT,
        CAT,
        "--out",
        out,
        "--device",
        "cpu",
        "--pictures",
        "cam",
        "--crop",
        "64",
        "--resize",
        "64",
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["task"] == "embed" and report["objective"] == "cosine"
    assert report["target"]["name"] == str(COFFEE)
    assert sorted(s["name"] for s in report["top5"]) == sorted([str(COFFEE), str(CAT)])
    assert report["asked"]["target"]["target_images"] == [str(COFFEE), str(CAT)]
    assert next(s for s in report["top5"] if s["name"] == str(CAT))["score"] == pytest.approx(1.0, abs=1e-5)
    assert any(name.endswith(".cam.png") for name in report["files"])


@pytest.mark.slow
def test_a_timm_feature_extractor_runs_with_a_reference(tmp_path):
    # eva02_tiny's default tag is a masked-image-modelling checkpoint: num_classes=0, an embedding.
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--model",
        "timm:eva02_tiny_patch14_224",
        "--weights",
        "none",
        "--target-image",
        COFFEE,
        CAT,
        "--out",
        out,
        "--device",
        "cpu",
        "--pictures",
        "cam",
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "cat" / "report.json").read_text())["task"] == "embed"


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["--target-image", str(COFFEE), "--target", "3"],
            "--target 3: an embedding has no classes; explain its similarity to a photo with --target-image REF instead",
        ),
        (["--target-image", "NOTES"], "--target-image NOTES: not an image format PIL can read"),
        (["--target-image", "EMPTY"], "--target-image EMPTY: folder holds no image files"),
        (  # one remedy, not the image error's and then "pass a photo or a folder of photos"
            ["--target-image", "THIN"],
            "--target-image THIN: 600x6 is too thin to resize (aspect ratio above 50:1); crop it to the region you "
            "want explained\n",
        ),
        (  # before: two identical panels and two top-5 entries of one name
            ["--target-image", str(COFFEE), "--target-image", str(SAMPLES / ".." / "sample_images" / "coffee.png")],
            f"--target-image {SAMPLES / '..' / 'sample_images' / 'coffee.png'}: given twice (also as {COFFEE}), "
            "the same concept; drop one",
        ),
        (  # the folder's name alone would not say which of its files to remove
            ["--target-image", "MIXED"],
            "--target-image MIXED: MIXED/broken.png: not an image format PIL can read (for SVG or PDF, convert it to "
            "PNG first); remove it from the folder or pass another",
        ),
    ],
    ids=["target-index", "not-an-image", "empty-folder", "too-thin", "twice", "broken-photo-in-folder"],
)
def test_bad_references_are_refused_in_one_line(args, line, tmp_path):
    notes, empty, mixed = tmp_path / "notes.txt", tmp_path / "empty", tmp_path / "mixed"
    notes.write_text("not a photo")
    empty.mkdir()
    mixed.mkdir()
    shutil.copyfile(COFFEE, mixed / "coffee.png")
    (mixed / "broken.png").write_text("not a photo")
    Image.new("RGB", (600, 6)).save(tmp_path / "thin.png")
    named = {"NOTES": notes, "EMPTY": empty, "MIXED": mixed, "THIN": tmp_path / "thin.png"}
    args = [str(named.get(a, a)) for a in args]
    for key, path in named.items():
        line = line.replace(key, str(path))
    result = invoke(
        "run",
        "--model",
        "tests.conftest:tiny_net",
        "--weights",
        "none",
        *args,
        CAT,
        "--out",
        tmp_path / "out",
        "--device",
        "cpu",
        "--crop",
        "64",
        "--resize",
        "64",
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"hookviz: error: {line}")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def _run_headless(tmp_path, *args):
    return invoke(
        "run", "--model", "tests.conftest:headless_timm_net", "--weights", "none", *args, CAT,
        "--out", tmp_path / "out", "--device", "cpu", "--pictures", "cam", "--crop", "64", "--resize", "64",
    )  # fmt: skip


def test_a_factorys_timm_model_without_head_is_an_embedding_model(tmp_path):
    # its 96 outputs are embedding dimensions, not classes: a top-1 "class" of them would mean nothing
    refused = _run_headless(tmp_path)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr == (
        "hookviz: error: --model tests.conftest:headless_timm_net: its output is an embedding, not class logits; "
        "explain its similarity to a reference photo with --target-image REF\n"
    )
    assert not (tmp_path / "out").exists()
    explained = _run_headless(tmp_path, "--target-image", COFFEE)
    assert explained.exit_code == 0, explained.output
    assert json.loads((tmp_path / "out" / "cat" / "report.json").read_text())["task"] == "embed"


def test_a_photo_explained_against_itself_says_its_cam_is_rounding_noise(tmp_path):
    # at cos=1 the similarity is at its maximum: its gradient is ~1e-9, a map of rounding noise
    result = _run_headless(tmp_path, "--target-image", CAT, "--target-image", COFFEE)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    said = [note for note in report["notes"] if "rounding noise" in note]
    assert said == [
        f"--target-image {CAT}: the photo's embedding equals the reference's (cos=1.000000), where the similarity "
        "is at its maximum and its gradient vanishes, so its CAM shows rounding noise; explain the photo against "
        "another reference"
    ]
    assert "rounding noise" in result.stderr  # printed as a note, too


def test_an_empty_target_image_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch):
    # before: Path("") is ".", so the photos of the folder the command ran in became the concept, unasked
    shutil.copyfile(COFFEE, tmp_path / "coffee.png")
    monkeypatch.chdir(tmp_path)
    result = _run_headless(tmp_path, "--target-image", "")
    assert result.exit_code == 2, result.output
    assert result.stderr == "hookviz: error: --target-image '': an empty path; pass a photo or a folder of photos\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "factory, line",
    [
        ("one_value_net", "the model returned a 1x1 tensor: an embedding of one value is ±1 similar to any reference"),
        ("integer_net", "the model returned a 1x8 tensor of int64: no gradient flows through it"),
    ],
    ids=["one-value", "integer"],
)
def test_an_embedding_without_gradient_is_refused_in_one_line(factory, line, tmp_path):
    # before: the one-value embedding drew a flat CAM at cos=1.000; the integer one was called "not an embedding"
    result = invoke(
        "run", "--model", f"tests.conftest:{factory}", "--weights", "none", "--target-image", COFFEE, CAT,
        "--out", tmp_path / "out", "--device", "cpu", "--crop", "64", "--resize", "64",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"hookviz: error: {line}")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def _run_reference(tmp_path, reference, skip=True):
    return invoke(
        "run", "--model", "tests.conftest:tiny_net", "--weights", "none", "--target-image", reference, CAT,
        "--out", tmp_path / "out", "--device", "cpu", "--pictures", "none", "--crop", "64", "--resize", "64",
        *(["--skip-existing"] if skip else []),
    )  # fmt: skip


def test_skip_existing_redoes_a_photo_whose_reference_changed(tmp_path):
    reference = tmp_path / "reference.png"
    shutil.copyfile(COFFEE, reference)
    report = tmp_path / "out" / "cat" / "report.json"
    assert _run_reference(tmp_path, reference, skip=False).exit_code == 0
    recorded = json.loads(report.read_text())["asked"]["references"]
    assert [(r["name"], r["photos"][0]["sha256"]) for r in recorded] == [(str(reference), recorded[0]["sha256"])]
    first = report.stat().st_mtime_ns
    same = _run_reference(tmp_path, reference)
    assert same.exit_code == 0, same.output
    assert report.stat().st_mtime_ns == first  # the same reference: skipped
    shutil.copyfile(CAT, reference)  # the same path, another photo
    changed = _run_reference(tmp_path, reference)
    assert changed.exit_code == 0, changed.output
    document = json.loads(report.read_text())
    assert document["asked"]["references"][0]["sha256"] != recorded[0]["sha256"]  # redone
    assert document["target"]["score"] == pytest.approx(1.0, abs=1e-5)  # the cat against itself now


def test_explain_takes_a_models_name_with_a_concept_embedding():
    # timm's test_vit: a classifier by name, an embedding model by its reference
    concept = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    result = explain("timm:test_vit", CAT, weights="none", target_image=concept)
    assert result.task == "embed" and result.target.name == "concept 1 (an embedding)"
    assert [r.name for r in result.references] == ["concept 1 (an embedding)"]
    assert np.isfinite(next(layer.cam for layer in result.layers if layer.cam is not None)).all()


def test_a_named_classify_task_with_a_reference_is_refused_not_overridden(tmp_path):
    # before: --task classify --target-image ran an embedding model, silently dropping the task asked for
    result = invoke(
        "run", "--model", "tests.conftest:tiny_net", "--weights", "none", "--task", "classify",
        "--target-image", COFFEE, CAT, "--out", tmp_path / "out", "--device", "cpu", "--crop", "64", "--resize", "64",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "hookviz: error: --task classify and --target-image: a reference makes it an embedding similarity run, "
        "not classification; drop --target-image to explain the classify output, or drop --task to explain the "
        "similarity to the reference\n"
    )
    assert not (tmp_path / "out").exists()


def test_explain_refuses_a_named_classify_task_with_a_reference():
    from hookviz.errors import UsageError

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    with pytest.raises(UsageError, match=r"^task='classify' and target_image: a reference makes it an embedding"):
        explain(model, torch.rand(3, 64, 64), task="classify", target_image=torch.randn(4))


def _small_embedder():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())


def test_a_concept_given_as_a_batch_of_one_embedding_is_that_embedding():
    # before: a (1, D) tensor, the model's own output for one photo, was "a tensor image must be (C, H, W)"
    model = _small_embedder().eval()
    generator = torch.Generator().manual_seed(4)
    image, reference = torch.rand(3, 64, 64, generator=generator), torch.rand(3, 64, 64, generator=generator)
    with torch.no_grad():
        batch_of_one = model(reference[None])
    assert batch_of_one.shape == (1, 4)
    ours = explain(model, image, layers=["0"], target_image=batch_of_one)
    flat = explain(model, image, layers=["0"], target_image=batch_of_one[0])
    assert ours.target.name == "concept 1 (an embedding)"
    assert ours.target.logit == pytest.approx(flat.target.logit, abs=1e-6)
    np.testing.assert_allclose(ours["0"].cam, flat["0"].cam, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "concept, line",
    [
        (  # before: cos=0 and a blank CAM, without a word
            torch.zeros(4),
            "target_image='concept 1 (an embedding)': the embedding is all zeros, a vector with no direction to "
            "compare with; pass a photo or a nonzero embedding",
        ),
        (  # before: cos=nan
            torch.tensor([1.0, float("nan"), 0.0, 0.0]),
            "target_image='concept 1 (an embedding)': the embedding holds NaN or infinite values, which are no "
            "concept; pass finite values",
        ),
        (
            torch.ones(2, 4),
            "target_image='reference 1 (Tensor)': a tensor of shape (2, 4) is neither an image (C, H, W) nor a "
            "concept's embedding, (D,) or (1, D) with D the model's embedding size; pass one of those",
        ),
        (
            torch.ones(1, 5),
            "target_image='concept 1 (an embedding)': an embedding of 5 values, but the model's have 4; pass a "
            "photo, or this model's embedding as a (4,) or (1, 4) tensor",
        ),
    ],
    ids=["zeros", "nan", "two-rows", "wrong-size"],
)
def test_a_concept_tensor_that_is_no_embedding_of_the_model_is_refused(concept, line):
    from hookviz.errors import UsageError

    with pytest.raises(UsageError) as refused:
        explain(_small_embedder().eval(), torch.rand(3, 64, 64), layers=["0"], target_image=concept)
    assert str(refused.value) == line
