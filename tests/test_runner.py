"""Many images in one process: batches, per-image targets, shards, resuming, signals."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hookviz.options import LayerOptions, ModelOptions, PictureOptions, RunOptions
from hookviz.outputs import output_names
from hookviz.runner import run, shard_of

from .conftest import ROOT, no_partial_files, python_output


def _run(out: Path, images, *, model="tests.conftest:tiny_net", weights="none", layers=("features.3",), pictures=(),
         device="auto", **options):
    """``run`` with a tiny model on random weights, no pictures unless asked."""
    return run(images, ModelOptions(model, weights, device=device), layers=LayerOptions(tuple(layers)),
               pictures=PictureOptions(pictures=pictures), options=RunOptions(out=out, **options))


def test_each_image_of_a_batch_gets_its_own_target_and_cam(lite0, cat, coffee, tmp_path):
    common = dict(model="efficientnet_lite0", weights="DEFAULT", layers=(), save_tensors=True)
    together = _run(tmp_path / "batch", [cat, coffee], batch_size=2, **common)
    _run(tmp_path / "single", [cat, coffee], batch_size=1, **common)
    assert [s.status for s in together.statuses] == ["done", "done"]
    targets = [s.target["name"] for s in together.statuses]
    assert targets[1] == "espresso" and "cat" in targets[0]
    for name in ("cat", "coffee"):
        a = np.load(tmp_path / "batch" / name / "tensors.npz")
        b = np.load(tmp_path / "single" / name / "tensors.npz")
        for key in ("_swish:1/cam", "_swish:1/grad_output", "logits"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("count", [1, 3])
def test_no_more_render_processes_than_images(tmp_path, photo, monkeypatch, count):
    """Render workers all start with the run, so a small run must not start one per CPU."""
    import hookviz.runner as runner

    asked = []
    real = runner._render_pool
    monkeypatch.setattr(runner, "_render_pool", lambda workers: asked.append(workers) or real(workers))
    photos = []
    for i in range(count):
        folder = tmp_path / f"in{i}"
        folder.mkdir()
        photos.append(Path(shutil.copy(photo, folder / "photo.png")))
    summary = _run(tmp_path / "out", photos, pictures=("summary",), workers=8)
    assert [s.status for s in summary.statuses] == ["done"] * count
    assert asked == [count]


@pytest.mark.parametrize(
    "pictures, budget, expected",
    [
        ((), 256 * 2**20, [1, 4, 4, 2]),  # one image sizes the batches, then full ones
        (("summary",), 256 * 2**20, [1, 2, 4, 4]),  # with pictures, batches double
        ((), 1, [1] * 11),  # recording one image passes the budget: one at a time
    ],
)
def test_batches_are_sized_by_what_the_first_image_recorded(tmp_path, photo, monkeypatch, pictures, budget, expected):
    from hookviz.explainer import Explainer
    from hookviz.loader import ImageLoader

    sizes = []
    real = Explainer.explain_batch

    def counting(explainer, images, *args, **kwargs):
        sizes.append(len(images))
        return real(explainer, images, *args, **kwargs)

    monkeypatch.setattr(Explainer, "explain_batch", counting)
    held = []
    hold = ImageLoader.hold_at_most
    monkeypatch.setattr(ImageLoader, "hold_at_most", lambda loader, count: held.append(count) or hold(loader, count))
    photos = [Path(shutil.copy(photo, tmp_path / f"photo{i}.png")) for i in range(11)]
    summary = _run(tmp_path / "out", photos, pictures=pictures, batch_size=4, memory_budget=budget, workers=1)
    assert summary.count("done") == 11
    assert sizes == expected
    assert held == [max(2, 2 * max(sizes))]  # the loader keeps two batches of photos at most


def test_the_loader_holds_no_more_images_than_it_is_told(tmp_path, photo):
    """It starts ahead of the model with room for two full batches; when the first image
    shows that batches must be small, fewer decoded photos may wait."""
    from hookviz.images import Preprocessing
    from hookviz.loader import ImageLoader

    paths = [Path(shutil.copy(photo, tmp_path / f"photo{i}.png")) for i in range(12)]
    loader = ImageLoader(paths, 10**8, limit=8)
    loader.start()
    try:
        deadline = time.monotonic() + 30
        while loader.waiting < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # room for the loader to (wrongly) add a ninth
        assert loader.waiting == 8
        loader.set_preprocessing(Preprocessing())
        loader.hold_at_most(2)
        items = iter(loader)
        taken = [next(items) for _ in range(6)]
        assert all(prepared.tensor.shape == (3, 224, 224) for _, prepared in taken)
        time.sleep(0.3)  # room for the loader to (wrongly) add a third
        assert loader.waiting == 2
        assert [path for path, _ in taken + list(items)] == paths
    finally:
        loader.stop()


def test_a_run_without_pictures_never_imports_matplotlib(tmp_path, photo):
    """matplotlib takes ~0.3 s to import, on a thread that shares the cores with the model."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from hookviz import ModelOptions, PictureOptions, RunOptions, run\n"
        f"summary = run([Path({str(photo)!r})], ModelOptions('tests.conftest:tiny_net', 'none'),"
        f" pictures=PictureOptions(pictures=()), options=RunOptions(out=Path({str(tmp_path)!r}), save_tensors=True))\n"
        "print(summary.count('done'), 'matplotlib' in sys.modules)\n"
    )
    assert python_output(code).split() == ["1", "False"]


def test_parameters_get_no_gradient_and_are_restored(tmp_path, photo):
    from hookviz import explain

    from .conftest import tiny_net

    model = tiny_net().eval()
    flags = [p.requires_grad for p in model.parameters()]
    explain(model, photo, layers=["features.3"])
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(p.grad is None for p in model.parameters())


def test_shards_partition_the_list_and_names_agree():
    items = list(range(10))
    parts = [shard_of(items, (k, 3)) for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == items and all(parts)
    paths = [Path("a/cat.png"), Path("b/cat.png"), Path("dog.jpg"), Path("a/cat.jpg")]
    names = output_names(paths)
    assert len(set(names.values())) == 4 and names[Path("dog.jpg")] == "dog"
    assert names == output_names(paths)  # stable


def test_skip_existing_resumes(tmp_path):
    images = []
    for i in range(3):
        path = tmp_path / f"im{i}.png"
        Image.new("RGB", (32, 32), (i * 60, 0, 0)).save(path)
        images.append(path)
    out = tmp_path / "out"
    _run(out, images[:2])
    summary = _run(out, images, skip_existing=True)
    assert [s.status for s in summary.statuses] == ["skipped", "skipped", "done"]
    # An image done before hookviz kept fingerprints is not complete: a comparison needs one.
    report = json.loads((out / "im0" / "report.json").read_text())
    report["files"].remove("fingerprint.npz")
    (out / "im0" / "report.json").write_text(json.dumps(report))
    summary = _run(out, images, skip_existing=True)
    assert [s.status for s in summary.statuses] == ["done", "skipped", "skipped"]


def _start_slow_run(tmp_path: Path, count: int, batch_size: int, **popen) -> tuple[subprocess.Popen, Path, Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(count):
        Image.new("RGB", (40, 30), (i * 6 % 256, 100, 50)).save(folder / f"im{i:02d}.png")
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "hookviz", "run", str(folder), "--model", "tests.conftest:slow_net",
         "--weights", "none", "--layer", "features.3", "--batch-size", str(batch_size), "--out", str(out), "-q"],
        cwd=ROOT, **popen,
    )
    return process, folder, out


def _wait_for(condition, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.02)


def _assert_complete(out: Path) -> None:
    """Every file under a real name is whole: PNGs decode, JSON parses."""
    for path in out.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            if path.suffix == ".png":
                Image.open(path).verify()
            elif path.suffix == ".json":
                json.loads(path.read_text())


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_cleanly_with_complete_files(tmp_path, stop):
    process, _, out = _start_slow_run(tmp_path, 40, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: list(out.glob("*/report.json")))
    process.send_signal(stop)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "--skip-existing" in stderr
    document = json.loads((out / "run.json").read_text())
    assert document["interrupted"] is True
    assert 0 < document["counts"]["done"] < 40
    assert no_partial_files(out)
    _assert_complete(out)


def test_a_kill_leaves_no_broken_file_under_a_real_name(tmp_path):
    process, folder, out = _start_slow_run(tmp_path, 30, 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: len(list(out.glob("*/*.png"))) >= 5)
    process.kill()
    process.wait(timeout=30)
    _assert_complete(out)
    # The next run sweeps temporary files a killed run left behind.
    _run(out, sorted(folder.iterdir())[:1], skip_existing=True)
    assert no_partial_files(out)


def test_no_graph_is_built_before_the_first_recorded_layer(photo):
    """Back-propagation stops at the earliest recorded tensor: layers before it run without autograd."""
    import torch

    from hookviz import explain

    from .conftest import tiny_net

    model = tiny_net().eval()
    seen = {}
    model.features[0].register_forward_hook(lambda m, i, o: seen.update(early=o.requires_grad))
    model.fc.register_forward_hook(lambda m, i, o: seen.update(late=o.requires_grad))
    explain(model, photo, layers=["features.3"])
    assert seen == {"early": False, "late": True}
    image = torch.randn(3, 224, 224, requires_grad=False)
    explain(model, image, layers=["features.0"])
    assert image.grad is None


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_results_equal_the_cpus(lite0, cat, coffee, tmp_path):
    common = dict(model="efficientnet_lite0", weights="DEFAULT", layers=("_blocks.-1",), save_tensors=True)
    _run(tmp_path / "cpu", [cat, coffee], device="cpu", **common)
    _run(tmp_path / "cuda", [cat, coffee], device="cuda", **common)
    for name in ("cat", "coffee"):
        a = np.load(tmp_path / "cpu" / name / "tensors.npz")
        b = np.load(tmp_path / "cuda" / name / "tensors.npz")
        for key in a.files:
            scale = max(1.0, float(np.abs(a[key]).max()))
            np.testing.assert_allclose(b[key], a[key], rtol=1e-3, atol=1e-4 * scale, err_msg=key)
