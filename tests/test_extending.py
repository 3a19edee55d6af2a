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


def _signals(folder, count=2, seed=0):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for index in range(count):
        values = rng.normal(size=(64, 2)).astype(np.float32)
        np.savetxt(folder / f"s{index}.csv", values, delimiter=",", header="x,y", comments="", fmt="%.6f")
    return folder


@pytest.mark.slow  # a fresh interpreter and a render worker
def test_the_signal_csv_example_plug_in_runs_end_to_end_and_its_cam_is_grad_cams(tmp_path, registries_restored):
    """tests/signal_plugin.py, a sample kind in 60 lines on the public helpers (find_files,
    signal_picture), through ``hookviz run``; its map equals Grad-CAM computed here with plain hooks."""
    import torch

    from tests.signal_plugin import signal_net

    folder, out = _signals(tmp_path / "signals"), tmp_path / "out"
    command = [sys.executable, "-m", "hookviz", "run", str(folder), "--model", "tests.signal_plugin:signal_net"]
    command += ["--weights", "none", "--layer", "3", "--save-tensors", "--out", str(out)]
    env = {**os.environ, "HOOKVIZ_PLUGINS": "tests.signal_plugin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    model = signal_net().eval()
    for name in ("s0", "s1"):
        report = json.loads((out / name / "report.json").read_text())
        assert report["layers"][0]["pictures"]["cam"] == "3.cam.png"
        signal = torch.from_numpy(np.loadtxt(folder / f"{name}.csv", delimiter=",", skiprows=1, dtype=np.float32).T.copy())
        activation = model[:4](signal[None])  # the layer's output, then the rest of the model on it
        logits = model[4](activation)
        (grad,) = torch.autograd.grad(logits[0, logits[0].argmax()], activation)
        cam = torch.relu((grad.mean(dim=-1, keepdim=True) * activation).sum(dim=1))[0].detach().numpy()
        with np.load(out / name / "tensors.npz") as tensors:
            np.testing.assert_allclose(tensors["3/cam"].reshape(cam.shape), cam, rtol=1e-4, atol=1e-6)


def test_find_files_takes_the_suffixes_asked_and_refuses_a_folder_without_them(tmp_path):
    from hookviz.inputs.discovery import NothingFound, find_files

    folder = _signals(tmp_path / "signals")
    (folder / "notes.txt").write_text("not a signal")
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "h.csv").write_text("x\n1\n")
    (folder / "deeper").mkdir()
    (folder / "deeper" / "S2.CSV").write_text("x\n1\n")
    found = find_files([str(folder)], (".csv",), "signal (.csv file)")
    assert found == [folder / "deeper" / "S2.CSV", folder / "s0.csv", folder / "s1.csv"]
    assert find_files([str(folder / "s1.csv"), str(folder / "s1.csv")], (".csv",), "signal") == [folder / "s1.csv"]
    with pytest.raises(NothingFound, match=r"names no signal \(\.csv file\) \(hidden and output folders are skipped\)"):
        find_files([str(folder / "deeper")], (".npy",), "signal (.csv file)")


def test_a_signal_picture_is_one_grey_band_per_channel_from_its_minimum_to_its_maximum():
    from hookviz.samples.shown import signal_picture

    values = np.array([[0.0, 1.0, 2.0, 4.0] * 4, [5.0] * 16], dtype=np.float32)
    picture = signal_picture(values)
    assert picture.shape == (4, 16, 3) and picture.dtype == np.uint8  # bands of 16 / 4 / 2 = 2 rows
    assert list(picture[0, :4, 0]) == [0, 64, 128, 255] and (picture[0] == picture[1]).all()
    assert (picture[2:] == 0).all()  # a flat channel: its minimum everywhere


def test_gaussian_blur_is_scipys_along_each_spatial_axis():
    import math

    import torch
    from scipy.ndimage import gaussian_filter1d

    from hookviz.methods.integrated_gradients import gaussian_blur

    image = torch.rand(2, 3, 20, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    sigma = 2.0  # the default: a tenth of the shorter side
    theirs = image.numpy()
    for axis in (2, 3):  # torch's "reflect" padding is scipy's "mirror"
        theirs = gaussian_filter1d(theirs, sigma, axis=axis, mode="mirror", truncate=math.ceil(3 * sigma) / sigma)
    np.testing.assert_allclose(gaussian_blur(image).numpy(), theirs, rtol=1e-10, atol=1e-12)
    signal = torch.rand(1, 2, 50, dtype=torch.float64)
    expected = gaussian_filter1d(signal.numpy(), 1.5, axis=2, mode="mirror", truncate=math.ceil(4.5) / 1.5)
    np.testing.assert_allclose(gaussian_blur(signal, sigma=1.5).numpy(), expected, rtol=1e-10, atol=1e-12)
