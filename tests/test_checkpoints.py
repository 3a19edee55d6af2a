"""Weight files: the usual wrappers, safetensors, mismatches, and pickles that would run code."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torchvision

from hookviz.checkpoints import read_state_dict
from hookviz.errors import WeightsError
from hookviz.models import load_model

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
