"""Sample kinds (``hookviz.samples``): a batch of samples becomes the model's inputs in one
place, every pass runs the task with its own options, a sample of several files is told apart
by all of them, and a plug-in's kind of two inputs runs end to end through ``hookviz run``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from hookviz.inputs.identity import Match, SampleIdentity, match_files
from hookviz.inputs.images import Preprocessing
from hookviz.methods.integrated_gradients import IGOptions
from hookviz.samples import SAMPLE_KINDS, Sample, SampleBatch, get_sample_kind

from .conftest import ROOT, SAMPLES, tiny_net
from .explorer_helpers import explorer_text
from .test_records import _validate_run_folder


class _Twice:
    """A stand-in task whose forward adds its inputs' sums, row by row."""

    def forward(self, module, inputs, device, options=None, task_options=None):
        return {name: inputs.stacked(name).flatten(1).sum(dim=1) for name in inputs.rows}, task_options


def _sample(value: float) -> Sample:
    tensors = {"image": torch.full((1, 2, 2), value), "vector": torch.full((3,), 10 * value)}
    return Sample(None, tensors, np.zeros((2, 2, 3), np.uint8))


def test_a_batch_gives_each_row_its_samples_other_inputs_and_the_tasks_options():
    samples = SampleBatch([_sample(1.0), _sample(2.0)], _Twice(), torch.nn.Identity(), "cpu", None, task_options="own")
    sums, task_options = samples.forward()
    assert task_options == "own" and sums["image"].tolist() == [4.0, 8.0] and sums["vector"].tolist() == [30.0, 60.0]
    # rows standing for samples 1, 0, 1, with their main input altered: the vectors follow the rows
    altered = torch.stack([torch.full((1, 2, 2), v) for v in (0.5, 0.25, 0.0)])
    sums, _ = samples.forward(torch.tensor([1, 0, 1]), altered)
    assert sums["image"].tolist() == [2.0, 1.0, 0.0] and sums["vector"].tolist() == [60.0, 30.0, 60.0]
    # one altered row standing for many (a layer's output later made into many rows): its own sample's
    sums, _ = samples.forward(torch.tensor([1, 1, 1]), altered[:1])
    assert sums["vector"].tolist() == [60.0]
    assert samples.main_input().shape == (2, 1, 2, 2)


def test_every_pass_runs_the_task_with_its_own_options(registries_restored):
    """Re-scoring, input gradients and --faithfulness's altered passes all reach the task's forward
    with its options (trust's faithfulness once dropped them)."""
    from hookviz.explaining.explainer import Explainer
    from hookviz.models.sources.base import LoadedModel
    from hookviz.options import InputOptions, LayerOptions, TargetOptions, TrustOptions
    from hookviz.tasks import register_task
    from hookviz.tasks.classify import Classify, SoftmaxScores

    seen = []

    @register_task
    class Spying(Classify):
        name = "spying-classify"
        priority = 1

        def recognises(self, output) -> bool:
            return False

        def forward(self, module, inputs, device, options=None, task_options=None):
            seen.append(task_options)
            return super().forward(module, inputs, device, options, task_options)

    loaded = LoadedModel("tiny", tiny_net(), "none", None, Preprocessing(resize=32, size=32), task="spying-classify")
    explainer = Explainer.create(
        loaded,
        layers=LayerOptions(layers=("features.3",)),
        inputs=InputOptions(),
        target=TargetOptions(cam="gradcam,scorecam,integrated-gradients", settings=(IGOptions(steps=4),)),
        trust=TrustOptions(faithfulness=True),
    )
    task_options = SoftmaxScores()
    explainer = replace(explainer, task_options=task_options)
    explanation = explainer.explain_batch([explainer.prepare(SAMPLES / "cat.png")])[0]
    assert explanation["features.3"].trust.deletion is not None
    assert len(seen) >= 5 and all(options is task_options for options in seen)


def test_a_sample_of_two_files_changes_when_either_does(tmp_path):
    photo, vector = tmp_path / "a.png", tmp_path / "a.npy"
    Image.new("RGB", (8, 8)).save(photo)
    np.save(vector, np.arange(4, dtype=np.float32))
    recorded = SampleIdentity.of_files([photo, vector])
    assert SampleIdentity.of_files([photo]) == SampleIdentity.of(photo)
    assert match_files(recorded, [photo, vector]) is Match.SAME
    np.save(vector, np.arange(4, dtype=np.float32) + 1)  # the photo is as it was: the vector alone tells
    assert match_files(recorded, [photo, vector]) is Match.CHANGED
    assert SampleIdentity.of_files([photo, vector]).sha256 != recorded.sha256


def test_the_photo_is_the_built_in_kind():
    photo = get_sample_kind("photo")
    assert "photo" in SAMPLE_KINDS and photo.files(SAMPLES / "cat.png") == [SAMPLES / "cat.png"]
    blank = photo.blank(Preprocessing(size=32, mode="whole"), None)
    assert [tuple(t.shape) for t in blank] == [(1, 3, 32, 32)]


def _run(folder, out, *extra):
    command = [sys.executable, "-m", "hookviz", "run", str(folder), "--model", "tests.sample_plugin:pair_net"]
    command += ["--task", "pair-classify", "--crop", "32", "--resize", "32", "--out", str(out), *extra]
    env = {**os.environ, "HOOKVIZ_PLUGINS": "tests.sample_plugin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def pair_plugin(registries_restored):
    """``tests.sample_plugin``, its kind and task registered for this test alone (a kind or task
    left registered would change other tests' lists of them)."""
    import importlib

    from hookviz.samples import SAMPLE_KINDS

    if "tests.sample_plugin" in sys.modules and "photo+vector" not in dict(SAMPLE_KINDS.items()):
        return importlib.reload(sys.modules["tests.sample_plugin"])
    return importlib.import_module("tests.sample_plugin")


def _logits(plugin, photo, vector) -> np.ndarray:
    """PairNet's logits, computed here: torchvision's resize, crop and ImageNet normalisation."""
    from torchvision import transforms

    pair_net = plugin.pair_net

    transform = transforms.Compose(
        [
            transforms.Resize(32),
            transforms.CenterCrop(32),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    with torch.no_grad():
        image = transform(Image.open(photo).convert("RGB"))[None]
        return pair_net().eval()(image, torch.from_numpy(np.load(vector))[None]).numpy()[0]


@pytest.mark.slow  # three runs of a fresh interpreter: about 20 s of CPU
def test_a_plugin_sample_kind_of_two_inputs_runs_end_to_end(tmp_path, pair_plugin):
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    for name, vector in (("cat", [1.0, 2.0, 3.0, 4.0]), ("coffee", [-1.0, 0.0, 5.0, 2.0])):
        Image.open(SAMPLES / f"{name}.png").save(folder / f"{name}.png")
        np.save(folder / f"{name}.npy", np.asarray(vector, np.float32))
    first = _run(folder, out, "--cam", "gradcam,scorecam,integrated-gradients", "--faithfulness", "--steps", "4")
    assert _validate_run_folder(out) == 3
    for name in ("cat", "coffee"):
        report = json.loads((out / name / "report.json").read_text())
        assert report["task"] == "pair-classify"
        layer = report["layers"][0]
        assert layer["trust"]["faithfulness"]["deletion_insertion"]["deletion_auc"] > 0  # re-scored with its vector
        assert Image.open(out / name / layer["pictures"]["cam"]).size[0] > 100
        expected = _logits(pair_plugin, folder / f"{name}.png", folder / f"{name}.npy")
        assert report["target"]["score"] == pytest.approx(float(expected.max()), rel=1e-4, abs=1e-5)
    assert "cat.png" in explorer_text(out) and "target class" in first.stdout
    kept = (out / "cat" / "report.json").read_bytes()
    again = _run(
        folder, out, "--cam", "gradcam,scorecam,integrated-gradients", "--faithfulness", "--steps", "4", "--skip-existing"
    )
    assert "2 skipped (done by an earlier run)" in again.stderr and "target" not in again.stdout, again.stderr
    np.save(folder / "cat.npy", np.asarray([4.0, -3.0, 2.0, 9.0], np.float32))  # the vector alone changes
    third = _run(
        folder, out, "--cam", "gradcam,scorecam,integrated-gradients", "--faithfulness", "--steps", "4", "--skip-existing"
    )
    redone = json.loads((out / "cat" / "report.json").read_text())
    assert (out / "cat" / "report.json").read_bytes() != kept and "cat.png: target" in third.stdout
    assert "coffee.png: target" not in third.stdout and "1 skipped (done by an earlier run)" in third.stderr
    expected = _logits(pair_plugin, folder / "cat.png", folder / "cat.npy")
    assert redone["target"]["score"] == pytest.approx(float(expected.max()), rel=1e-4, abs=1e-5)


def test_the_sample_kind_contract_in_the_docs_is_the_protocol_and_its_defaults():
    """docs/extending.md's sample-kind table lists every member of ``SampleKind``, and says
    "none" in its default column exactly where ``SampleKindBase`` gives none."""
    import re
    import typing

    from hookviz.samples import SampleKind, SampleKindBase

    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    table = text.split("## A sample kind", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    documented = {name for cells in rows for name in re.findall(r"`(\w+)", cells[0])}
    without_default = {name for cells in rows if cells[1].startswith("none: write") for name in re.findall(r"`(\w+)", cells[0])}
    members = set(typing.get_type_hints(SampleKind)) | {
        n for n, v in vars(SampleKind).items() if callable(v) and not n.startswith("_")
    }
    assert documented == members
    assert without_default == {name for name in members if not hasattr(SampleKindBase, name)}
