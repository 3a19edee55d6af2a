from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torchvision

from hookviz.errors import UnknownModelError, WeightsError
from hookviz.models import load_model

from .conftest import tiny_net


def test_unknown_model_suggests(tmp_path):
    with pytest.raises(UnknownModelError, match="resnet50"):
        load_model("resnet5O")


def test_factory_and_seeded_random_init():
    a = load_model("tests.conftest:tiny_net", "none", seed=1)
    b = load_model("tests.conftest:tiny_net", "none", seed=1)
    c = load_model("tests.conftest:tiny_net", "none", seed=2)
    assert torch.equal(a.module.fc.weight, b.module.fc.weight)
    assert not torch.equal(a.module.fc.weight, c.module.fc.weight)
    assert not a.module.training
    with pytest.raises(UnknownModelError, match="no attribute"):
        load_model("tests.conftest:nope")
    with pytest.raises(UnknownModelError, match="cannot import"):
        load_model("no_such_package_xyz:make")


def test_torchvision_none_is_seeded():
    a = load_model("resnet18", "none", seed=3).module.fc.weight
    b = load_model("resnet18", "none", seed=3).module.fc.weight
    assert torch.equal(a, b)


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


def test_default_weights_come_from_the_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    torch.manual_seed(7)
    state = torchvision.models.resnet18(weights=None).state_dict()
    url = torchvision.models.ResNet18_Weights.DEFAULT.url
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save(state, cache / url.rsplit("/", 1)[1])
    loaded = load_model("resnet18", "DEFAULT")
    assert torch.equal(loaded.module.fc.weight, state["fc.weight"])
    assert loaded.categories[281] == "tabby"
    assert (loaded.preprocessing.resize, loaded.preprocessing.size) == (256, 224)


def test_default_weights_offline_fail_in_one_clear_line(tmp_path, monkeypatch):
    import urllib.error

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(WeightsError) as error:
        load_model("resnet18", "DEFAULT")
    message = str(error.value)
    assert "\n" not in message
    assert "--weights PATH" in message and "resnet18" in message and "name resolution" in message


def test_efficientnet_lite0_classifies_the_sample_cat(lite0, cat):
    from hookviz.explaining import explain

    assert lite0.preprocessing.mean == (0.5, 0.5, 0.5)
    explanation = explain(lite0, cat, layers=["_blocks.-1"], cam="none")
    assert 281 <= explanation.target.index <= 285
    assert "cat" in explanation.target.name or explanation.target.name == "tabby"


def test_default_weights_are_loaded_weights_only(tmp_path, monkeypatch):
    """torch.hub passes weights_only=False; a booby-trapped file in the cache must still not run."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    marker = tmp_path / "pwned"
    _Exploit.marker = str(marker)
    url = torchvision.models.ResNet18_Weights.DEFAULT.url
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    torch.save({"fc.weight": _Exploit()}, cache / url.rsplit("/", 1)[1])
    with pytest.raises(WeightsError, match="refused"):
        load_model("resnet18", "DEFAULT")
    assert not marker.exists()
    import os

    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ
