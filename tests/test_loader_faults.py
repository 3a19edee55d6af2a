"""The loader's thread ends, whatever a sample kind raises in it (issue 37): ``SystemExit`` or
``KeyboardInterrupt`` from a plug-in's decode fails that sample, and the run goes on and ends,
where it used to wait forever at 0% CPU for the end marker the dead thread never wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from PIL import Image

from hookviz.errors import HookvizError, ImageError
from hookviz.inputs.loader import ImageLoader

from .conftest import ROOT


def _photos(folder, names):
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in names:
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(folder / name)
    return folder


def _drained(loader, seconds=20.0):
    """What iterating ``loader`` gives, in a thread of its own: a hang fails the test instead of the suite."""
    got: list = []

    def drain():
        try:
            got.extend(loader)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            got.append(exc)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    thread.join(seconds)
    loader.stop()
    assert not thread.is_alive(), f"the loader still waits after {seconds} s"
    return got


class _Raising:
    name = "raising"

    def __init__(self, fault):
        self.fault = fault

    def load(self, path, max_pixels, settings=None):
        if path.name.startswith("bad"):
            raise self.fault
        return path.name

    def prepare(self, loaded, preprocessing, max_pixels, settings=None):
        return loaded


@pytest.mark.parametrize("fault", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_a_kind_whose_decode_raises_a_base_exception_fails_that_sample_alone(tmp_path, fault):
    paths = [tmp_path / name for name in ("a.png", "bad.png", "c.png")]
    loader = ImageLoader(paths, 10**8, limit=2, kind=_Raising(fault)).start()
    loader.set_preprocessing(object())
    got = _drained(loader)
    assert [path.name for path, _ in got] == ["a.png", "bad.png", "c.png"], got
    error = got[1][1]
    assert isinstance(error, ImageError) and "bad.png: could not decode" in str(error)
    assert type(fault).__name__ in str(error) and "'raising'" in str(error) and "\n" not in str(error)
    assert [value for _, value in (got[0], got[2])] == ["a.png", "c.png"]


def test_a_thread_that_fails_of_itself_ends_the_iteration_in_one_line(tmp_path, monkeypatch):
    def broken(self):
        raise SystemExit("loader fault")

    monkeypatch.setattr(ImageLoader, "_load_all", broken)
    got = _drained(ImageLoader([tmp_path / "a.png"], 10**8, limit=2).start())
    assert len(got) == 1 and isinstance(got[0], HookvizError), got
    assert str(got[0]) == "the sample loader stopped: SystemExit: loader fault"


@pytest.mark.slow  # a fresh interpreter
def test_a_plugin_kind_raising_systemexit_or_keyboardinterrupt_fails_those_samples_and_the_run_ends(tmp_path):
    photos = _photos(tmp_path / "photos", ["a.png", "exit.png", "interrupt.png"])
    command = [sys.executable, "-m", "hookviz", "run", str(photos), "--model", "tests.raising_plugin:raising_net"]
    command += ["--weights", "none", "--out", str(tmp_path / "out")]
    env = {**os.environ, "HOOKVIZ_PLUGINS": "tests.raising_plugin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1, done.stderr
    assert "1 of 3 photos done" in done.stderr and "Traceback" not in done.stderr, done.stderr
    statuses = {
        entry["image"].rsplit("/", 1)[-1]: entry for entry in json.loads((tmp_path / "out" / "run.json").read_text())["images"]
    }
    assert statuses["a.png"]["status"] == "done"
    assert "SystemExit: 3" in statuses["exit.png"]["error"] and "KeyboardInterrupt" in statuses["interrupt.png"]["error"]
