"""A task that changes only what is explained (tests/multilabel_plugin.py: a plan and a scorer,
no presentation) runs through the command, shown as classes are."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hookviz.errors import UsageError
from hookviz.tasks import TASKS, TaskBase, register_task

from .cli_helpers import hookviz_run
from .conftest import SAMPLES


@pytest.fixture
def multilabel(registries_restored):
    import typer

    from hookviz.cli import app

    typer.main.get_command(app)  # --task's help lists the tasks once, cached: before the plug-in's, as later tests expect

    from . import multilabel_plugin

    if "multilabel" not in TASKS:  # an earlier test's registries_restored took it away
        TASKS.add("multilabel", multilabel_plugin.MultiLabel())


def test_a_computation_only_task_runs_end_to_end_with_the_class_presentation(tmp_path, multilabel):
    out = tmp_path / "out"
    result = hookviz_run(
        SAMPLES / "cat.png",
        "--task",
        "multilabel",
        "--cam",
        "gradcam,scorecam",
        "--pictures",
        "cam",
        "--crop",
        "32",
        "--resize",
        "32",
        model="tests.multilabel_plugin:multilabel_net",
        out=out,
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["task"] == "multilabel"
    labels = report["top5"]
    # the plug-in's own probabilities: each label's sigmoid, not a softmax over the labels
    logits = np.array([label["score"] for label in labels])
    assert np.allclose([label["probability"] for label in labels], 1 / (1 + np.exp(-logits)), atol=1e-6)
    assert len(labels) >= 2 and all(label["probability"] >= 0.5 for label in labels)
    # the default (class) presentation's progress line, of the plug-in's labels
    top = " · ".join(f"{label['index']} {label['probability']:.3f}" for label in labels)
    assert f"cat.png: target {labels[0]['index']}; top-5: {top}" in result.stdout
    # the first label's CAM over the photo, the second's a panel beside it; Score-CAM re-scored through the scorer
    layer = report["layers"][0]
    assert {"cam", "cam_topk"} <= set(layer["pictures"])
    assert (out / "cat" / layer["pictures"]["cam_topk"]).stat().st_size > 0
    assert set(layer["cams"]) >= {"gradcam", "scorecam"}


def test_a_task_class_that_says_how_it_is_shown_is_refused_in_one_line(registries_restored):
    class Titled(TaskBase):
        name = "titled"
        words = "a task with its own titles"

        def headline(self, explanation):
            return "mine"

    with pytest.raises(UsageError, match="task 'titled': headline say how it is shown, which is its presentation's part"):
        register_task(Titled)
    assert "titled" not in TASKS
