"""The weights' own transform as an object (``hookviz.inputs.transforms``): hookviz's PIL path
gives what each source's object gives, and a factory's own callable is applied as it is."""

from __future__ import annotations

import json
import random
import re
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from hookviz import Explainer, InputOptions
from hookviz.errors import ImageError, UnknownModelError, UsageError
from hookviz.inputs.images import load_image, prepare
from hookviz.inputs.transforms import TRANSFORM_MODE, applied_preprocessing, normalisation_of
from hookviz.models.loading import load_model

from .cli_helpers import hookviz_cli, hookviz_run
from .conftest import ROOT, SAMPLES

CAT = SAMPLES / "cat.png"


def levels(ours, theirs, std) -> float:
    """The largest difference of two normalised inputs, in 8-bit levels of the photo."""
    return float(((ours - theirs) * torch.tensor(std)[:, None, None] * 255).abs().max())


# ----------------------------------------------------------------------------- objects hookviz reproduces


def test_every_torchvision_weights_transform_is_what_hookviz_feeds():
    """All of torchvision's weights (classifiers' ImageClassification, segmenters' and
    detectors'): the object kept on the preprocessing gives the very tensor hookviz's path does."""
    import torchvision.models as models

    from hookviz.models.sources.torchvision_models import names_by_task, preprocessing_of

    photo, seen = load_image(CAT), set()
    for task, names in names_by_task().items():
        for entry in (e for name in names for e in models.get_model_weights(name) if e not in seen):
            seen.add(entry)
            processing = preprocessing_of(entry, task)
            assert processing.transform is not None and not processing.applies_transform, entry
            theirs = processing.transform.function(photo.rgb)
            ours = prepare(photo, processing).tensor
            assert ours.shape == theirs.shape and levels(ours, theirs, processing.std) == 0, entry
    assert len(seen) > 100


@pytest.mark.parametrize(
    "name", ["vit_base_patch16_224.augreg2_in21k_ft_in1k", "resnet50.a1_in1k", "convnext_tiny.in12k_ft_in1k_384"]
)
def test_timms_eval_transform_object_is_what_hookviz_feeds(name):
    timm = pytest.importorskip("timm")
    from hookviz.models.sources.timm_models import timm_preprocessing

    with torch.device("meta"):  # the transform needs the model's config only
        model = timm.create_model(name)
    processing, _ = timm_preprocessing(model)
    photo = load_image(CAT)
    theirs = processing.transform.function(photo.rgb)
    assert levels(prepare(photo, processing).tensor, theirs, processing.std) < 1e-3
    assert processing.transform.origin == "timm's eval transform"


@pytest.mark.parametrize("kind", ["ViTImageProcessor", "ConvNextImageProcessor", "BeitImageProcessor"])
def test_an_image_processor_object_is_within_one_level_of_hookviz(kind):
    """transformers 5's processors resize a uint8 tensor with torchvision's antialiased tensor
    resize; hookviz resizes the PIL image: the same filter, rounded one level apart in a few
    values (0.1 to 0.3% of them), never more."""
    transformers = pytest.importorskip("transformers")
    from hookviz.models.sources.huggingface import hf_preprocessing

    processing, notes = hf_preprocessing(getattr(transformers, kind)())
    photo = load_image(CAT)
    theirs = processing.transform.function(photo.rgb, return_tensors="pt")["pixel_values"][0]
    ours = prepare(photo, processing).tensor
    apart = (ours - theirs).abs() * torch.tensor(processing.std)[:, None, None] * 255
    assert notes == () and ours.shape == theirs.shape
    assert apart.max() < 1.001 and (apart > 0.5).float().mean() < 0.005


def test_an_image_processor_that_resizes_nothing_is_applied_as_it_is():
    """hookviz's fields cannot say "no resize" (it used to read the size the processor ignores)."""
    transformers = pytest.importorskip("transformers")
    from hookviz.models.sources.huggingface import hf_preprocessing

    processing, notes = hf_preprocessing(transformers.ViTImageProcessor(do_resize=False), "hf:mine")
    photo = load_image(CAT)
    prepared = prepare(photo, processing)
    pixels = np.asarray(photo.rgb, dtype=np.float32).transpose(2, 0, 1) / 255
    assert processing.applies_transform and processing.trace_size == (240, 320)
    assert torch.allclose(prepared.tensor, torch.from_numpy((pixels - 0.5) / 0.5), atol=1e-6)
    assert np.array_equal(prepared.shown, np.asarray(photo.rgb)) and "image processor ViTImageProcessor" in notes[0]


def test_an_override_drops_the_object_that_no_longer_describes_the_input():
    import torchvision.models as models

    from hookviz.models.sources.torchvision_models import preprocessing_of

    processing = preprocessing_of(models.ResNet18_Weights.DEFAULT)
    assert InputOptions().apply(processing).transform is processing.transform
    assert InputOptions(crop=224).apply(processing).transform is processing.transform  # nothing changed
    changed = InputOptions(crop=112).apply(processing)
    assert changed.transform is None and (changed.resize, changed.size) == (128, 112)
    assert changed.to_json()["crop"] == 112


# ----------------------------------------------------------------------------- objects applied as they are


NORMALISED = T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])


def test_an_applied_transform_makes_the_input_and_its_overlay_is_what_the_model_sees():
    processing, notes = applied_preprocessing(NORMALISED, "my transform", "m:f")
    photo = load_image(CAT)
    prepared = prepare(photo, processing)
    assert torch.equal(prepared.tensor, NORMALISED(photo.rgb))
    expected = np.asarray(T.CenterCrop(64)(T.Resize(72)(photo.rgb)), dtype=np.int16)
    assert prepared.shown.shape == (64, 64, 3) and np.abs(prepared.shown - expected).max() <= 1
    assert (processing.mode, processing.channels, processing.trace_size) == (TRANSFORM_MODE, 3, (64, 64))
    assert processing.to_json() == {
        "mode": "transform",
        "resize": None,
        "crop": None,
        "size": None,
        "interpolation": "its own",
        "mean": [0.5, 0.4, 0.3],
        "std": [0.2, 0.25, 0.3],
        "channels": 3,
    }
    assert notes == (
        "photos are preprocessed by my transform; overlays show its output denormalised with the mean and std found on it",
    )


def test_an_unnormalised_or_grey_output_is_shown_as_pixels():
    grey = T.Compose([T.Grayscale(), T.Resize((40, 30)), T.ToTensor()])
    processing, notes = applied_preprocessing(grey, "grey", "m:f")
    photo = load_image(CAT)
    prepared = prepare(photo, processing)
    expected = np.asarray(T.Resize((40, 30))(T.Grayscale()(photo.rgb)))
    assert prepared.tensor.shape == (1, 40, 30) and processing.trace_size == (40, 30)
    assert np.array_equal(prepared.shown, np.repeat(expected[..., None], 3, axis=2))
    assert "read as pixels in 0..1" in notes[0]


def test_normalisation_is_found_on_the_object_its_steps_or_an_image_processors_attributes():
    class Processor:
        image_mean, image_std, do_normalize = [0.1, 0.2, 0.3], [0.4, 0.5, 0.6], True

    class Off(Processor):
        do_normalize = False

    assert normalisation_of(NORMALISED) == ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
    assert normalisation_of(Processor()) == ((0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    assert normalisation_of(T.Normalize(0.5, 0.5)) == ((0.5,) * 3, (0.5,) * 3)
    assert normalisation_of(Off()) is None and normalisation_of(T.ToTensor()) is None


def test_a_batch_feature_or_batch_of_one_is_read_as_its_image():
    def processor(image):
        return {"pixel_values": T.ToTensor()(image)[None] * 2 - 1}

    processing, _ = applied_preprocessing(processor, "p", "m:f")
    assert prepare(load_image(CAT), processing).tensor.shape == (3, 300, 451)


@pytest.mark.parametrize(
    ("transform", "said"),
    [
        (lambda image: image, r"returned an object of type Image, not a \(C, H, W\) float tensor"),
        (T.PILToTensor(), r"returned a torch.uint8 tensor, not a \(C, H, W\) float tensor"),
        (lambda image: torch.zeros(5, 8, 8), r"returned a tensor of shape \(5, 8, 8\), not \(C, H, W\) with 1 or 3 channels"),
        (lambda image: 1 / 0, r"failed on the photo \(ZeroDivisionError: division by zero\)"),
    ],
)
def test_a_transform_that_fails_or_returns_the_wrong_thing_is_refused_as_the_model_loads(transform, said):
    with pytest.raises(UnknownModelError) as error:
        applied_preprocessing(transform, "m:f's transform", "m:f")
    assert re.fullmatch(rf"model='m:f': m:f's transform {said}, tried on a grey 320x240 photo as it loaded", str(error.value))
    with pytest.raises(UnknownModelError, match="its transform is a int, not a callable"):
        applied_preprocessing(3, "x", "m:f")


def test_a_transform_that_fails_on_one_photo_fails_that_photo_in_one_line():
    def picky(image):
        if image.width > 400:
            raise ValueError("too wide\nsecond line")
        return T.ToTensor()(image)

    processing, _ = applied_preprocessing(picky, "m:f's transform", "m:f")
    with pytest.raises(ImageError) as error:
        prepare(load_image(CAT), processing)
    assert str(error.value).endswith("cat.png: m:f's transform failed on the photo (ValueError: too wide)")


def test_a_transform_that_draws_random_numbers_leaves_the_callers_streams_alone():
    def noisy(image):
        random.random(), np.random.rand()
        return T.ToTensor()(image) + torch.rand(1)

    processing, _ = applied_preprocessing(noisy, "noisy", "m:f")
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    expected = torch.rand(2), random.random(), np.random.rand()
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    prepare(load_image(CAT), processing)
    after = torch.rand(2), random.random(), np.random.rand()
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]


# ----------------------------------------------------------------------------- a factory's own transform


def _docs_factory() -> str:
    """The factory of docs/models.md's "A factory's own transform"."""
    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    section = text.split("### A factory's own transform", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def docs_factory(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(_docs_factory(), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("mymodels", None)


def test_the_documented_factory_runs_with_its_own_transform(docs_factory):
    loaded = load_model("mymodels:build", "none")
    explainer = Explainer.create(loaded)
    theirs = __import__("mymodels").build()[1](Image.open(CAT).convert("RGB"))
    assert torch.equal(explainer.prepare(CAT).tensor, theirs) and theirs.shape == (3, 64, 64)
    result = hookviz_run(CAT, model="mymodels:build", out=docs_factory / "out")
    assert result.exit_code == 0, result.output
    report = json.loads((docs_factory / "out" / "cat" / "report.json").read_text())
    assert report["preprocessing"]["mode"] == "transform" and report["preprocessing"]["std"] == [0.25] * 3
    assert any("mymodels:build's transform" in note for note in report["notes"])
    listed = hookviz_cli("layers", "--model", "mymodels:build")  # traced at the size the transform makes
    assert re.search(r"^conv1 +Conv2d +1x64x32x32 ", listed.output, re.MULTILINE), listed.output


@pytest.mark.parametrize(
    ("flag", "shown"), [(("--crop", "100"), "--crop"), (("--no-crop",), "--no-crop"), (("--mean", "0.5"), "--mean")]
)
def test_input_options_are_refused_for_a_factorys_own_transform(docs_factory, flag, shown):
    result = hookviz_run(CAT, *flag, model="mymodels:build", out=docs_factory / "out")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"hookviz: error: {shown}: photos are preprocessed by mymodels:build's transform, which hookviz applies "
        f"as it is and cannot resize, crop or normalise otherwise; drop {shown}, or change the transform"
    )
    with pytest.raises(UsageError, match="^crop: photos are preprocessed by mymodels:build's transform"):
        Explainer.create(load_model("mymodels:build", "none"), inputs=InputOptions(crop=100))


@pytest.mark.parametrize("resize_mode", ["shortest", "squash"])
def test_open_clips_eval_transform_object_is_what_hookviz_feeds(resize_mode):
    """A CLIP's transform resizes the shorter side and crops; SigLIP's weights squash the whole photo."""
    open_clip = pytest.importorskip("open_clip")
    from hookviz.models.sources.open_clip_models import _preprocessing

    model = open_clip.create_model("RN50")
    model.visual.preprocess_cfg = {**model.visual.preprocess_cfg, "resize_mode": resize_mode, "size": 96}
    processing, notes = _preprocessing(model)
    photo = load_image(CAT)
    theirs = processing.transform.function(photo.rgb)
    assert notes == () and processing.mode == {"shortest": "crop", "squash": "whole"}[resize_mode]
    assert theirs.shape == (3, 96, 96) and levels(prepare(photo, processing).tensor, theirs, processing.std) == 0
