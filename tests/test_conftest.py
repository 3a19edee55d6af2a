"""The suite's own rules (tests/conftest.py), checked in a pytest of their own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

_TESTS = """
import os
import time


def test_that_spins():
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass


def test_torch_has_one_thread():
    import torch

    assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
"""


@pytest.mark.slow
def test_the_cpu_gate_reports_a_greedy_unmarked_test_and_torch_has_one_thread_without_xdist(tmp_path):
    """A test over the CPU limit of unmarked tests is listed at the end, and passes: CPU time
    still grows on a slow or busy machine. Every run the gate judges, with or without
    ``-n``, gives torch one thread, whose spinning it would otherwise count."""
    (tmp_path / "test_greedy.py").write_text(_TESTS)
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("OMP_", "MKL_", "PYTEST_"))}
    environment.update(HOOKVIZ_TEST_CPU_LIMIT="0.3", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "-n", "0"]
    done = subprocess.run(
        [*command, "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    summary = done.stdout.split("unmarked tests over the CPU limit", 1)[1].splitlines()
    assert [line for line in summary if "test_greedy.py::" in line] == [
        line for line in summary if line.strip().endswith("test_greedy.py::test_that_spins")
    ], done.stdout
    assert any("test_that_spins" in line for line in summary), done.stdout
