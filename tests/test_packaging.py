"""The package as a user installs it: a built wheel, not this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from .conftest import ROOT, SAMPLES


@pytest.mark.slow
def test_a_built_wheel_holds_every_module_and_runs_the_demo(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("hookviz-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packaged = {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "hookviz").rglob("*") if p.suffix in (".py", ".pyi", ".typed", ".json")
    }
    assert packaged <= names, packaged - names
    # Installed alone (its dependencies come from this environment), away from the checkout.
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"), str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    demo = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookviz",
            "run",
            "--model",
            "efficientnet_lite0",
            "--layer",
            "_blocks.-1",
            str(SAMPLES / "cat.png"),
            "--out",
            str(tmp_path / "out"),
            "-q",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert demo.returncode == 0, demo.stderr
    located = subprocess.run(
        [sys.executable, "-c", "import hookviz; print(hookviz.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True
    ).stdout
    assert located.startswith(str(tmp_path / "site"))
    assert (tmp_path / "out" / "cat" / "_blocks.15.cam.png").exists()
