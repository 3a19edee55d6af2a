from __future__ import annotations

import pytest
import torch
import torchvision

from hookviz.errors import UnknownModelError, WeightsError
from hookviz.models.loading import load_model

from .test_checkpoints import _Exploit


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
    assert "weights='PATH'" in message and "resnet18" in message and "name resolution" in message


def test_efficientnet_lite0_classifies_the_sample_cat(lite0, cat):
    from hookviz import explain

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
