"""The randomisation check's honesty (``hookviz.trust.sanity``, ``--sanity``): what it
randomises (a frozen batch norm's buffers too) and what it says it left, a map too small to
rank, |ρ| judged as Adebayo et al. judge it, integrated gradients' options beside it, and a
model that cannot be copied refused once, up front."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from torchvision.ops import FrozenBatchNorm2d

import hookviz
from hookviz.errors import UsageError
from hookviz.trust import cascading_randomisation

from .conftest import TinyNet, tiny_net
from .test_trust import run_cli, tiny_gradcams


def frozen_norm_net() -> torch.nn.Module:
    """TinyNet with a FrozenBatchNorm2d (weight, bias and statistics are buffers), its
    statistics those of a trained norm: not the identity a fresh one is."""
    model = tiny_net()
    frozen = FrozenBatchNorm2d(4)
    generator = torch.Generator().manual_seed(3)
    for name, low in (("weight", 0.5), ("bias", -0.5), ("running_mean", -0.5), ("running_var", 0.2)):
        getattr(frozen, name).copy_(low + torch.rand(4, generator=generator))
    model.features[1] = frozen
    return model.eval()


def test_a_frozen_batch_norm_is_randomised_with_the_other_layers():
    model, photo = frozen_norm_net(), torch.rand(3, 24, 24)
    before = {name: buffer.clone() for name, buffer in model.features[1].named_buffers()}
    sanity = hookviz.explain(model, photo, layers=["features.3"], sanity=True)["features.3"].trust.sanity
    assert sanity.layers == ("fc", "features.3", "features.1", "features.0") and sanity.kept == ()
    # resetting features.1's statistics (upstream of the mapped layer) changed the map
    assert not torch.equal(torch.from_numpy(sanity.maps[3]), torch.from_numpy(sanity.maps[2]))
    assert all(torch.isfinite(torch.from_numpy(step)).all() for step in sanity.maps)  # a valid (positive) variance
    assert sanity.verdict.startswith(("passes: with all 4 layers with weights random the map", "fails: with all 4 layers"))
    assert all(torch.equal(before[name], buffer) for name, buffer in model.features[1].named_buffers())


class _Scale(torch.nn.Module):
    """A learned scale kept as a buffer: no parameters, no reset_parameters."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4)[None, :, None, None])

    def forward(self, x):
        return x * self.scale


def test_float_buffers_left_as_they_were_are_named_and_all_layers_random_is_not_claimed():
    model = tiny_net().eval()
    model.features[2] = torch.nn.Sequential(_Scale(), torch.nn.ReLU())
    result = hookviz.explain(model, torch.rand(3, 24, 24), layers=["features.3"], sanity=True)
    sanity = result["features.3"].trust.sanity
    assert sanity.kept == ("features.2.0",) and "features.2.0" not in sanity.layers
    assert "but the float buffers of features.2.0" in sanity.verdict and "never wholly random" in sanity.verdict
    assert sanity.to_json()["kept"] == ["features.2.0"]
    assert any("features.2.0" in note and "left as they were" in note for note in result["features.3"].notes)


def test_a_map_of_too_few_values_gets_a_note():
    small = hookviz.explain(tiny_net(), torch.rand(3, 4, 4), layers=["features.3"], sanity=True)["features.3"]
    assert small.cam.shape == (2, 2)
    (note,) = [note for note in small.notes if "randomisation check" in note]
    assert note.startswith("features.3 (gradcam): randomisation check: the map has only 4 values (2x2), fewer than 16")
    assert small.trust.sanity.to_json()["note"] in note and "says little" in small.trust.sanity.verdict
    large = hookviz.explain(tiny_net(), torch.rand(3, 8, 8), layers=["features.3"], sanity=True)["features.3"]
    assert large.cam.shape == (4, 4) and large.trust.sanity.note is None
    assert not [note for note in large.notes if "randomisation check" in note]


def test_an_inverted_map_fails_the_check_as_adebayo_et_al_judge_it():
    """Adebayo et al. judge |ρ|: a map whose ranks the randomised model turns upside down is
    still the input's picture, not a change."""
    torch.manual_seed(8)
    inputs, classes = torch.randn(2, 3, 32, 32), torch.tensor([1, 3])
    original = tiny_gradcams(inputs, classes)(tiny_net().eval())
    (result, _) = cascading_randomisation(tiny_net().eval(), lambda _model: -original, original)
    assert result.final == pytest.approx(-1.0) and not result.explains_model
    assert result.verdict.startswith("fails") and "-1.00" in result.verdict and "|ρ| above 0.5" in result.verdict


def test_integrated_gradients_options_are_taken_beside_the_check(tmp_path):
    """``--cam gradcam,integrated-gradients --steps 8`` (or ``--ig-baseline blur``): the
    check runs on gradcam's map; integrated gradients keeps its options."""
    for options in (["--steps", "8"], ["--ig-baseline", "blur"]):
        result = run_cli(
            tmp_path / options[0], "--sanity", "--cam", "gradcam,integrated-gradients", *options, "--pictures", "none"
        )
        assert result.exit_code == 0, result.output
        report = json.loads((tmp_path / options[0] / "out" / "cat" / "report.json").read_text())
        assert report["layers"][0]["trust"]["sanity"]["layers"][0] == "fc"
    explained = hookviz.explain(
        tiny_net(), torch.rand(3, 24, 24), layers=["features.3"], cam="gradcam,integrated-gradients", steps=8, sanity=True
    )
    assert explained["features.3"].trust.sanity is not None and explained.pixel_maps["integrated-gradients"].map is not None


def refused_factory() -> torch.nn.Module:
    """Factory used as ``--model tests.test_sanity:refused_factory``: a refusal of the options
    must come before it is called."""
    raise AssertionError("the model was loaded before the options were checked")


def test_options_no_model_could_take_are_refused_before_the_model_loads(tmp_path):
    result = run_cli(tmp_path, "--model", "tests.test_sanity:refused_factory", "--sanity", "--cam", "none")
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert "--sanity measures a CAM; choose a --cam method, not none" in line, result.stderr
    with pytest.raises(UsageError, match="^sanity measures a CAM; choose a cam method, not none"):
        hookviz.explain("no_such_model", torch.rand(3, 24, 24), cam="none", sanity=True)


class _Locked(TinyNet):
    """A model holding a lock: it runs, but cannot be deep-copied."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


def locked_net() -> torch.nn.Module:
    """Factory used as ``--model tests.test_sanity:locked_net``."""
    torch.manual_seed(0)
    return _Locked()


def test_a_model_that_cannot_be_copied_is_refused_once_naming_sanity(tmp_path):
    result = run_cli(tmp_path, "--model", "tests.test_sanity:locked_net", "--sanity")
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("hookviz: error: --sanity randomises a deep copy of the model, and _Locked cannot be deep-copied")
    assert "lock" in line and "drop --sanity" in line
    assert run_cli(tmp_path, "--model", "tests.test_sanity:locked_net", "--pictures", "none").exit_code == 0
    with pytest.raises(UsageError, match=r"^sanity randomises a deep copy of the model, and _Locked cannot be deep-copied"):
        hookviz.explain(locked_net(), torch.rand(3, 24, 24), layers=["features.3"], sanity=True)
