"""Tasks (hookviz.tasks): each says what the rest of hookviz shows of it, and every list of
tasks is read from the registry."""

from __future__ import annotations

import ast
import io
import json
import tokenize
from pathlib import Path

import pytest
import torch

import hookviz
from hookviz.cli import app
from hookviz.errors import UsageError
from hookviz.tasks import TASKS, ClassPrediction, DetectOptions, SegmentPrediction, TaskBase, recognise_task, task_names

from .cli_helpers import hookviz_cli, hookviz_run
from .conftest import ROOT, SAMPLES, tiny_net


def _task_name_literals(root: Path) -> list[str]:
    """Every string literal outside ``hookviz/tasks/`` and the built-in tasks' presentations
    (``hookviz/render/presentations/``, each registered under its task's name) that is a task's
    name (a comparison such as ``explanation.task == "detect"``, or a list of tasks kept by hand)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "tasks" or path.relative_to(root).parts[:2] == ("render", "presentations"):
            continue
        for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            if token.type != tokenize.STRING:
                continue
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):  # an f-string
                continue
            if value in TASKS:
                found.append(f"{path.relative_to(root.parent)}:{token.start[0]}: {value!r}")
    return found


def test_no_code_outside_the_tasks_names_a_task():
    """What differs between tasks is asked of the task or its presentation; only they spell a name."""
    assert _task_name_literals(ROOT / "hookviz") == []


class _Keypoints(TaskBase):
    """A task of a test's own: recognised by its output, before every built-in task."""

    name = "keypoints"
    words = "keypoint detection"
    priority = 30

    def recognises(self, output) -> bool:
        return isinstance(output, dict) and "keypoints" in output


def test_task_choices_help_and_recognition_order_come_from_the_registry(registries_restored):
    import typer

    assert task_names() == ["classify", "embed", "segment", "detect"]
    option = next(p for p in typer.main.get_command(app).commands["run"].params if p.name == "task")
    assert option.help.startswith("classify, embed, segment, detect; auto:")
    assert recognise_task([{"boxes": 0, "labels": 0, "scores": 0}]) == "detect"
    assert recognise_task({"out": torch.zeros(1, 3, 4, 4)}) == "segment"
    assert recognise_task(torch.zeros(1, 5)) == "classify"
    TASKS.add("keypoints", _Keypoints())
    assert recognise_task({"keypoints": 0, "out": torch.zeros(1, 3, 4, 4)}) == "keypoints"  # its priority is highest
    result = hookviz_cli("run", SAMPLES / "cat.png", "--task", "pose")
    assert result.exit_code == 2 and "--task pose: choose auto, classify, embed, segment, detect, keypoints" in result.stderr
    assert hookviz.ModelOptions("resnet18", task="keypoints").task == "keypoints"


def test_a_second_task_of_one_name_is_refused():
    from hookviz.tasks import register_task

    class Again(_Keypoints):
        name = "detect"

    with pytest.raises(UsageError, match="a task named 'detect' is already registered"):
        register_task(Again)

    class Auto(_Keypoints):
        name = "auto"

    with pytest.raises(UsageError, match="a task named 'auto' is already registered"):
        register_task(Auto)
    assert type(TASKS["detect"]).__name__ == "Detect"


def test_detect_options_are_the_detectors_own_group():
    with pytest.raises(UsageError, match="score_threshold=2: a score threshold is between 0 and 1"):
        DetectOptions(score_threshold=2)
    with pytest.raises(UsageError, match="max_detections=0: must be from 1 to 20"):
        DetectOptions(max_detections=0)
    with pytest.raises(UsageError, match="box_objective='iou': choose score or score\\+iou"):
        DetectOptions(box_objective="iou")
    assert hookviz.DetectOptions is DetectOptions
    loaded = hookviz.LoadedModel("tiny", tiny_net().eval(), "as given", None, hookviz.Preprocessing())
    explainer = hookviz.Explainer.create(loaded, task_options=(DetectOptions(),))
    assert explainer.task_options is None  # a classifier has no options of its own: the detector's defaults are unused
    assert "score_threshold" not in explainer.asked and explainer.asked["target"] == "top1"
    with pytest.raises(UsageError, match="score_threshold=0.2: only a detect model .* tiny is a classify model"):
        hookviz.Explainer.create(loaded, task_options=(DetectOptions(score_threshold=0.2),))
    with pytest.raises(UsageError, match="task_options='TargetOptions': expected a task's option group"):
        hookviz.Explainer.create(loaded, task_options=(hookviz.TargetOptions(),))


def _run(tmp_path, model: str, *args: str):
    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", *args, model=model, out=out)
    return result, out


@pytest.mark.parametrize(
    "model, args, said",
    [
        ("resnet18", ["--score-threshold", "0.3"], "--score-threshold 0.3: only a detect model (detection) takes it"),
        ("tests.conftest:tiny_net", ["--max-detections", "2"], "--max-detections 2: only a detect model"),
        ("tests.conftest:tiny_net", ["--box-objective", "score+iou"], "--box-objective score+iou: only a detect model"),
        ("lraspp_mobilenet_v3_large", ["--max-detections", "2"], "--max-detections 2: only a detect model"),
        (  # "an", not "only a embed model"
            "lraspp_mobilenet_v3_large",
            ["--target-image", str(SAMPLES / "coffee.png")],
            "--target-image: only an embed model (embedding similarity) takes it",
        ),
    ],
)
def test_a_tasks_own_options_are_refused_for_a_model_of_another_task(tmp_path, model, args, said):
    result, out = _run(tmp_path, model, *args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and not out.exists(), result.stderr
    task = "segment" if model.startswith("lraspp") else "classify"
    assert len(lines) == 1 and said in lines[0] and f"is a {task} model" in lines[0], result.stderr


def test_a_classifiers_report_asks_nothing_of_a_detector(tmp_path):
    """--skip-existing compares what was asked of the task: the detector's own options are
    no part of a classifier's run."""
    result, out = _run(tmp_path, "tests.conftest:tiny_net", "--pictures", "none")
    assert result.exit_code == 0, result.stderr
    report = json.loads((out / "cat" / "report.json").read_text())
    assert set(report["asked"]["target"]) == {"target", "objective", "cam", "topk", "output_key", "settings"}


def test_predictions_are_typed_and_report_json_keeps_their_to_json(tmp_path):
    result = hookviz.explain(tiny_net().eval(), SAMPLES / "cat.png", layers=["features.1"], objective="ce")
    assert isinstance(result.prediction, ClassPrediction)
    assert result.prediction.to_json() == {
        "objective": "the cross-entropy of the logits against the target class",
        "probabilities": "softmax",
    }

    class Painted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            logits = torch.zeros(x.shape[0], 4, *x.shape[-2:])
            logits[:, 3, :, : x.shape[-1] // 4] = 5
            return {"out": logits + 0.01 * self.conv(x).mean(1, keepdim=True)}

    segmented = hookviz.explain(Painted().eval(), torch.rand(3, 16, 32), layers=["conv"], categories=list("abcd"))
    prediction = segmented.prediction
    assert isinstance(prediction, SegmentPrediction) and prediction.mask.shape == (16, 32)
    assert [(share.name, share.fraction) for share in prediction.classes] == [("a", 0.75), ("d", 0.25)]
    segmented.save(tmp_path, pictures="none")
    report = json.loads((tmp_path / "report.json").read_text())
    assert (
        report["prediction"]
        == prediction.to_json()
        == {
            "classes": [{"index": 0, "name": "a", "fraction": 0.75}, {"index": 3, "name": "d", "fraction": 0.25}],
            "objective": "the sum of d's logits over the 128 pixels predicted as d",
        }
    )


class _SideBranch(torch.nn.Module):
    """A stem, a ``side`` branch whose output nothing uses, and a head of ``outputs`` values."""

    def __init__(self, outputs: int):
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.side = torch.nn.Conv2d(4, 3, 1)
        self.head = torch.nn.Linear(4, outputs)


class _SideBranchDetector(_SideBranch):
    """A detector of one fixed box whose score never uses ``side``'s output."""

    def __init__(self):
        super().__init__(outputs=1)

    def forward(self, images):
        results = []
        for image in images:
            features = self.stem(image[None]).relu()
            self.side(features)
            score = 0.5 + 0.4 * torch.sigmoid(self.head(features.mean(dim=(2, 3))))[:, 0]
            box = torch.tensor([[2.0, 2.0, 20.0, 20.0]])
            results.append({"boxes": box, "labels": torch.tensor([1]), "scores": score})
        return results


class _SideBranchEmbedder(_SideBranch):
    """An embedding (or six logits) that never uses ``side``'s output."""

    def __init__(self):
        super().__init__(outputs=6)

    def forward(self, x):
        features = self.stem(x).relu()
        self.side(features)
        return self.head(features.mean(dim=(2, 3)))


@pytest.mark.parametrize(
    "model, kwargs, objective",
    [
        (_SideBranchDetector, {"task": "detect"}, "the box's score"),
        (_SideBranchDetector, {"task": "detect", "box_objective": "score+iou"}, "the box's score and IoU"),
        (_SideBranchEmbedder, {"target_image": torch.arange(6.0)}, "the cosine similarity"),
        (_SideBranchEmbedder, {}, "the target's logit"),
    ],
    ids=["detect", "detect-iou", "embed", "classify"],
)
def test_a_layer_the_objective_never_reaches_is_said_in_the_tasks_words(model, kwargs, objective):
    # before: "the target's logit does not depend on this layer", for a detector's box and an embedding too
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(1))
    result = hookviz.explain(model().eval(), image, layers=["side", "stem"], **kwargs)
    assert result["side"].cam is None
    assert result["side"].cam_note == f"no CAM: {objective} does not depend on this layer"
    assert result["stem"].cam is not None


def _documented(section: str) -> tuple[set[str], set[str]]:
    """The members a table of docs/extending.md's ``section`` lists, and those it says have no default."""
    import re

    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    table = text.split(f"{section}\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    documented, without_default = set(), set()
    for cells in rows:
        names = re.findall(r"`(\w+)", cells[0])
        documented.update(names)
        if cells[1].startswith("none: write"):
            without_default.update(names)
    return documented, without_default


def _members(protocol) -> set[str]:
    import typing

    return set(typing.get_type_hints(protocol)) | {n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")}


def test_the_task_contract_in_the_docs_is_what_the_pipeline_reads_and_taskbase_gives_the_rest():
    """docs/extending.md's tables list every member of the ``Task`` protocol (what to explain) and
    of the ``Presentation`` protocol (how it is shown), and say "none" in the default column exactly
    where ``TaskBase`` gives none; ``ClassPresentation`` gives every member of its protocol."""
    from hookviz.render.presentation import ClassPresentation, Presentation
    from hookviz.tasks.computation import SHOWN_MEMBERS, Task

    documented, without_default = _documented("## What a task implements")
    members = _members(Task)
    assert documented == members
    assert without_default == {name for name in members if not hasattr(TaskBase, name)}
    assert without_default == {"name", "words", "plan", "scorer", "probability_scorer", "contrast", "torchvision_preprocessing"}
    shown, _ = _documented("### How a task is shown")
    assert shown == _members(Presentation) == set(SHOWN_MEMBERS)
    assert not shown & members
    assert all(hasattr(ClassPresentation, name) for name in shown)
