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
from hookviz.runs.runner import run, shard_of
from hookviz.store.files import output_names

from .conftest import ROOT, SAMPLES, no_partial_files, python_output
from .explorer_helpers import explorer_pictures


def _run(
    out: Path,
    images,
    *,
    model="tests.conftest:tiny_net",
    weights="none",
    layers=("features.3",),
    pictures=(),
    device="auto",
    **options,
):
    """``run`` with a tiny model on random weights, no pictures unless asked."""
    return run(
        images,
        ModelOptions(model, weights, device=device),
        layers=LayerOptions(tuple(layers)),
        pictures=PictureOptions(pictures=pictures),
        options=RunOptions(out=out, **options),
    )


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


@pytest.mark.slow
@pytest.mark.parametrize("count", [1, 3])
def test_no_more_render_processes_than_images(tmp_path, photo, monkeypatch, count):
    """Render workers all start with the run, so a small run must not start one per CPU
    (one image starts none: its pictures are drawn in the run's own process)."""
    import hookviz.runs.workers as workers

    asked = []
    real = workers.render_pool
    monkeypatch.setattr(workers, "render_pool", lambda processes, **kw: asked.append(processes) or real(processes, **kw))
    photos = []
    for i in range(count):
        folder = tmp_path / f"in{i}"
        folder.mkdir()
        photos.append(Path(shutil.copy(photo, folder / "photo.png")))
    summary = _run(tmp_path / "out", photos, pictures=("summary",), workers=8)
    assert [s.status for s in summary.statuses] == ["done"] * count
    assert asked == [count if count > 1 else 0]


@pytest.mark.slow
def test_one_image_is_drawn_in_the_runs_own_process_with_a_workers_pixels(tmp_path, photo, monkeypatch):
    """A render worker costs more to start than one image's pictures take to draw: a run of
    one image draws them itself, byte for byte as a worker does, whatever matplotlib style
    its caller set, and leaves that style as it was."""
    import matplotlib

    import hookviz.runs.workers as workers

    asked = []
    real = workers.render_pool
    monkeypatch.setattr(workers, "render_pool", lambda processes, **kw: asked.append(processes) or real(processes, **kw))
    monkeypatch.setitem(matplotlib.rcParams, "font.size", 17.0)
    monkeypatch.setitem(matplotlib.rcParams, "axes.facecolor", "red")
    hinting = matplotlib.rcParams["text.hinting"]
    other = Path(shutil.copy(photo, photo.with_name("other.png")))
    common = dict(pictures=("summary", "channels", "cam"), layers=("features.1", "features.3"))
    assert _run(tmp_path / "alone", [photo], **common).count("done") == 1
    assert _run(tmp_path / "pool", [photo, other], workers=2, **common).count("done") == 2
    assert asked == [0, 2]
    drawn = sorted(p.name for p in (tmp_path / "alone" / "photo").glob("*.png"))
    assert len(drawn) == 6
    for name in drawn:
        assert (tmp_path / "alone" / "photo" / name).read_bytes() == (tmp_path / "pool" / "photo" / name).read_bytes(), name
    assert matplotlib.rcParams["font.size"] == 17.0 and matplotlib.rcParams["text.hinting"] == hinting


@pytest.mark.parametrize(
    "pictures, budget, expected",
    [
        ((), 256 * 2**20, [1, 4, 4, 2]),  # one image sizes the batches, then full ones
        (("summary",), 256 * 2**20, [1, 2, 4, 4]),  # with pictures, batches double
        ((), 1, [1] * 11),  # recording one image passes the budget: one at a time
    ],
)
def test_batches_are_sized_by_what_the_first_image_recorded(tmp_path, photo, monkeypatch, pictures, budget, expected):
    from hookviz.explaining.explainer import Explainer
    from hookviz.inputs.loader import ImageLoader

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
    from hookviz.inputs.images import Preprocessing
    from hookviz.inputs.loader import ImageLoader

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


@pytest.mark.slow
def test_a_run_without_pictures_never_imports_matplotlib(tmp_path, photo):
    """matplotlib takes ~0.3 s to import, on a thread that shares the cores with the model."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from hookviz import ModelOptions, PictureOptions, RunOptions, run\n"
        f"summary = run([Path({str(photo)!r})], ModelOptions('tests.conftest:tiny_net', 'none'),"
        f" pictures=PictureOptions(pictures=()), options=RunOptions(out=Path({str(tmp_path / 'out')!r}), save_tensors=True))\n"
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


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _photo_of(summary, out: Path, image: Path) -> dict:
    """The ``photo`` that the report of ``image`` (in ``summary``) records."""
    status = next(s for s in summary.statuses if s.image == str(image))
    return json.loads((out / status.output / "report.json").read_text())["sample_identity"]


def test_skip_existing_never_keeps_another_photos_results_under_the_same_file_name(tmp_path):
    """Cameras name every card's first photo IMG_0001: two days into one --out, in two runs."""
    day1, day2 = tmp_path / "day1" / "IMG_0001.png", tmp_path / "day2" / "IMG_0001.png"
    for path, colour in ((day1, (200, 10, 10)), (day2, (10, 10, 200))):
        path.parent.mkdir()
        Image.new("RGB", (40, 30), colour).save(path)
    out = tmp_path / "out"
    first = _run(out, [day1], skip_existing=True)
    second = _run(out, [day2], skip_existing=True)
    assert [s.status for s in second.statuses] == ["done"]  # another photo: not "already done"
    assert second.statuses[0].output != first.statuses[0].output  # nor written over day1's
    assert _photo_of(first, out, day1)["sha256"] == _sha256(day1)
    assert _photo_of(second, out, day2)["sha256"] == _sha256(day2)
    both = _run(out, [day1, day2], skip_existing=True)  # found again, whichever photos a run had
    assert [(s.status, s.output) for s in both.statuses] == [
        ("skipped", first.statuses[0].output),
        ("skipped", second.statuses[0].output),
    ]
    # A photo rewritten in place is done again, in its own folder; a copy elsewhere is the same photo.
    Image.new("RGB", (40, 30), (10, 200, 10)).save(day2)
    again = _run(out, [day2], skip_existing=True)
    assert [(s.status, s.output) for s in again.statuses] == [("done", second.statuses[0].output)]
    assert _photo_of(again, out, day2)["sha256"] == _sha256(day2)
    moved = tmp_path / "archive" / "IMG_0001.png"
    moved.parent.mkdir()
    shutil.copy(day1, moved)  # a new modification time, the same bytes
    assert [s.status for s in _run(out, [moved], skip_existing=True).statuses] == ["skipped"]


def test_a_run_without_skip_existing_never_writes_over_another_photos_results(tmp_path):
    day1, day2 = tmp_path / "day1" / "IMG_0001.png", tmp_path / "day2" / "IMG_0001.png"
    for path, colour in ((day1, (200, 10, 10)), (day2, (10, 10, 200))):
        path.parent.mkdir()
        Image.new("RGB", (40, 30), colour).save(path)
    out = tmp_path / "out"
    first, second = _run(out, [day1]), _run(out, [day2])
    assert first.statuses[0].output != second.statuses[0].output
    assert _photo_of(first, out, day1)["sha256"] == _sha256(day1)  # still day1's
    assert _run(out, [day1]).statuses[0].output == first.statuses[0].output  # a rerun: the same folder


def test_skip_existing_redoes_images_when_the_weights_file_was_rewritten_in_place(tmp_path):
    import torch

    from .conftest import tiny_net

    images = _images(tmp_path / "in", 2)
    weights = tmp_path / "last.ckpt"
    model = tiny_net()
    torch.save(model.state_dict(), weights)
    out = tmp_path / "out"
    summary = _run(out, images, weights=str(weights))
    report = json.loads((out / summary.statuses[0].output / "report.json").read_text())
    assert report["weights"] == str(weights) and report["weights_sha256"] == _sha256(weights)
    assert json.loads((out / "run.json").read_text())["weights_sha256"] == _sha256(weights)
    assert [s.status for s in _run(out, images, weights=str(weights), skip_existing=True).statuses] == ["skipped"] * 2
    with torch.no_grad():
        model.fc.bias.add_(1.0)  # another epoch, saved under the same name
    torch.save(model.state_dict(), weights)
    summary = _run(out, images, weights=str(weights), skip_existing=True)
    assert [s.status for s in summary.statuses] == ["done"] * 2
    report = json.loads((out / summary.statuses[0].output / "report.json").read_text())
    assert report["weights_sha256"] == _sha256(weights)


def _start_slow_run(
    tmp_path: Path, count: int, batch_size: int, *, model: str = "slow_net", options=("-q",), **popen
) -> tuple[subprocess.Popen, Path, Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(count):
        Image.new("RGB", (40, 30), (i * 6 % 256, 100, 50)).save(folder / f"im{i:02d}.png")
    out = tmp_path / "out"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hookviz",
            "run",
            str(folder),
            "--model",
            f"tests.conftest:{model}",
            "--weights",
            "none",
            "--layer",
            "features.3",
            "--batch-size",
            str(batch_size),
            "--out",
            str(out),
            *options,
        ],
        cwd=ROOT,
        **popen,
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_kill_leaves_no_broken_file_under_a_real_name(tmp_path):
    process, folder, out = _start_slow_run(tmp_path, 30, 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: len(list(out.glob("*/*.png"))) >= 5)
    process.kill()
    process.wait(timeout=30)
    _assert_complete(out)
    # The next run sweeps temporary files a killed run left behind.
    _run(out, sorted(folder.iterdir())[:1], skip_existing=True)
    assert no_partial_files(out)


def test_a_worker_whose_parent_died_removes_the_file_it_was_writing(tmp_path):
    """After ``kill -9`` of a run, its render workers end within a second; the picture one was
    writing must not stay behind as a temporary file (a resumed run keeps a live writer's)."""
    code = (
        "import threading, time\n"
        "from pathlib import Path\n"
        "from hookviz.runs.workers import exit_with_parent\n"
        "from hookviz.store.files import atomic_write\n"
        "def slow(stream):\n"
        "    stream.write(b'half a picture')\n"
        "    time.sleep(30)\n"
        f"threading.Thread(target=atomic_write, args=(Path({str(tmp_path)!r}) / 'cam.png', slow), daemon=True).start()\n"
        f"while not list(Path({str(tmp_path)!r}).glob('.*.part')):  # however busy the machine, the file is begun\n"
        "    time.sleep(0.01)\n"
        "exit_with_parent(-1)  # not this process's parent: as if the run was killed\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_render_workers_draw_below_the_runs_priority():
    """A run's end waits for its passes; its pictures only have to keep up: a render worker
    runs at a lower priority than the run (``os.nice``), and the run's own is left as it is."""
    import os

    from hookviz.runs.workers import render_pool

    before = os.nice(0)
    if before >= 19:
        pytest.skip("this process runs at the lowest priority already")
    pool = render_pool(1)
    try:
        assert pool.submit(0, os.nice, 0).result(timeout=120) > before
    finally:
        pool.shutdown()
    assert os.nice(0) == before


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


# ----------------------------------------------------------------------------- hardening


def test_a_model_that_fails_on_some_images_fails_only_those(tmp_path):
    images = []
    for i, colour in enumerate([(10, 10, 10), (250, 250, 250), (10, 200, 10), (30, 30, 30)]):
        path = tmp_path / f"im{i}.png"
        Image.new("RGB", (40, 30), colour).save(path)
        images.append(path)
    out = tmp_path / "out"
    summary = _run(out, images, model="tests.conftest:picky_net", batch_size=4)
    assert [s.status for s in summary.statuses] == ["done", "failed", "done", "done"]
    assert "im1.png: the model failed on it (RuntimeError: index 7 is out of bounds" in summary.statuses[1].error
    document = json.loads((out / "run.json").read_text())
    assert document["counts"] == {"images": 4, "done": 3, "failed": 1, "skipped": 0, "not_done": 0}
    assert [f["image"] for f in document["failures"]] == [str(images[1])]


def _images(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        Image.new("RGB", (32, 24), (i * 20 % 256, 90, 40)).save(folder / f"im{i:02d}.png")
    return sorted(folder.iterdir())


@pytest.mark.slow
def test_skip_existing_trusts_only_complete_reports_of_this_runs_layers_and_pictures(tmp_path):
    images = _images(tmp_path / "in", 4)
    out = tmp_path / "out"
    _run(out, images, layers=("features.3",), pictures=("summary",))
    (out / "im00" / "report.json").write_text("")  # empty: killed while... or a disk hiccup
    (out / "im01" / "report.json").write_text('{"layers": [')  # truncated
    (out / "im02" / "report.json").write_text("[]")  # not a report at all
    summary = _run(out, images, layers=("features.3",), pictures=("summary",), skip_existing=True)
    assert [s.status for s in summary.statuses] == ["done", "done", "done", "skipped"]
    # Another layer, or another picture, is not done yet, though report.json exists.
    summary = _run(out, images, layers=("act",), pictures=("summary",), skip_existing=True)
    assert [s.status for s in summary.statuses] == ["done"] * 4
    summary = _run(out, images, layers=("act",), pictures=("summary", "cam"), skip_existing=True)
    assert [s.status for s in summary.statuses] == ["done"] * 4
    summary = _run(out, images, layers=("act",), pictures=("cam",), skip_existing=True)
    assert [s.status for s in summary.statuses] == ["skipped"] * 4
    (out / "im03" / "act-1.cam.png").unlink()
    summary = _run(out, images, layers=("act",), pictures=("cam",), skip_existing=True)
    assert [s.status for s in summary.statuses] == ["skipped"] * 3 + ["done"]


def test_a_run_sweeps_only_leftovers_whose_writer_is_gone(tmp_path):
    from hookviz.store.files import _HOST as host

    images = _images(tmp_path / "in", 1)
    out = tmp_path / "out"
    (out / "im00").mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = out / "im00" / f".report.json~{host}~{sleeper.pid}~abcd.part"
        alive.write_text("another shard is writing this")
        dead_pid = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        ).stdout.strip()
        dead = out / "im00" / f".cam.png~{host}~{dead_pid}~abcd.part"
        dead.write_text("left by a killed run")
        _run(out, images)
        assert alive.exists() and not dead.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.slow
def test_shards_side_by_side_share_an_output_folder(tmp_path):
    folder = tmp_path / "in"
    _images(folder, 12)
    out = tmp_path / "out"
    shards = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hookviz",
                "run",
                str(folder),
                "--model",
                "tests.conftest:slow_net",
                "--weights",
                "none",
                "--layer",
                "features.3",
                "--shard",
                f"{k}/3",
                "--out",
                str(out),
                "-q",
                "--workers",
                "1",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (1, 2, 3)
    ]
    for shard in shards:
        _, stderr = shard.communicate(timeout=180)
        assert shard.returncode == 0, stderr
    documents = [json.loads((out / f"run-{k}-of-3.json").read_text()) for k in (1, 2, 3)]
    taken = [entry["output"] for document in documents for entry in document["images"]]
    assert sorted(taken) == [f"im{i:02d}" for i in range(12)]  # disjoint, and every image
    assert all(document["counts"]["failed"] == 0 for document in documents)
    page = (out / "index.html").read_text()
    assert page and all(f"im{i:02d}/input.jpg" in explorer_pictures(out) for i in range(12))
    assert not (out / "run.json").exists() and no_partial_files(out)


@pytest.mark.slow
@pytest.mark.parametrize("first_shard", [None, "1/2"])
def test_a_run_into_a_folder_another_run_is_writing_is_refused_and_shards_share_one(tmp_path, first_shard):
    """Two runs writing one folder at once would mix their results; the shards of one run share
    it. A killed run leaves nothing behind that holds the folder."""
    from hookviz.inputs.discovery import OUTPUT_MARKER

    images = _images(tmp_path / "in", 4)
    out = tmp_path / "out"

    def command(model, *options):
        names = [str(image) for image in images]
        return [sys.executable, "-m", "hookviz", "run", *names, "--model", f"tests.conftest:{model}", "--layer", "features.3",
                "--pictures", "none", "--out", str(out), "-q", *options]  # fmt: skip

    def second(*options):
        return subprocess.run(command("tiny_net", *options), cwd=ROOT, capture_output=True, text=True, timeout=180)

    shard = ["--shard", first_shard] if first_shard else []
    first = subprocess.Popen(command("long_net", *shard), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (out / OUTPUT_MARKER).exists() or first.poll() is not None, seconds=120)
        whole = second("--cam", "layercam")
        other_shard = second("--shard", "2/2")
        same_shard = second("--shard", "1/2")
        other_count = second("--shard", "1/3")  # another run's shards: they would write 1/2's images too
        assert first.poll() is None  # it held the folder all along
    finally:
        first.kill()
        first.communicate()
    lines = whole.stderr.strip().splitlines()
    assert whole.returncode == 2 and len(lines) == 1, whole.stderr
    holder = "a shard of another hookviz run" if first_shard else "another hookviz run"
    assert lines[0] == (
        f"hookviz: error: --out {out}: {holder} is writing into this folder now; wait for it to end, "
        "or choose another --out (shards of one run share a folder with --shard K/N)"
    )
    if first_shard:
        assert other_shard.returncode == 0, other_shard.stderr  # side by side
        assert same_shard.returncode == 2 and "another run of shard 1/2 is writing" in same_shard.stderr
        assert other_count.stderr.strip().splitlines() == [
            f"hookviz: error: --out {out}: shards of another run (of 2) are writing into this folder now; shards share "
            "a folder only with shards of one count (--shard K/2): wait for them to end, or choose another --out"
        ]
    else:
        assert other_shard.returncode == 2 and "another hookviz run (without --shard) is writing" in other_shard.stderr
    assert not (out / "run.json").exists()  # the refused run wrote nothing (the killed one had not finished)
    assert _run(out, images).count("done") == 4  # the killed run holds nothing


def _children(pid: int) -> list[int]:
    completed = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in completed.stdout.split()]


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


@pytest.mark.slow
def test_render_workers_exit_when_their_parent_is_killed(tmp_path):
    process, _, out = _start_slow_run(tmp_path, 30, 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: len(list(out.glob("*/*.png"))) >= 2)
    workers = [pid for pid in _children(process.pid) if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()]
    assert workers
    process.kill()
    process.wait(timeout=30)
    _wait_for(lambda: not any(_alive(pid) for pid in workers), seconds=10)
    assert not [pid for pid in workers if _alive(pid)]


@pytest.mark.slow
def test_sigterm_to_the_process_group_is_a_clean_quiet_stop(tmp_path):
    import os

    process, _, out = _start_slow_run(
        tmp_path, 40, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    _wait_for(lambda: len(list(out.glob("*/report.json"))) >= 2)
    os.killpg(process.pid, signal.SIGTERM)  # as `timeout` and `scancel` do
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "BrokenProcessPool" not in stderr and "leaked" not in stderr and "Traceback" not in stderr
    document = json.loads((out / "run.json").read_text())
    counts = document["counts"]
    assert counts["failed"] == 0 and counts["done"] > 0 and counts["not_done"] > 0
    assert counts["done"] + counts["not_done"] == 40
    assert no_partial_files(out)
    _assert_complete(out)


def test_shards_of_a_real_run_are_disjoint_and_cover_every_image(tmp_path):
    images = _images(tmp_path / "in", 7)
    out = tmp_path / "out"
    taken = []
    for k in (1, 2, 3):
        summary = _run(out, images, shard=(k, 3))
        taken += [s.output for s in summary.statuses if s.status == "done"]
        assert summary.run_json.name == f"run-{k}-of-3.json"
    assert sorted(taken) == [f"im{i:02d}" for i in range(7)] and len(set(taken)) == 7


def test_a_runs_steps_work_one_by_one(tmp_path):
    """The steps of a Run can be driven and checked alone: start, load, batches, explain,
    submit, collect, finish."""
    from hookviz.runs.runner import Run

    images = _images(tmp_path / "in", 3)
    steps = Run(
        images,
        ModelOptions("tests.conftest:tiny_net", "none"),
        layers=LayerOptions(("features.3",)),
        pictures=PictureOptions(pictures=("summary",)),
        options=RunOptions(out=tmp_path / "out", workers=1),
    )
    steps.start()
    assert steps.renderers.workers == 1 and not (tmp_path / "out").exists()  # nothing is written before the model loads
    steps.load()
    assert (tmp_path / "out").is_dir() and steps.explainer.layers[0].path == "features.3"
    batches = steps.batches()
    first = next(batches)
    assert len(first) == 1  # the first batch sizes the others
    results = steps.explain(first)
    assert results[0][0] == images[0] and results[0][1].layers[0].name == "features.3"
    steps.submit(*results[0])
    assert len(steps.renderers.pending) == 1
    steps.collect(block_until=0)
    assert steps.outcomes.statuses[images[0]].status == "done" and (tmp_path / "out" / "im00" / "features.3.summary.png").exists()
    summary = steps.finish()
    assert summary.count("done") == 1 and json.loads(summary.run_json.read_text())["counts"]["done"] == 1


@pytest.mark.slow
def test_impatient_ctrl_c_three_times_still_ends_cleanly(tmp_path):
    import os

    process, _, out = _start_slow_run(
        tmp_path, 40, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    _wait_for(lambda: len(list(out.glob("*/report.json"))) >= 2)
    for _ in range(3):
        os.killpg(process.pid, signal.SIGINT)  # a terminal sends Ctrl-C to the whole group
        time.sleep(0.3)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted:" in stderr
    document = json.loads((out / "run.json").read_text())
    assert document["interrupted"] and document["counts"]["failed"] == 0
    done = {entry["output"] for entry in document["images"] if entry["status"] == "done"}
    assert done == {p.parent.name for p in out.glob("*/report.json")}  # statuses match the files
    assert no_partial_files(out)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("after", [0.2, 0.5, 1.0, 2.0])
def test_ctrl_c_while_starting_is_one_quiet_line(tmp_path, after, stop):
    """At any moment of start-up: while typer imports, while options are read, while torch
    and the model load (the interpreter's own first ~0.1 s is beyond hookviz's reach)."""
    import os

    process, _, out = _start_slow_run(
        tmp_path, 4, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    time.sleep(after)
    os.killpg(process.pid, stop)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode in (0, 130), stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    if process.returncode == 130:
        assert len(stderr.splitlines()) == 1 and stderr.startswith("hookviz: interrupted"), stderr
        if not (out / "run.json").exists():
            assert "stopped before any image was explained" in stderr


def _stopped_mid_batch(tmp_path: Path, model: str, signals: int) -> tuple[int, str, dict]:
    """Start a run whose first batch (one photo) takes 10 s, send ``signals`` SIGTERMs in its
    middle, and return how many of the model's pauses ended (how far the pass got: counted,
    not timed, since a busy machine slows any run), stderr and run.json."""
    import os

    pauses = tmp_path / "pauses"
    process, _, out = _start_slow_run(
        tmp_path,
        3,
        2,
        model=model,
        options=("-q", "--pictures", "none"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOOKVIZ_TEST_PAUSES": str(pauses)},
    )
    _wait_for(lambda: pauses.exists())  # the first batch's pass has begun its first pause
    time.sleep(0.5)
    for _ in range(signals):
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith("hookviz: interrupted: 0 images written"), stderr
    return pauses.read_text().splitlines().count("ended"), stderr, json.loads((out / "run.json").read_text())


@pytest.mark.slow
def test_a_stop_abandons_the_batch_being_explained(tmp_path):
    """One photo takes 10 s (100 modules of 0.1 s): the stop ends the pass at the next module."""
    ended, _, document = _stopped_mid_batch(tmp_path, "stepped_net", signals=1)
    assert ended < 100  # abandoned before its end
    assert document["interrupted"] is True
    assert document["counts"] == {"images": 3, "done": 0, "failed": 0, "skipped": 0, "not_done": 3}
    assert [entry["status"] for entry in document["images"]] == ["not_done"] * 3


@pytest.mark.slow
def test_a_second_signal_ends_the_run_at_once(tmp_path):
    """One module takes 10 s, so the first stop waits for it; the second does not."""
    ended, _, document = _stopped_mid_batch(tmp_path, "stubborn_net", signals=2)
    assert ended == 0  # the run ended inside that module
    assert document["interrupted"] is True and document["counts"]["not_done"] == 3


def test_a_stop_during_back_propagation_abandons_the_batch_and_leaves_no_hook(tmp_path):
    import threading

    import torch

    from hookviz.runs.runner import Run

    images = _images(tmp_path / "in", 1)
    steps = Run(
        images,
        ModelOptions("tests.conftest:slow_backward_net", "none"),
        layers=LayerOptions(("features.3",)),
        pictures=PictureOptions(pictures=()),
        options=RunOptions(out=tmp_path / "out"),
    )
    steps.start()
    try:
        steps.load()
        batch = next(steps.batches())
        threading.Timer(1.0, steps.request_stop).start()  # the backward pass takes 5 s
        assert steps.explain(batch) == []
        # the pass stopped before its end (how far it got depends on how busy the machine is)
        assert sum(pause.backwards for pause in steps.explainer.model.module.pauses) < 50
    finally:
        steps.finish()
    module = steps.explainer.model.module
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())
    assert torch.is_grad_enabled()


_LEFT_BEHIND = """
import ctypes, json, os, subprocess, sys
from pathlib import Path

# Orphans come to this process (a subreaper) and stay listed, as zombies, until it reaps them:
# a process the command did not wait for cannot slip away unseen.
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
command = subprocess.Popen(json.loads(sys.argv[1]), cwd=sys.argv[2], start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
status = command.wait()
left = []
for entry in Path("/proc").iterdir():
    if entry.name.isdigit():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if int(fields[2]) == command.pid:
            left.append(f"{name} ({fields[0]})")
print(json.dumps([status, left]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux subreaper and /proc")
def test_the_command_returns_after_every_process_it_started_has_exited(tmp_path):
    """Render workers and multiprocessing's resource tracker: none outlives the command."""
    folder = _images(tmp_path / "in", 3)[0].parent
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "hookviz",
        "run",
        str(folder),
        "--model",
        "tests.conftest:tiny_net",
        "--weights",
        "none",
        "--layer",
        "features.3",
        "--pictures",
        "summary",
        "--out",
        str(out),
    ]
    status, left = json.loads(python_output(_LEFT_BEHIND, args=[json.dumps(command), str(ROOT)]))
    assert status == 0
    assert left == []
    assert json.loads((out / "run.json").read_text())["counts"]["done"] == 3


def test_a_run_that_stops_on_an_error_does_not_wait_for_its_render_workers(tmp_path, monkeypatch):
    """What they would draw is not kept: a run that stops as the model loads (a class the
    model lacks) kills its workers instead of waiting for them to start and warm up (5 s on
    2 busy cores). Killed, not timed: a busy machine makes any run slower."""
    import hookviz.runs.workers as workers
    from hookviz import TargetOptions
    from hookviz.errors import TargetError
    from hookviz.runs.runner import Run

    started = []
    warm_up = workers.RenderPool.warm_up
    monkeypatch.setattr(
        workers.RenderPool, "warm_up", lambda pool: warm_up(pool) or started.extend(pool.executor._processes.values())
    )
    steps = Run(
        _images(tmp_path / "in", 4),
        ModelOptions("tests.conftest:tiny_net", "none"),
        layers=LayerOptions(("features.3",)),
        target=TargetOptions(target="99"),
        pictures=PictureOptions(pictures=("summary",)),
        options=RunOptions(out=tmp_path / "out", workers=2),
    )
    with pytest.raises(TargetError):
        steps.execute()
    assert len(started) == 2 and [process.exitcode for process in started] == [-signal.SIGKILL] * 2


def _run_with_a_killer(tmp_path: Path, doomed: str) -> tuple[subprocess.CompletedProcess, Path]:
    """``hookviz run`` over 10 small photos whose render worker dies (SIGKILL, as the OOM
    killer sends) as it is about to draw the photos ``doomed`` names (tests/kill_plugin.py)."""
    import os

    folder, out = tmp_path / "in", tmp_path / "out"
    _images(folder, 10)
    environment = {**os.environ, "HOOKVIZ_PLUGINS": "tests.kill_plugin", "HOOKVIZ_TEST_KILL": doomed}
    command = [sys.executable, "-m", "hookviz", "run", str(folder), "--model", "tests.conftest:tiny_net"]
    command += ["--weights", "none", "--layer", "features.3", "--pictures", "summary,doom", "--workers", "2"]
    command += ["--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr and "BrokenProcessPool" not in done.stderr, done.stderr
    return done, out


@pytest.mark.slow
def test_a_killed_render_worker_fails_only_the_image_it_was_drawing(tmp_path):
    done, out = _run_with_a_killer(tmp_path, "im04")
    assert done.returncode == 1, done.stderr
    document = json.loads((out / "run.json").read_text())
    assert document["counts"] == {"images": 10, "done": 9, "failed": 1, "skipped": 0, "not_done": 0}
    (failed,) = [entry for entry in document["images"] if entry["status"] == "failed"]
    assert failed["output"] == "im04" and "render worker was killed" in failed["error"], failed
    lines = [line for line in done.stderr.splitlines() if "render worker was killed" in line]
    assert len(lines) == 2 and all("im04.png" in line for line in lines), done.stderr  # the failure, and a note
    assert sorted(p.parent.name for p in out.glob("*/report.json")) == [f"im{i:02d}" for i in range(10) if i != 4]
    assert all((out / f"im{i:02d}" / "features.3.summary.png").exists() for i in range(10) if i != 4)
    assert no_partial_files(out)
    _assert_complete(out)


@pytest.mark.slow
def test_render_workers_that_keep_dying_stop_the_run_in_one_line(tmp_path):
    done, out = _run_with_a_killer(tmp_path, "*")
    assert done.returncode == 1, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("hookviz: error: render workers were killed 3 times in a row"), done.stderr
    document = json.loads((out / "run.json").read_text())
    assert document["counts"]["done"] == 0 and "killed 3 times" in document["error"]
    assert no_partial_files(out)


@pytest.mark.slow  # a fresh interpreter and render workers that each start it again: about 10 s
def test_a_script_that_calls_run_without_a_main_guard_is_told_to_add_one(tmp_path):
    """Each spawned render worker imports the calling script and ran hookviz.run again, which the
    run's folder lock refused; the run then blamed the out-of-memory killer or kill -9."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from pathlib import Path\n"
        "import hookviz\n"
        "from hookviz.options import InputOptions, LayerOptions, ModelOptions, RunOptions\n"
        f"photos = [Path({str(SAMPLES / 'cat.png')!r}), Path({str(SAMPLES / 'coffee.png')!r})]\n"
        "hookviz.run(photos, ModelOptions('tests.conftest:tiny_net', weights='none'), inputs=InputOptions(resize=32),\n"
        f"            layers=LayerOptions(('act:1',)), options=RunOptions(out=Path({str(tmp_path / 'out')!r})))\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "another hookviz run is writing" not in done.stderr
    workers = [line for line in done.stderr.splitlines() if line.startswith("hookviz.errors.UsageError: ")]
    assert workers and all('put the call under `if __name__ == "__main__":`' in line for line in workers)
    last = done.stderr.strip().splitlines()[-1]
    assert 'unguarded.py calls hookviz.run without `if __name__ == "__main__":`' in last, last


def test_a_runs_phase_goes_from_loading_to_batches_to_finishing_and_a_stop_makes_it_interrupted():
    from hookviz.runs.stopping import Phase, RunState

    state = RunState()
    assert state.loading and not state.stop_asked and state.unfinished_reason is None
    state.begin_batches()
    assert state.phase is Phase.RUNNING and not state.loading
    with pytest.raises(RuntimeError, match="running phase"):
        state.begin_batches()
    assert state.begin_finishing() is False and state.phase is Phase.FINISHING
    state.fail("boom")
    assert state.unfinished_reason == "the run stopped on an error"
    stopped = RunState()
    stopped.request_stop()  # while loading: the run ends there, interrupted
    assert stopped.stop_asked and stopped.begin_finishing() is True and stopped.unfinished_reason == "interrupted"


def test_a_report_a_killed_worker_wrote_after_the_run_began_is_removed_an_earlier_one_kept(tmp_path):
    """A second Ctrl-C kills the render workers: one that wrote its report.json before its result
    came back leaves a report the run file calls not done; only reports of this run go."""
    import os

    from hookviz.store.files import REPORT, remove_reports_since

    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        folder.mkdir()
        (folder / REPORT).write_text("{}")
    os.utime(old / REPORT, (1000.0, 1000.0))
    remove_reports_since([old, new, tmp_path / "missing"], since=2000.0)
    assert (old / REPORT).exists() and not (new / REPORT).exists()
