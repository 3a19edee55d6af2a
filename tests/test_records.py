"""report.json and run.json: typed records with a published JSON Schema, read back across versions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import torch

import hookviz
from hookviz.store.records import REPORT_SCHEMA, RUN_SCHEMA, Report, RunRecord, schema_path

from .cli_helpers import hookviz_cli
from .conftest import ROOT, SAMPLES, tiny_net

TINY = ["--model", "tests.conftest:tiny_net", "--layer", "features.3", "--layer", "act", "--layer", "fc", "--crop", "64"]
PHOTOS = [SAMPLES / "cat.png", SAMPLES / "coffee.png"]


def invoke(*args):
    return hookviz_cli(*args, catch_exceptions=False)


def _validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_path(kind).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _validate_run_folder(out: Path) -> int:
    """Check every report.json, run file and diff.json in ``out`` against its schema; how many there were."""
    files = [(p, "report") for p in out.glob("*/report.json")] + [(p, "run") for p in out.glob("run*.json")]
    files += [(p, "diff") for p in out.glob("diff.json")]
    validators = {kind: _validator(kind) for kind in ("report", "run", "diff")}
    for path, kind in files:
        validators[kind].validate(json.loads(path.read_text(encoding="utf-8")))
    assert any(kind == "run" for _, kind in files) and any(kind == "report" for _, kind in files), files
    return len(files)


def _rewrite(path: Path, change) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> dict[str, Path]:
    """TinyNet's weights, and a copy whose features.3 convolution is changed."""
    folder = tmp_path_factory.mktemp("weights")
    model = tiny_net()
    torch.save(model.state_dict(), folder / "a.pth")
    with torch.no_grad():
        model.features[3].weight.mul_(1.01)
    torch.save(model.state_dict(), folder / "b.pth")
    return {"a": folder / "a.pth", "b": folder / "b.pth"}


@pytest.fixture(scope="module")
def base(tmp_path_factory, weights) -> Path:
    """A classify run over two photos: a CAM per layer and the top two classes', tensors saved;
    no pictures (the slow tests draw them)."""
    out = tmp_path_factory.mktemp("runs") / "base"
    result = invoke(
        "run",
        *PHOTOS,
        *TINY,
        "--weights",
        weights["a"],
        "--pictures",
        "none",
        "--topk",
        "2",
        "--save-tensors",
        "-q",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out


def _copy(base: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(base, copy)
    return copy


def test_a_classify_runs_files_validate_and_read_back_as_written(base):
    assert _validate_run_folder(base) == 3
    for path in base.glob("*/report.json"):
        document = json.loads(path.read_text())
        assert document["schema"] == REPORT_SCHEMA
        assert Report.from_json(document).to_json() == document  # the record loses nothing
    document = json.loads((base / "run.json").read_text())
    assert document["schema"] == RUN_SCHEMA
    assert RunRecord.from_json(document).to_json() == document


def test_a_resumed_run_writes_files_that_validate(base, weights, tmp_path):
    out = _copy(base, tmp_path)
    result = invoke(
        "run",
        *PHOTOS,
        *TINY,
        "--weights",
        weights["a"],
        "--pictures",
        "none",
        "--topk",
        "2",
        "--save-tensors",
        "--out",
        out,
        "--skip-existing",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["skipped"] == 2
    _validate_run_folder(out)


def test_a_baseline_run_and_a_diff_write_files_that_validate(base, weights, tmp_path):
    new = tmp_path / "new"
    result = invoke(
        "run", *PHOTOS, *TINY, "--weights", weights["b"], "--pictures", "none", "-q", "--out", new, "--baseline", base
    )
    assert result.exit_code == 0, result.output
    document = json.loads((new / "run.json").read_text())
    assert document["checks"]["baseline"] == str(base) and document["diff"]["images"] == 2
    assert _validate_run_folder(new) == 4  # two reports, run.json and diff.json
    assert RunRecord.from_json(document).to_json() == document

    result = invoke("diff", base, new, "--out", tmp_path / "diff.json", "--pictures", "none")
    assert result.exit_code == 0, result.output
    _validator("diff").validate(json.loads((tmp_path / "diff.json").read_text()))


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        [*TINY, "--topk", "2", "--grad-channels", "--faithfulness", "--sanity"],
        ["--model", "lraspp_mobilenet_v3_large", "--resize", "96", "--topk", "2"],
        ["--model", "tests.test_detect:detector", "--score-threshold", "0.01", "--max-detections", "2", "--pictures", "cam"],
        [*TINY, "--target-image", SAMPLES / "coffee.png", "--target-image", SAMPLES / "cat.png", "--pictures", "cam"],
        [
            "--model",
            "tests.conftest:tiny_net",
            "--layer",
            "features.3",
            "--crop",
            "64",
            "--steps",
            "4",
            "--cam",
            "gradcam,eigencam,guided-gradcam,integrated-gradients",
        ],
    ],
    ids=["classify", "segment", "detect", "embed", "methods"],
)
def test_runs_that_draw_every_picture_of_each_task_write_files_that_validate(tmp_path, args):
    result = invoke("run", SAMPLES / "cat.png", *args, "--weights", "none", "--workers", "1", "-q", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    _validate_run_folder(tmp_path)
    report = json.loads((tmp_path / "cat" / "report.json").read_text())
    assert Report.from_json(report).to_json() == report
    assert all(name in report["files"] for layer in report["layers"] for name in layer["pictures"].values() if name)
    assert "cam" in report["layers"][0]["pictures"]


def test_a_saved_explanation_writes_a_report_that_validates(tmp_path):
    result = hookviz.explain(tiny_net(), torch.rand(3, 64, 64), layers=["features.3"])
    result.save(tmp_path, "cam")
    _validator("report").validate(json.loads((tmp_path / "report.json").read_text()))


def test_a_renamed_key_fails_the_schema(base):
    report = json.loads(next(base.glob("*/report.json")).read_text())
    report["top_5"] = report.pop("top5")
    with pytest.raises(jsonschema.ValidationError):
        _validator("report").validate(report)
    run = json.loads((base / "run.json").read_text())
    run["images"][0]["folder"] = run["images"][0].pop("output")
    with pytest.raises(jsonschema.ValidationError):
        _validator("run").validate(run)


def test_files_of_an_older_hookviz_without_a_schema_resume_and_compare(base, weights, tmp_path):
    old = _copy(base, tmp_path)
    for path in [*old.glob("*/report.json"), old / "run.json"]:
        _rewrite(path, lambda document: document.pop("schema"))
    result = invoke(
        "run",
        *PHOTOS,
        *TINY,
        "--weights",
        weights["a"],
        "--pictures",
        "none",
        "--topk",
        "2",
        "--save-tensors",
        "--out",
        old,
        "--skip-existing",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["skipped"] == 2
    assert "schema" not in json.loads((old / "cat" / "report.json").read_text())  # kept, not rewritten
    _rewrite(old / "run.json", lambda document: document.pop("schema"))  # the resumed run wrote its own
    result = invoke("diff", old, base, "--out", tmp_path / "diff.json", "--fail-on", "drift", "--pictures", "none")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "diff.json").read_text())["compared"]["images"] == 2


def test_a_report_of_a_newer_schema_stops_a_resumed_run_in_one_line(base, weights, tmp_path):
    out = _copy(base, tmp_path)
    _rewrite(out / "cat" / "report.json", lambda document: document.update(schema="hookviz/report/9"))
    before = (out / "cat" / "report.json").read_bytes()
    result = invoke("run", *PHOTOS, *TINY, "--weights", weights["a"], "--pictures", "none", "--out", out, "--skip-existing")
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert f"{out / 'cat' / 'report.json'}: written by a newer hookviz" in line and "upgrade hookviz" in line
    assert "Traceback" not in result.output and (out / "cat" / "report.json").read_bytes() == before


def test_a_report_of_schema_1_is_read_and_its_sample_redone_once(base, weights, tmp_path):
    """Schema 1 kept integrated gradients' settings beside the target; such a report is read,
    and its image is redone once (what it was asked is not what schema 2 asks)."""
    out = _copy(base, tmp_path)

    def older(document):
        settings = document["asked"]["target"].pop("settings")
        assert settings == {"gradcam": {"time_weights": "clip"}}  # the Grad-CAM family's group, gradcam asked; schema 1 had none
        document["asked"]["target"].update(steps=32, ig_baseline="zero")
        _in_schema_2_words(document)
        document.update(schema="hookviz/report/1")

    _rewrite(out / "cat" / "report.json", older)
    args = ("run", *PHOTOS, *TINY, "--weights", weights["a"], "--pictures", "none", "--out", out, "--skip-existing")
    first = invoke(*args)
    assert first.exit_code == 0 and "Traceback" not in first.output, first.output
    assert json.loads((out / "cat" / "report.json").read_text())["schema"] == REPORT_SCHEMA
    second = json.loads(invoke(*args, "--json").stdout)
    assert second["counts"]["skipped"] == len(PHOTOS), second["counts"]


def _in_schema_2_words(document) -> None:
    """A report as schema 2 wrote it: its sample under ``image`` and ``photo``."""
    document["image"] = document.pop("sample")
    document["photo"] = document.pop("sample_identity")
    document.update(schema="hookviz/report/2")


def test_reports_of_schema_2_are_read_compared_and_listed_and_their_samples_redone_once(base, weights, tmp_path):
    """Schema 2 named the sample ``image`` and its files ``photo``: read as schema 3's ``sample``
    and ``sample_identity`` by the records, ``hookviz diff``, ``--baseline`` and the explorer;
    ``--skip-existing`` redoes each such sample once, so the folder ends in one schema."""
    from hookviz.runs.gallery import write_gallery
    from hookviz.store.records import read_report, read_run

    from .explorer_helpers import explorer_samples

    out = _copy(base, tmp_path)
    for path in out.glob("*/report.json"):
        _rewrite(path, _in_schema_2_words)
    old, new = read_report(out / "cat" / "report.json"), read_report(base / "cat" / "report.json")
    assert (old.schema, old.older_words, new.older_words) == (2, True, False)
    assert old.sample == new.sample == str(SAMPLES / "cat.png") and old.sample_identity == new.sample_identity is not None
    result = invoke("diff", out, base, "--out", tmp_path / "diff.json", "--pictures", "none")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "diff.json").read_text())["compared"]["images"] == 2
    args = ("run", *PHOTOS, *TINY, "--weights", weights["b"], "--pictures", "none", "-q")
    result = invoke(*args, "--out", tmp_path / "against", "--baseline", out)
    assert result.exit_code == 0 and json.loads((tmp_path / "against" / "run.json").read_text())["diff"]["images"] == 2
    write_gallery(out, read_run(out / "run.json"))
    # each report read (details, not None), its sample named as it lies in the data (below SAMPLES)
    assert {name: found["image"] for name, found in explorer_samples(out).items()} == {
        name: f"{name}.png" for name in ("cat", "coffee")
    }
    args = ("run", *PHOTOS, *TINY, "--weights", weights["a"], "--pictures", "none", "--topk", "2", "--save-tensors")
    first = json.loads(invoke(*args, "--out", out, "--skip-existing", "--json").stdout)
    assert (first["counts"]["done"], first["counts"]["skipped"]) == (2, 0), first["counts"]
    assert _validate_run_folder(out) == 3 and all("photo" not in json.loads(p.read_text()) for p in out.glob("*/report.json"))
    second = json.loads(invoke(*args, "--out", out, "--skip-existing", "--json").stdout)
    assert second["counts"]["skipped"] == 2, second["counts"]


def test_a_run_file_of_a_newer_schema_stops_a_diff_in_one_line(base, tmp_path):
    new = _copy(base, tmp_path)
    _rewrite(new / "run.json", lambda document: document.update(schema="hookviz/run/7"))
    result = invoke("diff", base, new, "--out", tmp_path / "diff.json")
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert f"{new / 'run.json'}: written by a newer hookviz (schema 'hookviz/run/7'" in line
    assert not (tmp_path / "diff.json").exists()


def test_the_schemas_ship_with_the_package_and_the_docs_name_them():
    for kind in ("report", "run", "diff"):
        assert schema_path(kind).is_file() and schema_path(kind).parent == Path(hookviz.__file__).parent / "schemas"
        _validator(kind)
    page = (ROOT / "docs" / "files.md").read_text(encoding="utf-8")
    assert all(f"hookviz/schemas/{kind}.schema.json" in page for kind in ("report", "run", "diff"))
    assert '"schemas/*.json"' in (ROOT / "pyproject.toml").read_text()
