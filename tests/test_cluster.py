"""torchrun and Slurm arrays: each process takes its slice of the photos (and its GPU) from the
launcher's variables, and all of them write one output folder with one gallery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .cli_helpers import hookviz_cli
from .conftest import ROOT, no_partial_files
from .explorer_helpers import explorer_pictures

TINY = ["--model", "tests.conftest:tiny_net", "--weights", "none", "--layer", "features.3"]
LAUNCHERS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
)


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
    """Whatever launched pytest, the tests set the launchers' variables themselves."""
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)


def _photos(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(folder / f"im{i}.png")
    return folder


def _cli(args, env: dict):
    return hookviz_cli("run", *map(str, args), env=env, catch_exceptions=False)


def _processes(args, envs: list[dict]) -> list[subprocess.CompletedProcess]:
    """One ``python -m hookviz run`` per environment, side by side, as a launcher starts them."""
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHERS}
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "hookviz", "run", *map(str, args)],
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**base, **env, "OMP_NUM_THREADS": "1"},
        )
        for env in envs
    ]
    results = []
    for process in started:
        stdout, stderr = process.communicate(timeout=240)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return results


def _assert_one_run_in_shards(out: Path, count: int, images: int) -> None:
    documents = [json.loads((out / f"run-{k}-of-{count}.json").read_text()) for k in range(1, count + 1)]
    taken = [entry["output"] for document in documents for entry in document["images"]]
    assert sorted(taken) == [f"im{i}" for i in range(images)]  # disjoint, and every photo
    page = (out / "index.html").read_text()
    pictures = explorer_pictures(out)
    assert all(f"im{i}/input.jpg" in pictures for i in range(images)) and f"{count} shards" in page
    assert not (out / "run.json").exists() and no_partial_files(out)


@pytest.mark.slow
def test_torchrun_processes_each_take_their_shard_of_one_run(tmp_path):
    photos, out = _photos(tmp_path / "in", 5), tmp_path / "out"
    envs = [{"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"} for r in (0, 1)]
    results = _processes([photos, *TINY, "--pictures", "cam", "--workers", "1", "--out", out, "-q"], envs)
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    _assert_one_run_in_shards(out, 2, 5)
    assert json.loads((out / "run-2-of-2.json").read_text())["shard"] == [2, 2]


@pytest.mark.slow
def test_torchrun_itself_runs_the_command_as_the_docs_say(tmp_path):
    """``torchrun --standalone --nproc-per-node 2 -m hookviz run ...``, for real (on the CPU)."""
    pytest.importorskip("torch.distributed.run")
    photos, out = _photos(tmp_path / "in", 5), tmp_path / "out"
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHERS}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "hookviz",
            "run",
            str(photos),
            *TINY,
            "--pictures",
            "cam",
            "--workers",
            "1",
            "--out",
            str(out),
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**base, "OMP_NUM_THREADS": "1"},
    )
    assert completed.returncode == 0, completed.stderr
    _assert_one_run_in_shards(out, 2, 5)


@pytest.mark.slow
def test_slurm_array_tasks_take_their_shard_with_shard_auto(tmp_path):
    photos, out = _photos(tmp_path / "in", 5), tmp_path / "out"
    array = {"SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_MAX": "4"}
    envs = [{**array, "SLURM_ARRAY_TASK_ID": task} for task in ("3", "4")]
    results = _processes([photos, *TINY, "--pictures", "cam", "--workers", "1", "--shard", "auto", "--out", out, "-q"], envs)
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    _assert_one_run_in_shards(out, 2, 5)


def _run_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("run*.json"))


def test_torchrun_variables_pick_the_shard_without_a_flag(tmp_path):
    photos = _photos(tmp_path / "in", 3)
    result = _cli([photos, *TINY, "--pictures", "none", "--out", tmp_path / "out", "-q"], {"RANK": "1", "WORLD_SIZE": "3"})
    assert result.exit_code == 0, result.output
    assert _run_files(tmp_path / "out") == ["run-2-of-3.json"]
    assert [e["output"] for e in json.loads((tmp_path / "out" / "run-2-of-3.json").read_text())["images"]] == ["im1"]


@pytest.mark.parametrize(
    "env, shard, expected",
    [
        ({"RANK": "1", "WORLD_SIZE": "3"}, "1/1", ["run-1-of-1.json"]),  # an explicit --shard wins
        ({"RANK": "0", "WORLD_SIZE": "1"}, None, ["run.json"]),  # one process does all the work
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}, None, ["run.json"]),  # an array, unasked
        (
            {
                "SLURM_ARRAY_TASK_ID": "5",
                "SLURM_ARRAY_TASK_COUNT": "3",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_STEP": "2",
                "SLURM_ARRAY_TASK_MAX": "5",
            },
            "auto",
            ["run-3-of-3.json"],
        ),  # --array=1-5:2
        ({}, "auto", ["run.json"]),  # no launcher: the whole list
    ],
)
def test_which_shard_the_environment_gives(tmp_path, env, shard, expected):
    photos = _photos(tmp_path / "in", 3)
    flag = ["--shard", shard] if shard else []
    result = _cli([photos, *TINY, *flag, "--pictures", "none", "--out", tmp_path / "out", "-q"], env)
    assert result.exit_code == 0, result.output
    assert _run_files(tmp_path / "out") == expected


@pytest.mark.parametrize(
    "env, shard, words",
    [
        ({"RANK": "1"}, None, "RANK is set but WORLD_SIZE is not"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, None, "RANK=2 is not below WORLD_SIZE=2"),
        ({"RANK": "one", "WORLD_SIZE": "2"}, None, "RANK='one' is not a whole number"),
        (
            {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "7"},
            "auto",
            "not one evenly spaced range",
        ),  # --array=1,3,7
        ({"SLURM_ARRAY_TASK_ID": "2"}, "auto", "SLURM_ARRAY_TASK_COUNT is not"),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"},
            "auto",
            "both torchrun (WORLD_SIZE=2) and a Slurm array",
        ),
    ],
)
def test_inconsistent_launcher_variables_are_one_line_and_exit_2(tmp_path, env, shard, words):
    photos = _photos(tmp_path / "in", 2)
    flag = ["--shard", shard] if shard else []
    result = _cli([photos, *TINY, *flag, "--out", tmp_path / "out"], env)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "--shard K/N" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_each_torchrun_process_takes_the_gpu_of_its_local_rank(monkeypatch):
    import torch

    from hookviz.errors import UsageError
    from hookviz.runs.runner import resolve_device

    assert resolve_device("auto") in ("cpu", "mps", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == "cuda:1"
    assert resolve_device("cpu") == "cpu"  # an explicit --device wins
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(UsageError, match="LOCAL_RANK=2, but this machine has 2 CUDA devices"):
        resolve_device("auto")


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_torchrun_processes_share_the_cpus_for_render_workers(tmp_path, monkeypatch):
    """Render workers default to one per CPU; N processes on a machine split those CPUs."""
    import hookviz.runs.workers as workers

    asked = []
    real = workers.render_pool
    monkeypatch.setattr(workers, "render_pool", lambda processes, **kw: asked.append(processes) or real(processes, **kw))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(12)))
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    photos = _photos(tmp_path / "in", 5)
    result = _cli([photos, *TINY, "--pictures", "cam", "--shard", "1/1", "--out", tmp_path / "out", "-q"], {})
    assert result.exit_code == 0, result.output
    assert asked == [3]
