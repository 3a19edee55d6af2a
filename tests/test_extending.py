"""The three extension points hold: a plug-in module registers a method, a task and a picture
kind (tests/extension_plugin.py), and ``hookviz run`` uses them end to end with no other change."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from .conftest import ROOT, SAMPLES
from .explorer_helpers import explorer_pictures


@pytest.mark.slow  # a fresh interpreter and a render worker: about 5 s of CPU
def test_a_plugin_method_task_and_picture_kind_run_end_to_end(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookviz",
            "run",
            str(SAMPLES / "cat.png"),
            "--model",
            "tests.extension_plugin:brightness_net",
            "--weights",
            "none",
            "--layer",
            "features.2",
            "--cam",
            "peak",
            "--pictures",
            "summary,cam,toy",
            "--save-tensors",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HOOKVIZ_PLUGINS": "tests.extension_plugin"},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["task"] == "regress"  # recognised from the output by the plug-in task's priority
    assert "cat.png: value " in done.stdout  # the task's own progress line
    layer = report["layers"][0]
    assert layer["cam"]["method"] == "peak"
    assert layer["pictures"]["toy"] == "features.2.toy.png" and layer["pictures"]["cam"] == "features.2.cam.png"
    for name in ("features.2.toy.png", "features.2.cam.png", "features.2.summary.png"):
        assert Image.open(out / "cat" / name).size[0] > 100
    # the method's map is what the plug-in computes, on the recorded output
    with np.load(out / "cat" / "tensors.npz") as tensors:
        output, cam = tensors["features.2/output"], tensors["features.2/cam"]
    output = output.reshape(output.shape[-3:])  # (C, h, w), with or without the batch axis
    best = output.reshape(output.shape[0], -1).max(axis=1).argmax()
    np.testing.assert_allclose(cam, np.maximum(output[best], 0), rtol=1e-5, atol=1e-6)
    assert "toy picture" in explorer_pictures(out).values()


def _installed_plugin(tmp_path, value: str) -> dict:
    """An environment in which an installed package declares ``value`` in hookviz.plugins."""
    site = tmp_path / "site"
    info = site / "hookviz_toy_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hookviz-toy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[hookviz.plugins]\ntoy = {value}\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_an_installed_plugin_is_listed_in_help_and_a_broken_one_is_one_line(tmp_path):
    env = _installed_plugin(tmp_path, "tests.extension_plugin")
    done = subprocess.run(
        [sys.executable, "-m", "hookviz", "run", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "peak" in done.stdout and "regress" in done.stdout and "toy" in done.stdout
    env = _installed_plugin(tmp_path / "broken", "tests.no_such_plugin")
    done = subprocess.run(
        [sys.executable, "-m", "hookviz", "run", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "hookviz: error: plug-in 'tests.no_such_plugin' (entry point 'toy' of hookviz.plugins) cannot be imported: "
        "ModuleNotFoundError: No module named 'tests.no_such_plugin'; fix it, or unset it to run without it"
    ]


_CLASHING = """
from dataclasses import dataclass
from hookviz.methods import register_method
from hookviz.options.declared import option

@dataclass(frozen=True)
class ClashOptions:
    {field}

@register_method("{method}", needs_gradients=False, options=ClashOptions)
def clashing(ctx):
    return ctx.activations.mean(dim=1)
"""


@pytest.mark.parametrize(
    "method, field, flag",
    [
        ("toy-quiet", 'quiet: bool = option(False, help="Shh.")', "--quiet"),  # a flag only the command has
        ("toy-layer", 'layer: int = option(1, help="Which.")', "--layer"),  # the command's, not explain()'s (layers)
        ("toy-out", 'power: float = option(1.0, help="How much.", flag="--out")', "--out"),  # the name is free, the flag not
    ],
)
def test_a_plugin_setting_whose_flag_the_command_has_is_one_line(
    method, field, flag, tmp_path, monkeypatch, capsys, registries_restored
):
    """A plug-in's setting named or flagged as one of ``hookviz run``'s own options is refused in
    one line naming the plug-in's group, before typer builds the command (a traceback from inside
    typer before; a flag given its own ``flag=`` took the command's ``--out`` over silently)."""
    from hookviz.cli import _load_plugins

    module = f"clash_{method.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(_CLASHING.format(field=field, method=method))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HOOKVIZ_PLUGINS", module)
    monkeypatch.setattr(sys, "path", list(sys.path))  # _load_plugins puts the folder first: undone after
    with pytest.raises(SystemExit) as ended:
        _load_plugins()
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"hookviz: error: method '{method}' ({module}.ClashOptions): its setting {flag} is an option of the command "
        "already; rename it"
    ]
    sys.modules.pop(module, None)
