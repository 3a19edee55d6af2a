"""The command, in-process through typer's CliRunner, as a user and a CI job would use it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from hookviz.cli import app

from .cli_helpers import hookviz_cli
from .conftest import no_partial_files, python_output

TINY = ["--model", "tests.conftest:tiny_net", "--weights", "none"]


@pytest.fixture
def cli():
    return CliRunner()


def invoke(cli, *args):
    return cli.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_run_writes_pictures_report_and_tensors(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = invoke(cli, "run", photo, *TINY, "--layer", "features.-3", "--layer", "act", "--out", out, "--save-tensors")
    assert result.exit_code == 0, result.output
    folder = out / "photo"
    names = sorted(p.name for p in folder.iterdir())
    for layer in ("features.1", "act-0", "act-1"):
        for kind in ("summary", "channels", "cam"):
            assert f"{layer}.{kind}.png" in names
    report = json.loads((folder / "report.json").read_text())
    assert report["model"] == "tests.conftest:tiny_net"
    assert [l["name"] for l in report["layers"]] == ["features.1", "act:0", "act:1"]
    first = report["layers"][0]
    assert first["requested"] == "features.-3" and first["module_type"] == "BatchNorm2d"
    assert first["shapes"] == {k: [1, 4, 224, 224] for k in ("input", "output", "grad_input", "grad_output")}
    assert set(first["stats"]["output"]) == {"min", "max", "mean", "std", "nonfinite", "zero_fraction"}
    assert report["preprocessing"]["resize"] == 256 and report["preprocessing"]["crop"] == 224
    assert len(report["top5"]) == 5 and report["target"]["index"] == report["top5"][0]["index"]
    tensors = np.load(folder / "tensors.npz")
    assert {"logits", "input", "features.1/output", "act:1/grad_output", "act:0/cam"} <= set(tensors.files)
    assert tensors["input"].shape == (1, 3, 224, 224) and tensors["features.1/output"].dtype == np.float32
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["counts"] == {"images": 1, "done": 1, "failed": 0, "skipped": 0, "not_done": 0}
    assert "torch" in run_json and run_json["images"][0]["status"] == "done"


def test_report_says_how_each_layout_was_read_and_an_ambiguous_one_waits_for_layout(cli, photo, tmp_path):
    # Every map of tiny_convnext at 32 pixels is 1x8x8x8: block.2 (a LayerNorm between two
    # Permutes) is channels-last by its ops; mixer.out (tokens reshaped) by nothing.
    base = [
        "run",
        photo,
        "--model",
        "tests.conftest:tiny_convnext",
        "--weights",
        "none",
        "--resize",
        "32",
        "--crop",
        "32",
        "--layer",
        "block.2",
        "--layer",
        "mixer.out",
        "--target",
        "2",
        "--workers",
        "1",
    ]
    result = invoke(cli, *base, "--pictures", "channels,cam", "--out", tmp_path / "auto")
    assert result.exit_code == 0, result.output
    layers = {layer["name"]: layer for layer in json.loads((tmp_path / "auto" / "photo" / "report.json").read_text())["layers"]}
    assert layers["block.2"]["layout"] == {"kind": "nhwc", "prefix": 0, "grid": None, "basis": "data flow"}
    assert layers["block.2"]["cam"]["shape"] == [8, 8]
    unsaid = layers["mixer.out"]
    assert unsaid["layout"] == {"kind": "ambiguous", "prefix": 0, "grid": None, "basis": "undecided"}
    assert unsaid["cam"]["skipped"].endswith("pass --layout nhwc or --layout nchw to say it")
    assert unsaid["pictures"]["cam"] is None and unsaid["pictures"]["channels"] is None
    result = invoke(cli, *base, "--layout", "nhwc", "--pictures", "none", "--out", tmp_path / "said")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "said" / "photo" / "report.json").read_text())
    said = {layer["name"]: layer for layer in report["layers"]}["mixer.out"]
    assert said["layout"]["basis"] == "declared" and said["cam"]["shape"] == [8, 8]
    assert "as asked (--layout nhwc)" in report["declared_layout"]["origin"]


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_mixed_folder_writes_good_images_names_broken_ones_and_exits_1(cli, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    Image.new("RGB", (30, 20), (200, 10, 10)).save(folder / "good.png")
    Image.new("RGB", (20, 30), (10, 200, 10)).save(folder / "also good.jpg")
    (folder / "text.png").write_text("not an image")
    (folder / "empty.jpg").write_bytes(b"")
    out = tmp_path / "out"
    result = invoke(cli, "run", folder, *TINY, "--layer", "fc", "--out", out)
    assert result.exit_code == 1
    assert "text.png" in result.stderr and "empty.jpg" in result.stderr
    assert "Traceback" not in result.output
    assert (out / "good" / "report.json").exists() and (out / "also good" / "report.json").exists()
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["counts"]["failed"] == 2 and run_json["counts"]["done"] == 2
    assert {Path(f["image"]).name for f in run_json["failures"]} == {"text.png", "empty.jpg"}
    assert no_partial_files(out)


def test_nan_weights_fail_the_nonfinite_check_with_exit_3(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "tests.conftest:nan_net",
        "--layer",
        "features.3",
        "--out",
        out,
        "--fail-on",
        "nonfinite",
        "--json",
    )
    assert result.exit_code == 3
    document = json.loads(result.stdout)
    assert document == json.loads((out / "run.json").read_text())
    assert not document["checks"]["passed"]
    assert any(f["layer"] == "features.3" for f in document["checks"]["findings"])


def test_dead_and_zero_grad_checks(cli, photo, tmp_path):
    # pool's input after ReLU is never all zero; fc's output is; a layer the logits never use gets no gradient
    result = invoke(
        cli,
        "run",
        photo,
        *TINY,
        "--layer",
        "features.2",
        "--out",
        tmp_path / "a",
        "--fail-on",
        "dead,zero-grad",
        "--dead-fraction",
        "0.01",
    )
    assert result.exit_code == 3 and "dead" in result.stderr
    result = invoke(cli, "run", photo, *TINY, "--layer", "features.2", "--out", tmp_path / "b", "--fail-on", "zero-grad")
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    "model, layer, check, detail",
    [
        ("dead_net", "act", "dead", "output is 100.0% zeros"),
        ("dead_net", "features.3", "zero-grad", "grad_output is all zeros"),
        ("nan_net", "features.3", "nonfinite", "NaN/Inf values"),
    ],
)
def test_a_resumed_run_fails_its_checks_on_the_images_it_skips(cli, photo, tmp_path, model, layer, check, detail):
    """A resumed CI job must not pass where a fresh one fails: skipped images are judged by their report."""
    args = ["run", photo, "--model", f"tests.conftest:{model}", "--layer", layer]
    args += ["--out", tmp_path / "out", "--pictures", "none", "--fail-on", check]
    fresh = invoke(cli, *args)
    assert fresh.exit_code == 3, fresh.output
    resumed = invoke(cli, *args, "--skip-existing")
    assert resumed.exit_code == 3, resumed.output
    assert "1 skipped" in resumed.stderr

    def findings(result):
        return [line for line in result.stderr.splitlines() if line.startswith(f"hookviz: check {check} failed:")]

    assert findings(resumed) == findings(fresh)  # the same words, from the saved report
    assert any(f"{photo} {layer}" in line and detail in line for line in findings(resumed)), resumed.stderr
    document = json.loads((tmp_path / "out" / "run.json").read_text())
    assert document["checks"]["passed"] is False and document["counts"]["skipped"] == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "resnet5O"], "did you mean 'resnet50'"),
        (["--layer", "featurs.0"], "did you mean"),
        (["--target", "99"], "out of range"),
        (["--target", "tabby"], "no class names"),
        (["--objective", "mse"], "--objective"),
        (["--cam", "gradkam"], "gradcam"),
        (["--channels", "a-b"], "--channels"),
        (["--topk", "3", "--cam", "none"], "--topk"),
        (["--shard", "3/2"], "--shard"),
        (["--fail-on", "nan"], "--fail-on"),
        (["--weights", "/nonexistent/w.pth"], "no such file"),
        (["--layer-type", "Conv3d"], "Conv3d"),
        (["--no-crop", "--resize", "300"], "--resize has no effect with --no-crop"),
        (["--layout", "hwc"], "--layout hwc: choose auto, nchw, nhwc"),
    ],
)
def test_usage_errors_exit_2_with_one_line(cli, photo, tmp_path, args, message):
    base = [*TINY] if "--model" not in args else []
    if "--weights" in args:
        base = ["--model", "tests.conftest:tiny_net"]
    result = invoke(cli, "run", photo, *base, *args, "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "out" / "photo").exists()


def test_class_names_work_as_targets_and_are_suggested(cli, lite0, cat, tmp_path):
    result = invoke(cli, "run", cat, "--model", "efficientnet_lite0", "--target", "tabbby", "--out", tmp_path)
    assert result.exit_code == 2 and "did you mean 'tabby'" in result.stderr
    result = invoke(
        cli, "run", cat, "--model", "efficientnet_lite0", "--target", "tabby", "--out", tmp_path, "--pictures", "none"
    )
    assert result.exit_code == 0
    report = json.loads((tmp_path / "cat" / "report.json").read_text())
    assert report["target"]["name"] == "tabby" and report["target"]["index"] == 281


def test_a_word_of_class_names_suggests_the_classes_that_have_it(cli, lite0, cat, tmp_path):
    # "cat" is a word of five ImageNet names; "crate" and "castle" are only spelt alike.
    result = invoke(cli, "run", cat, "--model", "efficientnet_lite0", "--target", "cat", "--out", tmp_path)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "'Egyptian cat'" in line and "'tiger cat'" in line and "crate" not in line, line
    assert line.count("'") == 10  # five suggestions
    assert "Traceback" not in result.output


def test_first_frame_notes_name_their_files(cli, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    frames = [Image.new("RGB", (48, 48), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    for name in ("anim.gif", "pages.tiff"):
        frames[0].save(photos / name, save_all=True, append_images=frames[1:])
    out = tmp_path / "out"
    result = invoke(cli, "run", photos, *TINY, "--layer", "fc", "--pictures", "none", "--out", out)
    assert result.exit_code == 0, result.output
    notes = json.loads((out / "run.json").read_text())["notes"]
    for name in ("anim.gif", "pages.tiff"):
        assert f"{photos / name}: first frame of 3 used" in notes, notes
        assert f"{photos / name}: first frame of 3 used" in result.stderr + result.stdout


def test_float_tiffs_without_a_picture_are_refused_or_noted_and_the_run_goes_on(cli, tmp_path):
    """An all-NaN TIFF has nothing to explain; an all-1e30 one is drawn black: both were silent."""
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.fromarray(np.full((24, 24), np.nan, dtype=np.float32), mode="F").save(photos / "nan.tiff")
    Image.fromarray(np.full((24, 24), 1e30, dtype=np.float32), mode="F").save(photos / "huge.tiff")
    spread = np.linspace(-1e6, 1e6, 24 * 24, dtype=np.float32).reshape(24, 24)
    Image.fromarray(spread, mode="F").save(photos / "spread.tiff")
    out = tmp_path / "out"
    result = invoke(cli, "run", photos, *TINY, "--layer", "fc", "--pictures", "none", "--out", out)
    assert result.exit_code == 1, result.output
    failed = [line for line in result.stderr.splitlines() if line.startswith("hookviz: failed:")]
    assert failed == [
        f"hookviz: failed: {photos / 'nan.tiff'}: no pixel holds a finite value (all NaN or infinite); "
        "there is no picture to explain"
    ], result.stderr
    notes = json.loads((out / "run.json").read_text())["notes"]
    assert f"{photos / 'huge.tiff'}: every pixel is 1e+30, outside 0..1; shown as a black image" in notes, notes
    assert f"{photos / 'spread.tiff'}: pixel values span -1e+06..1e+06, outside 0..1; stretched to black..white" in notes
    assert (out / "huge" / "report.json").exists() and (out / "spread" / "report.json").exists()
    assert "Traceback" not in result.output


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_a_1x1_input_runs_without_torchs_read_only_array_warning(tmp_path):
    """PIL's pixels are read-only, and a 1x1 input needed no copy to be contiguous: torch warned
    (once per process, so a fresh one)."""
    Image.new("RGB", (1, 1), (9, 90, 200)).save(tmp_path / "one.png")
    command = [sys.executable, "-W", "default", "-m", "hookviz", "run", str(tmp_path / "one.png"), *TINY]
    command += ["--layer", "features.3", "--resize", "1", "--crop", "1", "--pictures", "none", "--out", str(tmp_path / "out")]
    completed = subprocess.run(command, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert "Warning" not in completed.stderr, completed.stderr


def test_a_heic_photo_fails_with_the_pillow_heif_hint(cli, tmp_path):
    heic = tmp_path / "IMG_0001.HEIC"
    heic.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 40)
    result = invoke(cli, "run", heic, *TINY, "--layer", "fc", "--out", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert (
        f"hookviz: failed: {heic}: a HEIC/HEIF photo, which PIL cannot read alone; install pillow-heif "
        "(pip install pillow-heif), which hookviz then uses, or convert it to JPEG or PNG" in result.stderr
    )


@pytest.mark.parametrize("pattern", [False, True])
def test_a_folder_of_heic_photos_alone_is_refused_naming_pillow_heif(cli, tmp_path, pattern):
    """It said the folder held no image files: the photos were there, PIL could not read them."""
    photos = tmp_path / "photos"
    (photos / "day 2").mkdir(parents=True)
    for path in (photos / "IMG_0001.HEIC", photos / "day 2" / "IMG_0002.heic"):
        path.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 40)
    (photos / "notes.txt").write_text("not a photo")
    source = f"{photos}/**/*" if pattern else photos
    result = invoke(cli, "run", source, *TINY, "--layer", "fc", "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    what = "pattern matches" if pattern else "folder holds"
    assert result.stderr == (
        f"hookviz: error: {source}: {what} 2 HEIC/HEIF photos and no other image file; PIL cannot read them alone: "
        "install pillow-heif (pip install pillow-heif), which hookviz then uses, or convert them to JPEG or PNG\n"
    )
    assert not (tmp_path / "out").exists()


def test_heic_photos_beside_others_are_left_out_with_a_note_naming_pillow_heif(cli, tmp_path):
    """They were skipped without a word: a user counting 2 photos got 1 explained."""
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (40, 30), (10, 120, 200)).save(photos / "a.png")
    (photos / "IMG_0001.HEIC").write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 40)
    result = invoke(cli, "run", photos, *TINY, "--layer", "fc", "--pictures", "none", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert (
        f"hookviz: note: {photos}: folder holds 1 HEIC/HEIF photo, left out: PIL cannot read it alone; "
        "install pillow-heif (pip install pillow-heif), which hookviz then uses to explain it too\n"
    ) in result.stderr
    assert json.loads((tmp_path / "out" / "run.json").read_text())["counts"]["done"] == 1


@pytest.mark.slow
def test_the_command_opens_heic_photos_with_pillow_heif_when_installed(tmp_path):
    # A stand-in pillow_heif whose opener makes PIL take .heic files (here PNGs named .heic).
    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "pillow_heif.py").write_text(
        "from PIL import Image\n\ndef register_heif_opener():\n    Image.register_extension('PNG', '.heic')\n"
    )
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (40, 30), (10, 120, 200)).save(photos / "IMG_0001.heic", format="PNG")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(root)])}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookviz",
            "run",
            str(photos),
            *TINY,
            "--layer",
            "fc",
            "--pictures",
            "none",
            "--out",
            str(tmp_path / "out"),
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads((tmp_path / "out" / "run.json").read_text())["counts"]["done"] == 1


@pytest.mark.parametrize("setting", [{"TERM": "dumb"}, {"NO_COLOR": "1"}, {"LC_ALL": "C"}, {"PYTHONIOENCODING": "ascii"}])
def test_usage_errors_are_plain_text_where_boxes_and_colours_cannot_show(setting):
    root = Path(__file__).resolve().parent.parent
    keep = {k: v for k, v in os.environ.items() if k not in ("TERM", "NO_COLOR", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING")}
    capable = {**keep, "TERM": "xterm-256color", "LANG": "C.UTF-8", "FORCE_COLOR": "1"}

    def usage_error(env):
        completed = subprocess.run(
            [sys.executable, "-m", "hookviz", "run", "--nope"], capture_output=True, cwd=root, env=env, check=False
        )
        uncoloured = re.sub(rb"\x1b\[[0-9;]*m", b"", completed.stderr)
        assert completed.returncode == 2 and b"No such option: --nope" in uncoloured, completed.stderr
        return completed.stderr

    fancy = usage_error(capable)
    assert "╭".encode() in fancy and b"\x1b[" in fancy  # rich's box and colours, where they can be shown
    plain = usage_error({**capable, **setting})
    assert plain.isascii() and b"\x1b" not in plain, plain
    assert b"Error: No such option: --nope" in plain


@pytest.mark.slow
def test_a_second_run_into_the_same_folder_removes_the_first_runs_pictures(cli, photo, tmp_path):
    out = tmp_path / "out"
    for layer in ("features.0", "features.1"):
        result = invoke(cli, "run", photo, *TINY, "--layer", layer, "--out", out, "-q")
        assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (out / "photo").iterdir())
    assert [n for n in names if n.startswith("features.")] == [f"features.1.{k}.png" for k in ("cam", "channels", "summary")]
    assert sorted([*json.loads((out / "photo" / "report.json").read_text())["files"], "report.json"]) == names


def test_unwritable_out_is_a_usage_error(cli, photo, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = invoke(cli, "run", photo, *TINY, "--out", blocker / "sub")
    assert result.exit_code == 2 and "--out" in result.stderr


def test_missing_image_and_empty_dir(cli, tmp_path):
    result = invoke(cli, "run", tmp_path / "nope.png", *TINY, "--out", tmp_path / "o")
    assert result.exit_code == 1 and "nope.png: no such file" in result.stderr
    (tmp_path / "empty").mkdir()
    result = invoke(cli, "run", tmp_path / "empty", *TINY, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "no image files" in result.stderr


def test_efficientnet_demo_reports_a_cat(cli, lite0, cat, tmp_path):
    result = invoke(cli, "run", "--model", "efficientnet_lite0", cat, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "cat" / "report.json").read_text())
    assert 281 <= report["target"]["index"] <= 285
    assert "cat" in result.stdout.split("top-5:")[1].split("·")[0] or "tabby" in result.stdout
    assert "no --layer given: using _swish:1" in result.stderr


def test_layers_lists_layer3_5_with_its_shape(cli):
    result = invoke(cli, "layers", "--model", "resnet50")
    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if line.startswith("layer3.5 "))
    assert "Bottleneck" in row and "1x1024x14x14" in row
    relu = next(line for line in result.stdout.splitlines() if line.startswith("layer3.5.relu "))
    assert relu.rstrip().endswith("3")
    result = invoke(cli, "layers", "--model", "resnet50", "--type", "Conv2d", "--filter", "layer4")
    assert all("Conv2d" in line for line in result.stdout.splitlines()[1:])


def test_models_lists_builtin_and_torchvision(cli):
    result = invoke(cli, "models")
    assert "efficientnet_lite0" in result.stdout and "\nresnet50\n" in result.stdout
    assert invoke(cli, "--version").stdout.startswith("hookviz ")


RUN_PANELS = ["Model", "Layers", "Target", "Methods", "Trust and checks", "Pictures", "Images", "Run", "Output"]


def _panels(text: str, title: str) -> dict[str, str]:
    """``--help``'s text by panel: each title (matched by ``title``) to the text under it."""
    parts = re.split(title, text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("columns", ["80", "200"])
def test_run_help_groups_every_option_in_a_panel(columns, monkeypatch):
    """53 options in one list were hard to read: each option of ``hookviz run`` sits in one panel,
    the panels in the order a run goes, in rich's boxes and in plain text (NO_COLOR)."""
    import typer.main

    options = [p for p in typer.main.get_command(app).commands["run"].params if p.param_type_name == "option"]
    assert [p.opts[0] for p in options if p.rich_help_panel not in RUN_PANELS] == []
    assert list(dict.fromkeys(p.rich_help_panel for p in options)) == RUN_PANELS
    boxed = hookviz_cli("run", "--help", env={"COLUMNS": columns})
    monkeypatch.setattr(app, "rich_markup_mode", None)  # as main() sets it for NO_COLOR or a dumb terminal
    plain = hookviz_cli("run", "--help", env={"COLUMNS": columns})
    for result, title in ((boxed, r"^╭─ (.+?) ─+╮$"), (plain, r"^(\S.*):$")):
        assert result.exit_code == 0, result.output
        panels = _panels(result.output, title)
        assert list(panels) == ["Arguments", "Options", *RUN_PANELS]
        for option in options:
            name = max(option.opts, key=len)
            where = rf"^(│ |  )(-\w, )?{name}(?![\w-])"  # the line it starts (another option's help may name it)
            assert [panel for panel, text in panels.items() if re.search(where, text, re.M)] == [option.rich_help_panel]


def test_every_commands_help_is_shown_and_its_texts_are_not_read_as_markup():
    """``hookviz atlas --help`` ended in rich's MarkupError traceback: --label-with's help said
    ``open_clip:ARCH[/TAG]``, which rich read as a closing tag. Every help text of every command
    must come out as written."""
    import typer.main
    from rich.text import Text

    def texts(command, path):
        yield path, command.help or ""
        yield from ((f"{path} {p.opts[0]}", getattr(p, "help", None) or "") for p in command.params)
        for name, sub in getattr(command, "commands", {}).items():
            yield from texts(sub, f"{path} {name}")

    def read(text: str) -> str:
        try:
            return Text.from_markup(text).plain
        except Exception as error:  # rich's MarkupError
            return f"{type(error).__name__}: {error}"

    assert [(where, read(text)) for where, text in texts(typer.main.get_command(app), "hookviz") if read(text) != text] == []
    result = hookviz_cli("atlas", "--help")
    assert result.exit_code == 0 and "open_clip:ARCH/TAG" in result.output, result.output


@pytest.mark.slow
def test_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from hookviz.cli import app\n"
        "from typer.testing import CliRunner\n"
        "for args in (['--help'], ['run', '--help'], ['layers', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0\n"
        "print('torch' in sys.modules, 'matplotlib' in sys.modules)\n"
    )
    assert python_output(code).strip() == "False False"


@pytest.mark.slow
@pytest.mark.parametrize("preset, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_threads_sleep_unless_the_user_says_otherwise(preset, expected):
    """main() asks OpenMP for sleeping threads before torch loads (spinning ones take CPU
    from the render workers), and keeps a value the user chose."""

    code = (
        "import os, sys\n"
        "from hookviz.cli import main\n"
        "sys.argv = ['hookviz', '--version']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ['OMP_WAIT_POLICY'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset:
        env["OMP_WAIT_POLICY"] = preset
    assert python_output(code, env).split()[-1] == expected


@pytest.mark.slow
def test_python_dash_m_works(photo, tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "hookviz", "run", str(photo), *TINY, "--layer", "fc", "--out", str(tmp_path / "out"), "-q"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "out" / "photo" / "report.json").exists()


@pytest.mark.slow
def test_the_installed_command_keeps_its_status_and_every_line_it_printed(tmp_path, photo):
    """console_main() skips interpreter shutdown (os._exit): output streams must be flushed
    first, and main()'s exit status passed on. Pipes are block-buffered, so a missing flush
    would lose all of it."""
    root = Path(__file__).resolve().parent.parent

    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}

    def command(*args):
        return subprocess.run([sys.executable, "-m", "hookviz", *args], capture_output=True, text=True, cwd=root, env=buffered)

    listing = command("models")
    assert listing.returncode == 0
    assert listing.stdout == hookviz_cli("models").stdout
    assert "efficientnet_lite0" in listing.stdout and "resnet50" in listing.stdout
    chatty = command(
        "run", str(photo), "--model", "tests.conftest:chatty_net", "--weights", "none", "--out", str(tmp_path / "chatty"), "-q"
    )
    assert chatty.returncode == 0, chatty.stderr
    assert chatty.stdout == "chatty_net: built\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = command("run", str(empty), *TINY, "--out", str(tmp_path / "out"))
    assert refused.returncode == 2
    assert refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1
    assert "no image files" in refused.stderr


def _hostile_inputs(folder: Path) -> dict[str, str]:
    """name -> the text its one-line error must contain."""
    import io

    (folder / "empty.png").write_bytes(b"")
    (folder / "text.png").write_text("just text")
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (80, 80, 3), dtype=np.uint8)).save(buffer, "PNG")
    (folder / "cut.png").write_bytes(buffer.getvalue()[:400])
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (80, 80, 3), dtype=np.uint8)).save(buffer, "JPEG")
    (folder / "cut.jpg").write_bytes(buffer.getvalue()[:300])
    (folder / "header.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\xff" * 60)
    Image.new("1", (40000, 40000)).save(folder / "bomb.png")
    Image.new("RGB", (1, 20000)).save(folder / "strip.png")
    (folder / "vector.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    return {
        "empty.png": "empty",
        "text.png": "not an image format",
        "cut.png": "corrupt or truncated",
        "cut.jpg": "corrupt or truncated",
        "header.png": "",
        "bomb.png": "--max-pixels",
        "strip.png": "too thin",
        "vector.svg": "SVG",
    }


@pytest.mark.slow
def test_every_hostile_input_fails_alone_with_its_message(cli, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    expected = _hostile_inputs(folder)
    Image.new("RGB", (20, 20), (5, 100, 200)).save(folder / "fine.png")
    out = tmp_path / "out"
    result = invoke(cli, "run", *sorted(folder.iterdir()), *TINY, "--layer", "features.3", "--out", out)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    for name, message in expected.items():
        lines = [line for line in result.stderr.splitlines() if line.startswith("hookviz: failed:") and name in line]
        assert len(lines) == 1 and message in lines[0], (name, result.stderr)
        assert not (out / Path(name).stem).exists()
    assert (out / "fine" / "report.json").exists()
    assert no_partial_files(out)
    failures = json.loads((out / "run.json").read_text())["failures"]
    assert len(failures) == len(expected)


@pytest.mark.parametrize(
    "name, make",
    [
        ("16bit.png", lambda p: Image.fromarray((np.arange(400).reshape(20, 20) * 160).astype(np.uint16)).save(p)),
        ("cmyk.jpg", lambda p: Image.new("CMYK", (20, 20), (0, 200, 200, 0)).save(p)),
        ("palette.png", lambda p: Image.new("P", (20, 20), 1).save(p, transparency=0)),
        ("anim.gif", lambda p: Image.new("RGB", (20, 20)).save(p, save_all=True, append_images=[Image.new("RGB", (20, 20))])),
        ("tiny.webp", lambda p: Image.new("RGB", (1, 1), (9, 9, 9)).save(p)),
        ("UP PER é.BMP", lambda p: Image.new("RGB", (20, 20)).save(p, format="BMP")),
        ("price $x^{$.png", lambda p: Image.new("RGB", (20, 20)).save(p)),  # in a title: not mathtext
    ],
)
def test_awkward_but_valid_images_work(cli, tmp_path, name, make):
    path = tmp_path / name
    make(path)
    result = invoke(cli, "run", path, *TINY, "--layer", "features.3", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    (folder,) = [d for d in (tmp_path / "out").iterdir() if d.is_dir()]
    assert sorted(p.name for p in folder.glob("features.3.*.png")) == [
        "features.3.cam.png",
        "features.3.channels.png",
        "features.3.summary.png",
    ]


def test_from_list_reads_stdin_and_preprocessing_options_apply(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = cli.invoke(
        app,
        [
            "run",
            "--from-list",
            "-",
            *TINY,
            "--layer",
            "features.3",
            "--out",
            str(out),
            "--resize",
            "180",
            "--crop",
            "160",
            "--mean",
            "0.5",
            "--std",
            "0.5,0.5,0.5",
            "--pictures",
            "none",
            "--device",
            "cpu",
        ],
        input=f"# photos\n{photo}\n\n",
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "photo" / "report.json").read_text())
    assert report["preprocessing"] == {
        "mode": "crop",
        "resize": 180,
        "crop": 160,
        "size": [160, 160],
        "interpolation": "bilinear",
        "mean": [0.5] * 3,
        "std": [0.5] * 3,
        "channels": 3,
    }
    assert report["layers"][0]["shapes"]["input"] == [1, 4, 160, 160]
    result = invoke(cli, "run", photo, *TINY, "--crop", "112", "--out", out, "--pictures", "none")
    assert result.exit_code == 0, result.output
    preprocessing = json.loads((out / "photo" / "report.json").read_text())["preprocessing"]
    assert (preprocessing["resize"], preprocessing["crop"]) == (128, 112)  # 224 of 256, kept
    result = invoke(cli, "run", photo, *TINY, "--crop", "300", "--resize", "256", "--out", out)
    assert result.exit_code == 2 and "--crop 300 is larger than --resize" in result.stderr
    result = invoke(cli, "run", photo, *TINY, "--device", "cuda:7", "--out", out)
    assert result.exit_code == 2 and "--device cuda:7" in result.stderr


# ----------------------------------------------------------------------------- hardening


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The default weight initialization of GoogleNet")
@pytest.mark.parametrize("selection", [["--layer-type", "Conv2d"], ["--layer", "*"]])
def test_modules_a_type_or_glob_selects_but_never_run_are_skipped_with_a_note(cli, photo, tmp_path, selection):
    out = tmp_path / "out"
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "googlenet",
        "--weights",
        "none",
        *selection,
        "--pictures",
        "none",
        "--resize",
        "64",
        "--crop",
        "64",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "note: skipped" in result.stderr and "aux1.conv.conv" in result.stderr
    report = json.loads((out / "photo" / "report.json").read_text())
    assert "aux1.conv.conv" in report["skipped_layers"]
    assert "inception5b.branch4.1.conv" in [layer["name"] for layer in report["layers"]]
    named = invoke(
        cli,
        "run",
        photo,
        "--model",
        "googlenet",
        "--weights",
        "none",
        "--layer",
        "aux1.conv.conv",
        "--pictures",
        "none",
        "--resize",
        "64",
        "--crop",
        "64",
        "--out",
        tmp_path / "named",
    )
    assert named.exit_code == 2 and "aux1.conv.conv was never called" in _one_error_line(named)


def test_logits_are_never_guessed_from_several_outputs(cli, photo, tmp_path):
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "tests.conftest:embedding_and_logits_net",
        "--weights",
        "none",
        "--layer",
        "features.3",
        "--out",
        tmp_path / "a",
    )
    line = _one_error_line(result)
    assert result.exit_code == 2
    assert "tuple of 2 (1x32, 1x10)" in line and "--output-key 0 or --output-key 1" in line
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "tests.conftest:embedding_and_logits_net",
        "--weights",
        "none",
        "--layer",
        "features.3",
        "--output-key",
        "1",
        "--out",
        tmp_path / "b",
        "--pictures",
        "none",
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "b" / "photo" / "report.json").read_text())["logits"]["count"] == 10
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "tests.conftest:dict_net",
        "--weights",
        "none",
        "--layer",
        "features.3",
        "--out",
        tmp_path / "c",
    )
    assert result.exit_code == 2 and "'embedding' 1x32, 'scores' 1x10" in _one_error_line(result)


@pytest.mark.slow  # a run over a dozen photos: 3 s here
def test_image_names_never_clash_with_run_files_or_each_other(cli, tmp_path):
    import os

    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("run.json.png", "index.html.png", "RUN.JSON.png"):
        Image.new("RGB", (20, 20), (90, 9, 9)).save(folder / name)
    latin1 = os.fsdecode(b"caf\xe9.png")  # a Latin-1 file name on a UTF-8 system
    Image.new("RGB", (20, 20), (9, 90, 9)).save(folder / latin1)
    for pictures in ("none", "summary,channels,cam"):
        out = tmp_path / f"out-{pictures[:4]}"
        result = invoke(cli, "run", folder, *TINY, "--layer", "features.3", "--pictures", pictures, "--out", out)
        assert result.exit_code == 0, result.output
        assert (out / "run.json").is_file() and (out / "index.html").is_file()
        document = json.loads((out / "run.json").read_text())
        assert document["counts"]["done"] == 4
        outputs = [entry["output"] for entry in document["images"]]
        assert len(set(o.lower() for o in outputs)) == 4 and not {"run.json", "index.html"} & set(outputs)
        assert any(entry["image"].endswith("caf\\xe9.png") for entry in document["images"])
        (out / "index.html").read_text(encoding="utf-8")


def test_layers_whose_names_differ_only_in_unsafe_characters_keep_their_own_files(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "tests.conftest:slash_net",
        "--weights",
        "none",
        "--layer",
        "heads.a/b",
        "--layer",
        "heads.a_b",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "photo" / "report.json").read_text())
    files = [layer["pictures"]["summary"] for layer in report["layers"]]
    assert len(set(files)) == 2 and "heads.a_b.summary.png" in files
    assert all((out / "photo" / f).exists() for f in files)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--topk", "2000"], "--topk 2000: must be from 1 to 20"),
        (["--resize", "20000"], "--resize 20000: must be a whole number of pixels from 1 to 4096"),
        (["--crop", "0"], "--crop 0: must be a whole number"),
        (["--channels", "0"], "--channels 0: a count must be 1 or more"),
        (["--std", "nan"], "--std nan,nan,nan: every value must be a finite number"),
        (["--mean", "nan,inf,0"], "--mean nan,inf,0.0: every value must be a finite number"),
        (["--target", "-1"], "--target -1: a class index must be 0 or more"),
        (["--out", ""], "--out '': give a folder name"),
        (["--batch-size", "0"], "--batch-size 0: must be from 1 to 1024"),
        (["--dead-fraction", "2"], "--dead-fraction 2.0: must be above 0 and at most 1"),
        (["--dead-fraction", "0"], "--dead-fraction 0.0: must be above 0"),
        (["--seed", "99999999999999999999999"], "--seed 99999999999999999999999: a seed is a whole number"),
        (["--fail-on", ","], "--fail-on ,: name a check"),
        (["--device", "gpu"], "--device gpu: choose auto, cpu, cuda"),
        (["--pictures", "bogus"], "--pictures bogus: choose from summary, channels, cam"),
        (["--scale", "foo"], "--scale foo: choose tile or shared"),
    ],
)
def test_absurd_options_are_refused_before_anything_runs(cli, photo, tmp_path, args, message):
    result = invoke(cli, "run", photo, *TINY, *args)
    assert result.exit_code == 2, result.output
    assert message in _one_error_line(result)
    assert not (tmp_path / "hookviz-out").exists()


def test_absurd_options_that_can_be_clamped_are_clamped_with_a_note(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = invoke(cli, "run", photo, *TINY, "--layer", "features.3", "--topk", "10", "--channels", "0-30000000", "--out", out)
    assert result.exit_code == 0, result.output
    assert "--topk 10: the model has 5 classes" in result.stderr
    report = json.loads((out / "photo" / "report.json").read_text())
    assert len(report["layers"][0]["cam_topk"]) == 5
    assert report["layers"][0]["pictures"]["channels"] == "features.3.channels.png"
    result = invoke(cli, "run", photo, *TINY, "--layer", "features.3", "--channels", "100-200", "--out", tmp_path / "b")
    assert result.exit_code == 0, result.output
    assert "--channels 100-200: the layer has 6 channels (0-5), none of those asked for" in result.stderr
    report = json.loads((tmp_path / "b" / "photo" / "report.json").read_text())
    assert report["layers"][0]["pictures"]["channels"] is None and report["layers"][0]["notes"]


def test_max_pixels_bounds_the_resized_photo_too(cli, photo, tmp_path):
    result = invoke(cli, "run", photo, *TINY, "--resize", "4000", "--max-pixels", "1000000", "--out", tmp_path / "o")
    assert result.exit_code == 1
    line = next(l for l in result.stderr.splitlines() if l.startswith("hookviz: failed:"))
    assert "--resize 4000" in line and "--max-pixels 1,000,000" in line


def test_errors_name_the_right_argument(cli, photo, tmp_path):
    result = invoke(cli, "run", photo, "--model", "tests.conftest:broken_factory", "--out", tmp_path / "a")
    assert result.exit_code == 2
    assert "--model tests.conftest:broken_factory: the factory raised ValueError: no checkpoint" in _one_error_line(result)
    logs = tmp_path / "logs.txt"
    logs.write_text("a file")
    result = invoke(cli, "run", photo, *TINY, "--tensorboard", logs, "--out", tmp_path / "b")
    assert result.exit_code == 2 and "is a file, not a folder" in _one_error_line(result)
    result = invoke(cli, "run", photo, *TINY, "--device", "cuda:0", "--out", tmp_path / "c")
    if result.exit_code == 2:  # no GPU here: refused before the output folder exists
        assert "--device cuda:0: no CUDA device" in _one_error_line(result)
        assert not (tmp_path / "c").exists()


def test_a_grayscale_model_gets_grayscale_photos(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "tests.conftest:gray_net",
        "--weights",
        "none",
        "--layer",
        "conv",
        "--mean",
        "0.5",
        "--std",
        "0.25",
        "--out",
        out,
        "--save-tensors",
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "photo" / "report.json").read_text())
    assert report["preprocessing"]["channels"] == 1 and report["preprocessing"]["mean"] == [0.5]
    assert np.load(out / "photo" / "tensors.npz")["input"].shape == (1, 1, 224, 224)


def test_run_json_that_cannot_be_written_is_one_line(cli, photo, tmp_path, monkeypatch):
    import errno

    import hookviz.runs.runner as runner

    def disk_full(path, document):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner, "write_json", disk_full)
    result = invoke(cli, "run", photo, *TINY, "--out", tmp_path / "out")
    assert result.exit_code == 1
    line = _one_error_line(result)
    assert "could not write" in line and "run.json" in line and "No space left on device" in line


@pytest.mark.slow
def test_listing_into_a_closed_pipe_is_quiet(tmp_path):
    root = Path(__file__).resolve().parent.parent
    for command in (["layers", "--model", "resnet18"], ["models"]):
        shell = f"{sys.executable} -m hookviz {' '.join(command)} | head -1"
        completed = subprocess.run(shell, shell=True, capture_output=True, text=True, cwd=root)
        assert completed.stdout.count("\n") == 1 and completed.stderr == "", completed.stderr


@pytest.mark.parametrize("closed", [1, 2])
def test_a_command_started_with_stdout_or_stderr_closed_ends_as_it_would(closed):
    """``hookviz ... >&-`` or ``2>&-`` (a daemon's): Python makes the closed stream None, and every
    command ended in an AttributeError (exit 1): with stdout closed in exit_with's flush after its
    work, with stderr closed before any (a run's progress line, the help's boxes)."""
    import shlex

    root = Path(__file__).resolve().parent.parent
    shell = f"{shlex.quote(sys.executable)} -m hookviz --version {closed}>&-"  # the shell closes it, not a forked Python
    completed = subprocess.run(shell, shell=True, capture_output=True, cwd=root)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith(b"hookviz ") if closed == 2 else completed.stderr == b""


@pytest.mark.slow
def test_a_vision_transformer_is_explained_at_its_last_blocks_first_norm(cli, photo, tmp_path):
    result = invoke(
        cli, "run", photo, "--model", "vit_b_16", "--weights", "none", "--pictures", "none", "--out", tmp_path / "out"
    )
    assert result.exit_code == 0, result.output
    first = result.stderr.splitlines()[0]
    assert "using encoder.layers.encoder_layer_11.ln_1 (LayerNorm)" in first and "pytorch-grad-cam" in first
    report = json.loads((tmp_path / "out" / "photo" / "report.json").read_text())
    assert report["layers"][0]["name"] == "encoder.layers.encoder_layer_11.ln_1"
    assert report["layers"][0]["cam"]["shape"] == [14, 14]
    assert "transformer block" in report["layer_choice"]
    result = invoke(
        cli,
        "run",
        photo,
        "--model",
        "vit_b_16",
        "--weights",
        "none",
        "--crop",
        "256",
        "--layer",
        "encoder.ln",
        "--out",
        tmp_path / "b",
    )
    assert result.exit_code == 2
    assert "--crop 256: vit_b_16 takes 224x224 inputs, not 256x256; pass --crop 224" in _one_error_line(result)


def test_a_resize_alone_below_a_fixed_size_models_input_names_the_resize(cli, photo, tmp_path):
    """It named --crop 224, which the user never gave."""
    result = invoke(cli, "run", photo, "--model", "vit_b_16", "--weights", "none", "--resize", "64", "--out", tmp_path / "out")
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert line.startswith("hookviz: error: --resize 64: vit_b_16 takes 224x224 inputs") and "--crop" not in line
    assert "pass --resize 224 or more" in line


# ----------------------------------------------------------------------------- found by a hostile tester


@pytest.mark.slow
def test_skip_existing_redoes_images_explained_with_other_options(cli, photo, tmp_path):
    out = tmp_path / "out"
    base = ["run", photo, *TINY, "--layer", "features.3", "--pictures", "cam", "--out", out]
    assert invoke(cli, *base, "--target", "1").exit_code == 0
    for changed in (["--target", "2"], ["--crop", "160", "--resize", "180"], ["--cam", "layercam"]):
        result = invoke(cli, *base, *changed, "--skip-existing", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["counts"]["skipped"] == 0, changed
    result = invoke(cli, *base, "--cam", "layercam", "--skip-existing", "--json")
    assert json.loads(result.stdout)["counts"]["skipped"] == 1  # the same options again: done already


def test_the_console_counts_skipped_images_as_skipped_not_done(cli, photo, tmp_path):
    out = tmp_path / "out"
    other = tmp_path / "other.png"
    Image.new("RGB", (40, 30), (10, 200, 10)).save(other)
    base = ["run", *TINY, "--layer", "features.3", "--pictures", "none", "--out", out]
    assert invoke(cli, *base, photo).exit_code == 0
    result = invoke(cli, *base, photo, other, "--skip-existing")
    assert result.exit_code == 0, result.output
    assert "hookviz: 1 of 2 images done, 1 skipped (done by an earlier run)" in result.stderr
    counts = json.loads((out / "run.json").read_text())["counts"]
    assert (counts["done"], counts["skipped"]) == (1, 1)


def test_non_finite_logits_are_said_and_their_cam_is_not_drawn_as_zero(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = invoke(
        cli, "run", photo, "--model", "tests.conftest:nan_logits_net", "--weights", "none", "--layer", "features.3", "--out", out
    )
    assert result.exit_code == 0, result.output
    assert "logits are not all finite" in result.stderr
    report = json.loads((out / "photo" / "report.json").read_text())
    assert report["target"]["index"] == report["top5"][0]["index"]
    from hookviz import explain

    from .conftest import nan_logits_net

    explanation = explain(nan_logits_net().eval(), photo, layers=["features.3"])
    title = " ".join(explanation.figure(kind="cam").axes[1].get_title().split())  # wrapped to its panel
    assert "no finite values" in title and "all zero" not in title


def test_a_file_that_is_not_a_checkpoint_is_refused_in_one_line(cli, photo, tmp_path):
    junk = tmp_path / "junk.pth"
    junk.write_bytes(bytes(range(100)))
    for weights in (junk, Path("/etc/passwd")):
        result = invoke(cli, "run", photo, "--model", "tests.conftest:tiny_net", "--weights", weights, "--out", tmp_path / "o")
        assert result.exit_code == 2
        assert f"--weights {weights}: not a PyTorch checkpoint" in _one_error_line(result)


def test_a_full_disk_stops_the_run_at_the_first_image(cli, tmp_path, monkeypatch):
    import errno

    import hookviz.store.files as outputs

    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(4):
        Image.new("RGB", (20, 20), (i * 50, 0, 0)).save(folder / f"im{i}.png")
    real = outputs.atomic_write

    def full(path, data):
        if path.parent.name.startswith("im"):  # every file of an image (run.json still fits)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(outputs, "atomic_write", full)  # (files are written in this process with no pictures)
    result = invoke(cli, "run", folder, *TINY, "--layer", "features.3", "--out", tmp_path / "out", "--pictures", "none")
    assert result.exit_code == 1
    assert "no space left on the device" in _one_error_line(result) and "--skip-existing" in result.stderr
    assert result.stderr.count("hookviz: failed:") <= 1


@pytest.mark.parametrize(
    "factory, expected",
    [
        ("binary_net", 0),
        ("binary_vector_net", 0),
    ],
)
def test_a_binary_classifier_gets_a_sigmoid_probability(factory, expected):
    import torch

    from hookviz import explain

    from . import conftest

    result = explain(getattr(conftest, factory)().eval(), torch.rand(3, 32, 32), layers=["features.3"])
    assert result.target.index == expected and 0 < result.target.probability < 1
    assert result.target.probability == pytest.approx(1 / (1 + np.exp(-result.target.logit)))


def test_class_indices_are_not_taken_for_logits():
    import torch

    from hookviz import explain
    from hookviz.errors import UsageError

    from .conftest import index_net

    with pytest.raises(UsageError, match="of int64 \\(class indices\\?\\)"):
        explain(index_net().eval(), torch.rand(3, 32, 32), layers=["features.3"])


def test_explain_turns_gradients_on_under_no_grad_and_inference_mode(photo):
    import torch

    from hookviz import explain

    from .conftest import tiny_net

    model = tiny_net().eval()
    expected = explain(model, photo, layers=["features.3"]).layers[0].cam
    with torch.no_grad():
        quiet = explain(model, photo, layers=["features.3"])
    with torch.inference_mode():
        inferred = explain(model, photo, layers=["features.3"])
    np.testing.assert_allclose(quiet.layers[0].cam, expected)
    np.testing.assert_allclose(inferred.layers[0].cam, expected)


def test_python_callers_get_their_own_words(photo, tmp_path):
    import torch

    from hookviz import explain, load_model
    from hookviz.errors import UsageError

    from .conftest import tiny_net

    with pytest.raises(UsageError, match="weights='nowhere.pth': no such file"):
        load_model("tests.conftest:tiny_net", "nowhere.pth")
    with pytest.raises(UsageError, match="model='NoneType': expected a torch.nn.Module"):
        explain(None, photo)
    with pytest.raises(UsageError, match="image='NoneType': expected a path"):
        explain(tiny_net().eval(), None)
    with pytest.raises(UsageError, match="a tensor image of 5 channels; the model takes 3"):
        explain(tiny_net().eval(), torch.zeros(5, 32, 32))
    from_array = explain(tiny_net().eval(), np.asarray(Image.open(photo)), layers=["features.3"])
    assert from_array.layers[0].cam is not None
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        from_array.save(blocker)


def test_a_float64_model_gets_float64_input(photo):
    from hookviz import explain

    from .conftest import double_net

    result = explain(double_net().eval(), photo, layers=["features.3"])
    assert result.layers[0].cam is not None and result.target is not None


def test_a_call_that_does_not_exist_says_how_often_the_module_ran(cli, photo, tmp_path):
    result = invoke(cli, "run", photo, *TINY, "--layer", "act:7", "--out", tmp_path / "o")
    assert result.exit_code == 2 and "act was called 2 times in the forward pass" in _one_error_line(result)


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_names_with_control_characters_stay_on_one_line_and_two_spellings_are_one_image(cli, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    Image.new("RGB", (20, 20)).save(folder / "two\nlines.png")
    (folder / "broken\rname.png").write_text("not an image")
    result = invoke(
        cli,
        "run",
        folder / "two\nlines.png",
        folder / ".." / "in" / "two\nlines.png",
        folder / "broken\rname.png",
        *TINY,
        "--layer",
        "features.3",
        "--out",
        tmp_path / "out",
    )
    assert result.exit_code == 1
    failed = [line for line in result.stderr.splitlines() if line.startswith("hookviz: failed:")]
    assert len(failed) == 1 and "broken\\rname.png" in failed[0]
    document = json.loads((tmp_path / "out" / "run.json").read_text())
    assert document["counts"]["images"] == 2 and "two\\nlines.png" in document["images"][0]["image"]


def test_from_list_reads_names_that_are_not_utf8(cli, tmp_path):
    import os

    name = os.fsdecode(b"caf\xe9.png")
    Image.new("RGB", (20, 20)).save(tmp_path / name)
    listing = tmp_path / "list.txt"
    listing.write_bytes(os.fsencode(str(tmp_path / name)) + b"\n")
    result = invoke(cli, "run", "--from-list", listing, *TINY, "--layer", "features.3", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output


def test_a_from_list_holding_a_nul_byte_is_refused_in_one_line(tmp_path):
    """A binary file given as --from-list ended in "ValueError: embedded null byte" (exit 1)."""
    listing = tmp_path / "list.bin"
    listing.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\n")
    result = hookviz_cli("run", "--from-list", listing, *TINY, "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"hookviz: error: --from-list {listing}: holds a NUL byte, which no path has; give a text file of paths, one a line"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["cp1252", "latin-1"])
def test_a_name_the_console_cannot_spell_never_ends_the_run(tmp_path, photo, encoding):
    """A Windows console (cp1252) or a latin-1 terminal cannot print 🐱: the line shows it
    escaped, and the run goes on to the next image."""
    folder = tmp_path / "in"
    folder.mkdir()
    Image.open(photo).save(folder / "emoji_🐱.png")
    Image.open(photo).save(folder / "plain.png")
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, "-m", "hookviz", "run", str(folder), *TINY, "--layer", "fc", "--pictures", "none", "--out", str(out)],
        capture_output=True,
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PYTHONIOENCODING": encoding},
    )
    stderr = completed.stderr.decode(encoding)
    assert completed.returncode == 0, stderr
    assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr
    document = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert [entry["status"] for entry in document["images"]] == ["done", "done"]
    assert "emoji_\\U0001f431.png" in completed.stdout.decode(encoding)  # said, as best the console can


def _many(folder: Path, count: int) -> Path:
    folder.mkdir()
    for i in range(count):
        Image.new("RGB", (32, 24), (i * 9 % 256, 90, 40)).save(folder / f"im{i:02d}.png")
    return folder


def test_a_large_run_prints_counts_not_a_line_per_image(cli, tmp_path, monkeypatch):
    """21 images (more than 20), stderr not a terminal (a CI log): a line of counts and time
    left every PROGRESS_EVERY seconds (here: after every image) instead of one per image."""
    import re

    import hookviz.progress

    monkeypatch.setattr(hookviz.progress, "PROGRESS_EVERY", 0.0)
    folder = _many(tmp_path / "in", 21)
    (folder / "im05.png").write_bytes(b"not a photo")
    base = ["run", folder, *TINY, "--layer", "features.3", "--pictures", "none"]
    result = invoke(cli, *base, "--out", tmp_path / "out")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "hookviz: failed: " in result.stderr and "im05.png" in result.stderr  # failures, always
    progress = [line for line in result.stderr.splitlines() if re.fullmatch(r"hookviz: \d+ of 21 images, \d failed.*", line)]
    assert len(progress) == 20  # not after the last one: the closing line says it
    assert re.fullmatch(r"hookviz: 20 of 21 images, 1 failed, about \d+ s left", progress[-1]), progress[-1]
    assert "hookviz: 20 of 21 images done, 1 failed; results in " in result.stderr
    verbose = invoke(cli, *base, "--out", tmp_path / "verbose", "--verbose")
    assert len(verbose.stdout.splitlines()) == 20 and "im20.png: target " in verbose.stdout
    assert not any(re.fullmatch(r"hookviz: \d+ of 21 images, .*", line) for line in verbose.stderr.splitlines())
    few = invoke(
        cli,
        "run",
        _many(tmp_path / "few", 3),
        *TINY,
        "--layer",
        "features.3",
        "--pictures",
        "none",
        "--out",
        tmp_path / "few-out",
    )
    assert len(few.stdout.splitlines()) == 3


def test_the_first_line_names_a_few_layers_and_run_json_all(cli, photo, tmp_path):
    out = tmp_path / "out"
    result = invoke(
        cli,
        "run",
        photo,
        *TINY,
        "--layer-type",
        "Conv2d",
        "--layer-type",
        "ReLU",
        "--layer",
        "fc",
        "--pictures",
        "none",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    layers = json.loads((out / "run.json").read_text())["layers"]
    assert len(layers) == 5
    first = result.stderr.splitlines()[0]
    assert first.endswith(f"; 5 layers: {', '.join(layers[:3])}, and 2 more; all in run.json"), first
    two = invoke(cli, "run", photo, *TINY, "--layer-type", "Conv2d", "--pictures", "none", "--out", tmp_path / "two")
    assert two.stderr.splitlines()[0].endswith("; layers: features.0, features.3")


def test_an_out_through_a_dangling_link_is_refused_before_anything_runs(cli, photo, tmp_path):
    (tmp_path / "results").symlink_to(tmp_path / "mounted-disk")  # the disk is not mounted
    out = tmp_path / "results" / "run1"
    result = invoke(cli, "run", photo, *TINY, "--out", out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"hookviz: error: --out {out}: {tmp_path / 'results'} is a link to {tmp_path / 'mounted-disk'}, which does not "
        "exist; create that folder or choose another"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photo.png", "results"]


def test_an_out_that_cannot_be_made_is_a_usage_error_not_a_failed_run_json(cli, photo, tmp_path, monkeypatch):
    import errno

    out = tmp_path / "out"
    make = Path.mkdir

    def full_disk(self, *args, **kwargs):
        if self == out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return make(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", full_disk)
    result = invoke(cli, "run", photo, *TINY, "--out", out)
    assert result.exit_code == 2, result.output
    assert (
        result.stderr.strip()
        == f"hookviz: error: --out {out}: cannot write there (No space left on device); choose another folder"
    )
    assert not out.exists()


def test_a_baseline_under_torchrun_says_what_to_run_once_every_process_has_finished(cli, photo, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun's: no --shard was typed
    out = tmp_path / "out"
    result = invoke(cli, "run", photo, *TINY, "--out", out, "--baseline", tmp_path / "base")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: --baseline compares a whole run; once every shard (--shard, torchrun's processes or a Slurm "
        f"array's tasks) has finished, run `hookviz diff {tmp_path / 'base'} {out}`"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target", "99"], "--target 99: class index out of range (the model has 0..4)"),
        (["--output-key", "3"], "--output-key 3: the model returned a 1x5 tensor; no such entry"),
    ],
)
def test_a_factory_models_target_or_output_key_it_lacks_is_refused_before_the_out_folder_exists(
    cli, photo, tmp_path, args, message
):
    # A factory's model says its class count only through its output: the dry pass that
    # recognises its task reads it, so nothing is created for a run that cannot start.
    out = tmp_path / "out"
    result = invoke(cli, "run", photo, *TINY, *args, "--out", out, "-q")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"hookviz: error: {message}"
    assert not out.exists()


@pytest.mark.parametrize("fail_on", [True, False])
def test_a_map_that_is_not_finite_is_said_once_as_a_finding_or_a_note(cli, photo, tmp_path, fail_on):
    args = ["run", photo, "--model", "tests.conftest:nan_net", "--layer", "features.3", "--out", tmp_path / "out"]
    result = invoke(cli, *args, *(["--fail-on", "nonfinite"] if fail_on else []))
    assert result.exit_code == (3 if fail_on else 0), result.output
    notes = [line for line in result.stderr.splitlines() if "NaN/Inf" in line and line.startswith("hookviz: note:")]
    findings = [line for line in result.stderr.splitlines() if line.startswith("hookviz: check nonfinite failed:")]
    if fail_on:
        assert not notes and any("gradcam map has" in line for line in findings), result.stderr
    else:
        assert not findings and any("--fail-on nonfinite fails the run on it" in line for line in notes), result.stderr
