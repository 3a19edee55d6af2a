"""Weight files: the usual wrappers, safetensors, mismatches, and pickles that would run code."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torchvision

from hookviz.errors import WeightsError
from hookviz.models.checkpoints import read_state_dict
from hookviz.models.loading import load_model

from .cli_helpers import hookviz_run
from .conftest import tiny_net


@pytest.mark.parametrize("wrap", ["plain", "state_dict", "model", "dataparallel", "safetensors"])
def test_state_dict_files_in_the_usual_wrappers(tmp_path, wrap):
    source = tiny_net()
    with torch.no_grad():
        source.fc.bias.fill_(0.25)
    state = source.state_dict()
    path = tmp_path / ("w.safetensors" if wrap == "safetensors" else "w.pth")
    if wrap == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        payload = {
            "plain": state,
            "state_dict": {"state_dict": state, "epoch": 3},
            "model": {"model": state, "optimizer": {}},
            "dataparallel": {f"module.{k}": v for k, v in state.items()},
        }[wrap]
        torch.save(payload, path)
    loaded = load_model("tests.conftest:tiny_net", str(path))
    assert torch.all(loaded.module.fc.bias == 0.25)
    assert loaded.weights == str(path)


def test_wrong_architecture_names_missing_and_unexpected_keys(tmp_path):
    path = tmp_path / "resnet18.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    with pytest.raises(WeightsError) as error:
        load_model("tests.conftest:tiny_net", str(path))
    message = str(error.value)
    assert "missing keys" in message and "features.0.weight" in message
    assert "unexpected keys" in message and "conv1.weight" in message


class _Exploit:
    def __reduce__(self):
        return (Path.touch, (Path(_Exploit.marker),))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    _Exploit.marker = str(marker)
    path = tmp_path / "evil.pth"
    with open(path, "wb") as stream:
        pickle.dump({"fc.weight": _Exploit()}, stream)
    torch.save({"x": _Exploit()}, tmp_path / "evil2.pth")
    for file in (path, tmp_path / "evil2.pth"):
        with pytest.raises(WeightsError, match="could run code|not a PyTorch checkpoint"):
            load_model("tests.conftest:tiny_net", str(file))
    assert not marker.exists()
    with pytest.raises(WeightsError, match="refused"):
        load_model("tests.conftest:tiny_net", str(tmp_path / "evil2.pth"))


def test_not_a_checkpoint_and_missing_file(tmp_path):
    junk = tmp_path / "junk.pth"
    junk.write_text("hello")
    with pytest.raises(WeightsError, match="not a PyTorch checkpoint"):
        load_model("tests.conftest:tiny_net", str(junk))
    with pytest.raises(WeightsError, match="no such file"):
        load_model("tests.conftest:tiny_net", str(tmp_path / "missing.pth"))


def test_read_state_dict_strips_compile_prefix(tmp_path):
    state = {"_orig_mod.fc.weight": torch.ones(2, 2)}
    torch.save({"model": state}, tmp_path / "w.pt")
    assert list(read_state_dict(tmp_path / "w.pt")) == ["fc.weight"]
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(WeightsError, match="not a state_dict"):
        read_state_dict(tmp_path / "list.pt")


def _marked_state() -> dict:
    source = tiny_net()
    with torch.no_grad():
        source.fc.bias.fill_(0.25)
        source.features[1].running_mean.fill_(0.5)
    return source.state_dict()


def test_a_state_dict_without_num_batches_tracked_loads_as_torch_loads_it(tmp_path):
    """Files saved before PyTorch 0.4.1, or converted from another framework, lack the buffer."""
    state = {k: v for k, v in _marked_state().items() if not k.endswith("num_batches_tracked")}
    tiny_net().load_state_dict(dict(state), strict=True)  # torch takes it
    torch.save(state, tmp_path / "old.pth")
    loaded = load_model("tests.conftest:tiny_net", str(tmp_path / "old.pth"))
    assert torch.all(loaded.module.fc.bias == 0.25) and torch.all(loaded.module.features[1].running_mean == 0.5)
    assert loaded.notes == ()


@pytest.mark.parametrize(
    "wrap, prefix",
    [
        ("lightning", "model."),
        ("compiled_dataparallel", "_orig_mod.module."),
        ("ema", None),
        ("model_ema", None),
        ("other_name", None),
    ],
)
def test_checkpoints_of_training_frameworks_load_with_a_note_on_what_was_undone(tmp_path, wrap, prefix):
    state = _marked_state()
    payload = {
        "lightning": {"state_dict": {f"model.{k}": v for k, v in state.items()}, "epoch": 3, "global_step": 10},
        "compiled_dataparallel": {f"_orig_mod.module.{k}": v for k, v in state.items()},
        "ema": {"ema": state},
        "model_ema": {"model_ema": state, "epoch": 3},
        "other_name": {"generator": state, "epoch": 3},
    }[wrap]
    torch.save(payload, tmp_path / "w.ckpt")
    loaded = load_model("tests.conftest:tiny_net", str(tmp_path / "w.ckpt"))
    assert torch.all(loaded.module.fc.bias == 0.25)
    if prefix is not None:
        assert any(f"began with {prefix!r}" in note and "stripped it" in note for note in loaded.notes), loaded.notes
    if wrap == "other_name":
        assert any("'generator' entry" in note for note in loaded.notes), loaded.notes


def test_a_checkpoint_with_a_model_and_its_moving_average_says_which_it_read(tmp_path):
    state = _marked_state()
    torch.save({"state_dict": state, "state_dict_ema": {k: v * 0 for k, v in state.items()}}, tmp_path / "w.pth")
    loaded = load_model("tests.conftest:tiny_net", str(tmp_path / "w.pth"))
    assert torch.all(loaded.module.fc.bias == 0.25)
    assert any("'state_dict' entry" in note and "'state_dict_ema'" in note for note in loaded.notes), loaded.notes


def test_a_checkpoint_that_fits_neither_way_names_the_prefix_and_the_files_keys(tmp_path):
    other = torchvision.models.resnet18(weights=None).state_dict()
    torch.save({"state_dict": {f"model.{k}": v for k, v in other.items()}, "epoch": 3}, tmp_path / "w.ckpt")
    with pytest.raises(WeightsError) as error:
        load_model("tests.conftest:tiny_net", str(tmp_path / "w.ckpt"))
    message = str(error.value)
    assert "'model.'" in message and "top-level keys: state_dict, epoch" in message, message
    torch.save({"optimizer": {"lr": 0.1}, "epoch": 3}, tmp_path / "no-tensors.ckpt")
    with pytest.raises(WeightsError, match="holds no tensors at its top level; its top-level keys: optimizer, epoch"):
        load_model("tests.conftest:tiny_net", str(tmp_path / "no-tensors.ckpt"))


def test_the_command_says_what_it_undid_in_a_note_and_in_report_json(tmp_path, photo):
    import json

    torch.save({"state_dict": {f"model.{k}": v for k, v in _marked_state().items()}, "epoch": 3}, tmp_path / "last.ckpt")
    out = tmp_path / "out"
    result = hookviz_run(photo, "--pictures", "none", weights=tmp_path / "last.ckpt", layer="features.3", out=out)
    assert result.exit_code == 0, result.output
    assert "began with 'model.'" in result.stderr
    report = json.loads((out / "photo" / "report.json").read_text())
    assert any("began with 'model.'" in note for note in report["notes"])
