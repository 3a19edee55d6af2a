from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hookviz import explain
from hookviz.store.files import atomic_write, layer_stems, output_names, sweep_stale_files

from .conftest import no_partial_files


def test_atomic_write_replaces_whole_files_and_cleans_up(tmp_path, monkeypatch):
    target = tmp_path / "a" / "report.json"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    import os

    def failing_replace(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        atomic_write(target, b"three")
    assert target.read_bytes() == b"two" and no_partial_files(tmp_path)


def test_atomic_write_streams_from_a_writer_and_keeps_the_old_file_if_it_fails(tmp_path):
    """tensors.npz is written by np.savez straight into the temporary file: one that fails
    halfway leaves the previous file whole and no temporary file behind."""
    target = tmp_path / "tensors.npz"
    atomic_write(target, lambda stream: np.savez(stream, a=np.arange(3.0)))
    assert np.load(target)["a"].tolist() == [0.0, 1.0, 2.0]

    def half_then_fail(stream):
        stream.write(b"PK half a zip")
        raise MemoryError("out of memory")

    with pytest.raises(MemoryError):
        atomic_write(target, half_then_fail)
    assert np.load(target)["a"].tolist() == [0.0, 1.0, 2.0] and no_partial_files(tmp_path)


def test_sweep_removes_leftovers_only(tmp_path):
    (tmp_path / "cat").mkdir()
    import os
    import time

    (tmp_path / "cat" / ".report.json.abc.part").write_text("half")  # an older hookviz's, a day old
    os.utime(tmp_path / "cat" / ".report.json.abc.part", (time.time() - 90000, time.time() - 90000))
    (tmp_path / "cat" / "report.json").write_text("{}")
    assert sweep_stale_files(tmp_path) == 1
    assert (tmp_path / "cat" / "report.json").exists() and no_partial_files(tmp_path)


def test_a_run_ending_at_once_sweeps_its_own_and_its_killed_workers_files_only(tmp_path):
    """A second Ctrl-C kills the render workers mid-write and ends the process from a signal
    handler: their temporary files and the process's own go; a shard still running keeps its."""
    import os
    import subprocess

    from hookviz.store import files

    worker, other_shard = (subprocess.Popen(["sleep", "30"]) for _ in range(2))  # both still running
    try:
        (tmp_path / "cat").mkdir()
        parts = {}
        for name, pid in (("mine", os.getpid()), ("worker", worker.pid), ("other", other_shard.pid)):
            parts[name] = tmp_path / "cat" / f".cam.png~{files._HOST}~{pid}~0123abcd.part"
            parts[name].write_bytes(b"half")
        assert sweep_stale_files(tmp_path) == 0  # every writer still runs
        assert sweep_stale_files(tmp_path, writers={os.getpid(), worker.pid}) == 2
        assert [name for name, path in parts.items() if path.exists()] == ["other"]
    finally:
        for process in (worker, other_shard):
            process.kill()
            process.wait()


def test_names():
    assert layer_stems(["layer3.5.relu:1"]) == {"layer3.5.relu:1": "layer3.5.relu-1"}
    from pathlib import Path

    names = output_names([Path("x/a b.png"), Path("y/ü.png")])
    assert names[Path("x/a b.png")] == "a b" and names[Path("y/ü.png")] == "ü"


def test_save_writes_report_last_with_every_file(tmp_path, photo):
    from .conftest import tiny_net

    result = explain(tiny_net().eval(), photo, layers=["features.1"])
    written = result.save(tmp_path / "out", save_tensors=True, grad_channels=True)
    assert written[-1].name == "report.json"
    report = json.loads(written[-1].read_text())
    assert report["files"] == [p.name for p in written[:-1]]
    assert "features.1.grad_channels.png" in report["files"]
    arrays = np.load(tmp_path / "out" / "tensors.npz")
    np.testing.assert_array_equal(arrays["features.1/cam"], result.layers[0].cam)


def test_save_over_another_result_removes_the_files_its_report_listed_only(tmp_path, photo):
    from .conftest import tiny_net

    model, out = tiny_net().eval(), tmp_path / "out"
    first = explain(model, photo, layers=["features.0"]).save(out, save_tensors=True)
    earlier = json.loads((out / "report.json").read_text())["files"]
    assert "features.0.summary.png" in earlier and "tensors.npz" in earlier
    (out / "notes.txt").write_text("mine")
    (out / "features.9.summary.png").write_bytes(b"not hookviz's")  # named by no report
    (out / "report.json").write_text((out / "report.json").read_text().replace('"tensors.npz"', '"../outside.npz"'))
    (tmp_path / "outside.npz").write_bytes(b"")
    second = explain(model, photo, layers=["features.1"]).save(out, ("summary", "cam"))
    left = sorted(p.name for p in out.iterdir())
    assert left == sorted([p.name for p in second] + ["notes.txt", "features.9.summary.png", "tensors.npz"])
    assert not any(name.startswith("features.0.") for name in left) and (tmp_path / "outside.npz").exists()
    assert {p.name for p in first} - set(left) == {n for n in earlier if n.startswith("features.0.")}


@pytest.mark.slow
def test_files_get_the_umask_mode_and_the_umask_is_never_touched(tmp_path):
    from .conftest import python_output

    code = (
        "import os\n"
        "calls = []\n"
        "real = os.umask\n"
        "os.umask(0o027)\n"
        "os.umask = lambda mask: calls.append(mask) or real(mask)\n"
        "from pathlib import Path\n"
        "from hookviz.store.files import atomic_write\n"
        f"path = atomic_write(Path({str(tmp_path)!r}) / 'a.json', b'{{}}')\n"
        "print(oct(path.stat().st_mode & 0o777), calls)\n"
    )
    assert python_output(code).split() == ["0o640", "[]"]


def test_output_folder_names_never_take_a_run_files_name():
    from pathlib import Path

    names = output_names([Path("a/run.json.png"), Path("b/index.html.jpg"), Path("c/Run-2-of-4.json.png"), Path("d/x.png")])
    assert names[Path("d/x.png")] == "x"
    assert all(
        name.startswith(stem) and name != stem
        for name, stem in (
            (names[Path("a/run.json.png")], "run.json"),
            (names[Path("b/index.html.jpg")], "index.html"),
            (names[Path("c/Run-2-of-4.json.png")], "Run-2-of-4.json"),
        )
    )
    stems = layer_stems(["heads.a/b", "heads.a_b", "relu:1"])
    assert stems["heads.a_b"] == "heads.a_b" and stems["heads.a/b"].startswith("heads.a_b-") and stems["relu:1"] == "relu-1"


def test_atomic_write_follows_links_and_writes_into_devices_and_pipes(tmp_path):
    import os
    import threading

    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    atomic_write(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo, "rb").read()))
    reader.start()
    atomic_write(fifo, b"through")
    reader.join(timeout=10)
    assert received == [b"through"] and fifo.is_fifo()
    atomic_write(Path(os.devnull), b"discarded")
    assert Path(os.devnull).is_char_device()


def test_library_messages_never_pass_on_advice_to_load_unsafely():
    from hookviz.errors import first_line

    torch_text = (
        "Weights only load failed. Re-running `torch.load` with `weights_only` set to `False` will likely "
        "succeed, but it can result in arbitrary code execution. Unsupported global: GLOBAL os.system"
    )
    assert first_line(Exception(torch_text)) == "Weights only load failed. Unsupported global: GLOBAL os.system"
    assert "allow_pickle" not in first_line(ValueError("Cannot load file containing pickled data when allow_pickle=False"))
