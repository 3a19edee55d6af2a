"""The Hugging Face cache as hookviz finds it: from the environment at each call, never the network."""

from __future__ import annotations

import pytest

from hookviz.errors import WeightsError
from hookviz.models.sources import hub

from .conftest import hub_snapshot

pytest.importorskip("huggingface_hub")


def test_the_cache_folder_follows_the_environment_as_huggingface_hub_reads_it(tmp_path, monkeypatch):
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub.cache_folder() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.cache_folder() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub.cache_folder() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub.cache_folder() == tmp_path / "cache"


@pytest.mark.parametrize("value, expected", [("1", True), ("TRUE", True), ("0", False), ("", False)])
def test_offline_mode_is_read_at_each_call(monkeypatch, value, expected):
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub.offline() is expected


def test_fetch_takes_the_first_cached_file_and_fails_offline_in_one_line(hub_cache):
    snapshot = hub_snapshot(hub_cache, "org/model")
    (snapshot / "pytorch_model.bin").write_bytes(b"weights")
    assert (
        hub.fetch("org/model", ("model.safetensors", "pytorch_model.bin"), "weights='DEFAULT'") == snapshot / "pytorch_model.bin"
    )
    (snapshot / "model.safetensors").write_bytes(b"safer")
    assert hub.fetch("org/model", ("model.safetensors", "pytorch_model.bin"), "weights='DEFAULT'").name == "model.safetensors"
    with pytest.raises(WeightsError) as error:
        hub.fetch("org/other", ("model.safetensors",), "weights='DEFAULT'")
    assert str(error.value).startswith(
        f"weights='DEFAULT': org/other is not in the Hugging Face cache ({hub_cache}) and HF_HUB_OFFLINE is set;"
    )


def test_cached_repos_lists_repositories_with_a_config(hub_cache):
    (hub_snapshot(hub_cache, "org/vit") / "config.json").write_text('{"architectures": ["ViTForImageClassification"]}')
    hub_snapshot(hub_cache, "org/empty")
    assert hub.cached_repos() == [("org/vit", {"architectures": ["ViTForImageClassification"]})]


def test_fetch_gives_up_at_the_first_network_error_without_waiting_for_retries(unreachable_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    with pytest.raises(WeightsError) as error:
        hub.fetch("org/model", ("model.safetensors",), "weights='DEFAULT'")
    assert str(error.value).startswith(
        f"weights='DEFAULT': org/model is not in the Hugging Face cache ({tmp_path / 'hf-hub'}) and downloading failed "
        "(the hub could not be reached: no network here (HEAD "
    )
    assert unreachable_hub == []
