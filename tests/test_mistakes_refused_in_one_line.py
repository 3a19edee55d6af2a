"""A user's mistakes with multi-input CSVs, --aligned, clips, superpixels and --topk: each is
refused in one line naming the file or argument, never run on silently."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from hookviz.tasks.segment import Segment

from .cli_helpers import hookviz_run

RGBD, META = "tests.multi_models:build_rgbd", "tests.multi_models:build_meta"


def _photos(folder, names=("a", "b")):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in names:
        Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(folder / f"{name}.png")
    return folder


def _one_line(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and all(w in lines[0] for w in words), result.output
    assert "Traceback" not in result.output


def test_a_csv_without_a_header_says_its_first_line_is_a_row_not_a_header(tmp_path):
    table = tmp_path / "meta.csv"
    table.write_text("a.png,1,2,3\nb.png,4,5,6\n")
    small = ("-q", "--resize", 32, "--pictures", "none")
    result = hookviz_run(_photos(tmp_path / "rgb"), *small, "--input", f"meta={table}", model=META, out=tmp_path / "out")
    failed = [line for line in result.stderr.splitlines() if line.startswith("hookviz: failed:")]
    assert result.exit_code == 1 and len(failed) == 1, result.output
    assert "meta.csv: input 'meta': its first line, the header, is the row of a.png; add a header line" in failed[0]


def test_a_csv_with_two_rows_for_one_file_is_refused(tmp_path):
    table = tmp_path / "meta.csv"
    table.write_text("file,x,y,z\na.png,1,2,3\na.png,4,5,6\nb.png,1,1,1\n")
    result = hookviz_run(_photos(tmp_path / "rgb"), "-q", "--input", f"meta={table}", model=META, out=tmp_path / "out")
    _one_line(result, "meta.csv", "a.png", "two rows")


def test_aligned_refuses_a_csv_and_the_first_input(tmp_path):
    rgb, table = _photos(tmp_path / "rgb"), tmp_path / "meta.csv"
    table.write_text("file,x,y,z\na.png,1,2,3\nb.png,4,5,6\n")
    result = hookviz_run(rgb, "-q", "--input", f"meta={table}", "--aligned", "meta", model=META, out=tmp_path / "out")
    _one_line(result, "--aligned meta", "CSV")
    depth = tmp_path / "depth"
    depth.mkdir()
    for name in ("a", "b"):
        np.save(depth / f"{name}.npy", np.zeros((20, 24), np.float32))
    result = hookviz_run(rgb, "-q", "--input", f"depth={depth}", "--aligned", "0", "--task", Segment.name,
                         model=RGBD, out=tmp_path / "out")  # fmt: skip
    _one_line(result, "--aligned 0", "first input")


def test_more_clips_than_a_video_has_frames_is_said_once_not_once_per_clip(tmp_path):
    from .video_clips import encode

    video = encode(tmp_path / "four.mp4", frames=4)
    result = hookviz_run(video, "-q", "--clips", 5, "--frames", 4, model="tests.video_clips:video_net", out=tmp_path / "out")
    failed = [line for line in result.stderr.splitlines() if line.startswith("hookviz: failed:")]
    assert result.exit_code == 1 and len(failed) == 1 and "fewer than --clips 5" in failed[0], result.output


def test_slics_one_superpixel_error_advises_what_does_cut_the_input():
    import pytest
    import torch

    from hookviz.errors import ImageError
    from hookviz.methods.superpixels import SuperpixelOptions, segments

    noise = torch.rand((1, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ImageError) as refused:
        segments(noise, SuperpixelOptions(), "lime")
    assert "higher superpixel_compactness" in str(refused.value) and "\n" not in str(refused.value)
    advised = segments(noise, SuperpixelOptions(superpixel_compactness=100.0), "lime")  # the advice, followed
    assert int(advised.max()) >= 1


def test_topk_refusal_names_the_layer_method_it_draws_not_a_pixel_method_already_first(tmp_path):
    photo = _photos(tmp_path / "rgb", names=("a",)) / "a.png"
    result = hookviz_run(photo, "-q", "--cam", "saliency,fem", "--topk", 2, out=tmp_path / "out")
    _one_line(result, "--topk 2", "fem makes the same map", "maps a layer (gradcam) before fem")


def test_a_csv_cell_of_nan_or_inf_fails_its_sample_in_one_line(tmp_path):
    table = tmp_path / "meta.csv"
    table.write_text("file,x,y,z\na.png,1,nan,3\nb.png,4,5,6\n")
    small = ("-q", "--resize", 32, "--pictures", "none")
    result = hookviz_run(_photos(tmp_path / "rgb"), *small, "--input", f"meta={table}", model=META, out=tmp_path / "out")
    failed = [line for line in result.stderr.splitlines() if line.startswith("hookviz: failed:")]
    assert result.exit_code == 1 and len(failed) == 1, result.output
    assert "meta.csv: input 'meta': the row of a.png holds nan, not a finite number" in failed[0]


def test_the_attributions_chart_labels_a_non_finite_value_without_warnings(recwarn):
    from types import SimpleNamespace

    from hookviz.render.inputs import attribution_chart

    pixel = SimpleNamespace(inputs={"meta": np.array([0.5, np.nan, -np.inf], np.float32)})
    explanation = SimpleNamespace(pixel_maps={"saliency": pixel}, image=SimpleNamespace(features={"meta": ("a", "b", "c")}))
    assert attribution_chart(explanation, "meta").startswith(b"\x89PNG")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]


def test_a_torchscript_model_is_refused_in_one_line_by_the_command_and_by_explain(tmp_path):
    """A scripted model ended in torch's "register_forward_pre_hook is not supported on ScriptModules"
    (a RuntimeError, exit 1): TorchScript takes no Python hooks, so no layer of it can be recorded."""
    import hookviz
    from hookviz.errors import UsageError
    from tests.conftest import scripted_tiny_net

    says = (
        "a TorchScript module (torch.jit.script or torch.jit.trace) takes no Python hooks, so none of its layers can "
        "be recorded; give the nn.Module it was made from"
    )
    result = hookviz_run(_photos(tmp_path / "rgb", ["a"]), model="tests.conftest:scripted_tiny_net", out=tmp_path / "o")
    _one_line(result, f"--model tests.conftest:scripted_tiny_net: {says}")
    assert not (tmp_path / "o").exists()
    with pytest.raises(UsageError, match=f"^model='RecursiveScriptModule': {re.escape(says)}$"):
        hookviz.explain(scripted_tiny_net(), np.zeros((20, 24, 3), np.uint8))


def test_explain_refuses_a_batch_of_photos_in_one_line():
    """A (N, C, H, W) batch was taken as a clip (C, T, H, W) and ended in conv2d's RuntimeError."""
    import torch

    import hookviz
    from hookviz.errors import UsageError
    from tests.conftest import tiny_net

    with pytest.raises(UsageError) as refused:
        hookviz.explain(tiny_net(), torch.rand(2, 3, 16, 16))
    assert str(refused.value) == (
        "image='2x3x16x16': a batch of 2 images (N, C, H, W); explain takes one at a time: pass image[0], image[1], ..."
    )


def test_explanation_save_refuses_an_empty_folder_name_and_one_it_cannot_make(tmp_path, monkeypatch):
    """``save("")`` wrote into the working folder, as a path reads ''; a folder below a file ended in
    a bare NotADirectoryError."""
    import hookviz
    from hookviz.errors import OutputError, UsageError
    from tests.conftest import tiny_net

    monkeypatch.chdir(tmp_path)
    result = hookviz.explain(tiny_net(), np.zeros((20, 24, 3), np.uint8), layers="features.3")
    with pytest.raises(UsageError, match=r"^directory='': give a folder name, such as 'out'$"):
        result.save("", pictures="none")
    (tmp_path / "notes.txt").write_text("")
    below_a_file = tmp_path / "notes.txt" / "out"
    with pytest.raises(OutputError, match=rf"^directory={re.escape(repr(below_a_file))}: cannot create it \(Not a directory\)"):
        result.save(below_a_file, pictures="none")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_empty_pictures_option_is_refused_not_read_as_none(tmp_path):
    """``--pictures "$PICTURES"`` with the variable unset wrote no picture at all, silently."""
    result = hookviz_run(_photos(tmp_path / "rgb", ["a"]), "--pictures", "", out=tmp_path / "o")
    _one_line(result, "--pictures '': give picture kinds separated by commas (summary,cam), or none")
    assert not (tmp_path / "o").exists()


def test_a_target_named_among_class_names_that_do_not_fit_the_output_says_so():
    """explain(categories=[...]) with fewer names than the model has classes dropped them silently,
    and a target by name was refused with "this model has no class names", though it was given some."""
    import hookviz
    from hookviz.errors import TargetError
    from tests.conftest import tiny_net

    with pytest.raises(TargetError) as refused:
        hookviz.explain(tiny_net(), np.zeros((20, 24, 3), np.uint8), categories=["cat", "dog"], target="cat")
    assert str(refused.value) == (
        "target='cat': the model's output has 5 classes but there are 2 class names, so no name is used; "
        "give one name per class, or a class index"
    )


@pytest.mark.parametrize("cam", [5, None, 2.5])
def test_explain_refuses_a_cam_that_is_no_name_in_one_line(cam):
    """``explain(cam=5)`` ended in a bare TypeError ('int' object is not iterable)."""
    import torch

    import hookviz
    from hookviz.errors import UsageError
    from tests.conftest import tiny_net

    with pytest.raises(UsageError) as refused:
        hookviz.explain(tiny_net().eval(), torch.rand(3, 16, 16), cam=cam)
    assert str(refused.value) == f"cam={cam!r}: give a method's name, names separated by commas, or a list of names"


@pytest.mark.slow  # two runs of the command: ~2 s
def test_a_baseline_or_a_diff_folder_that_links_to_itself_is_refused_in_one_line(tmp_path):
    """``--baseline`` or ``hookviz diff`` given a link to itself (``ln -s loop loop``) ended in
    'RuntimeError: Symlink loop' (Path.resolve); it is no run's folder, said as for a missing one."""
    from .cli_helpers import hookviz_cli

    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    photos = _photos(tmp_path / "in")
    run = hookviz_run(photos, "-q", "--baseline", loop, out=tmp_path / "out")
    assert run.exit_code == 2 and run.stderr.strip().splitlines() == [
        f"hookviz: error: --baseline {loop}: no such folder; give the --out folder of a hookviz run"
    ], run.output
    assert hookviz_run(photos, "-q", out=tmp_path / "done").exit_code == 0
    for pair in ((loop, tmp_path / "done"), (tmp_path / "done", loop)):
        result = hookviz_cli("diff", *pair)
        assert result.exit_code == 2 and "Symlink loop" not in result.output and "Traceback" not in result.output, result.output
        assert len(result.stderr.strip().splitlines()) == 1 and "no such folder" in result.stderr, result.output


def test_task_detect_of_a_model_that_takes_one_tensor_is_refused_in_one_line(tmp_path):
    """A classifier given --task detect failed every photo with conv2d's TypeError (exit 1), where
    --task segment was refused up front; it is refused in one line (exit 2)."""
    result = hookviz_run(_photos(tmp_path / "in"), "-q", "--task", "detect", out=tmp_path / "out")
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        "hookviz: error: --task detect: the model does not take a list of photos, as a detector does; "
        "for a classifier or segmenter, pass --task classify or segment, or leave it out"
    ], result.output
