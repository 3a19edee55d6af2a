"""A factory that downloads pretrained weights and cannot: the cache hint of --weights DEFAULT,
at once. The network is replaced by one that always fails, so nothing is ever downloaded."""

from __future__ import annotations

import sys
import textwrap
import urllib.error

import pytest

from .cli_helpers import hookviz_cli


@pytest.fixture
def factory(tmp_path, monkeypatch):
    """Write ``downloading_factory.py`` in a folder of the test's own and make it the current one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "downloading_factory", raising=False)

    def write(body: str) -> str:
        (tmp_path / "downloading_factory.py").write_text(textwrap.dedent(body))
        return "downloading_factory:build"

    yield write
    sys.modules.pop("downloading_factory", None)


def _refusal(name: str) -> str:
    result = hookviz_cli("layers", "--model", name)  # builds the model: the factory runs
    assert result.exit_code == 2, result.output
    return result.stderr.strip().splitlines()[-1]  # torch.hub says "Downloading: ..." before it tries


def test_torchvision_weights_default_in_a_factory_get_the_torch_hub_cache_hint(factory, tmp_path, monkeypatch):
    import torch.hub
    import torchvision

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("no network here")

    monkeypatch.setattr(torch.hub, "urlopen", no_network)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    name = factory("""
        import torchvision

        def build():
            return torchvision.models.resnet18(weights="DEFAULT")
    """)
    url = torchvision.models.ResNet18_Weights.DEFAULT.url
    target = tmp_path / "torch-home" / "hub" / "checkpoints" / url.rsplit("/", 1)[-1]
    assert _refusal(name) == (
        f"hookviz: error: --model {name}: the pretrained weights the factory asked for are not in the torch hub cache "
        f"and downloading them failed (<urlopen error no network here>); fetch {url} elsewhere and copy it to {target}, "
        "or have the factory build the model without pretrained weights (weights=None, pretrained=False) and pass "
        "--weights PATH"
    )
    assert not target.exists()


def test_timm_pretrained_in_a_factory_gives_up_at_once_with_the_hub_cache_hint(factory, unreachable_hub, tmp_path):
    import logging

    timm = pytest.importorskip("timm")
    from huggingface_hub import constants

    repo = timm.models.get_pretrained_cfg("resnet18").hf_hub_id
    logger = logging.getLogger("huggingface_hub.utils._http")
    before = (logger.level, list(logger.filters))
    name = factory("""
        import timm

        def build():
            return timm.create_model("resnet18", pretrained=True)
    """)
    assert _refusal(name) == (
        f"hookviz: error: --model {name}: {repo} is not in the Hugging Face cache ({tmp_path / 'hf-hub'}) and downloading "
        f"failed (the hub could not be reached: no network here (HEAD {constants.ENDPOINT}/{repo}/resolve/main/"
        f"model.safetensors)); fetch it where there is network (`hf download {repo}`) and copy that cache here (or point "
        "HF_HUB_CACHE at a copy), or have the factory build the model without pretrained weights (weights=None, "
        "pretrained=False) and pass --weights PATH"
    )
    assert unreachable_hub == []  # not one of huggingface_hub's waits between retries
    assert (logger.level, list(logger.filters)) == before  # the gate is gone again


def test_a_factory_that_fails_otherwise_is_reported_as_before(factory):
    result = hookviz_cli(
        "layers",
        "--model",
        factory("""
        def build():
            raise OSError("the factory's own failure")
    """),
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "hookviz: error: --model downloading_factory:build: the factory raised OSError: the factory's own failure"
    )


def test_torchvision_weights_spelt_as_torchvision_writes_them_are_its_weights(tmp_path, monkeypatch):
    """``--weights ResNet18_Weights.IMAGENET1K_V1`` (torchvision's own spelling, as
    ``get_weight`` takes it) was read as a file's name: "no such file"."""
    import torch.hub
    import torchvision

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("no network here")

    monkeypatch.setattr(torch.hub, "urlopen", no_network)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    url = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.url
    target = tmp_path / "torch-home" / "hub" / "checkpoints" / url.rsplit("/", 1)[-1]
    for weights in ("ResNet18_Weights.IMAGENET1K_V1", "ResNet18_Weights.DEFAULT"):
        result = hookviz_cli("layers", "--model", "resnet18", "--weights", weights)
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines()[-1] == (
            f"hookviz: error: --weights {weights}: resnet18's pretrained weights are not in the torch hub cache and "
            f"downloading them failed (<urlopen error no network here>); fetch {url} elsewhere and copy it to {target}, "
            "or pass --weights PATH (a local state_dict) or --weights none"
        )
    result = hookviz_cli("layers", "--model", "resnet18", "--weights", "ResNet18_Weights.IMAGENET1K_V9")
    assert result.stderr.strip() == (
        "hookviz: error: --weights ResNet18_Weights.IMAGENET1K_V9: not a file, nor one of DEFAULT, none, IMAGENET1K_V1"
    )
    assert not target.exists()
