"""``hookviz run`` of a vision-language model as a user meets it (the tiny LLaVA of
tests/vlm_models.py): Ctrl-C midway, ``--json``, the special tokens of an answer, the run's
options it does not honour, each refused in one line, and the disk's errors."""

from __future__ import annotations

import json
import signal

import pytest

from .cli_helpers import hookviz_run
from .conftest import SAMPLES, no_partial_files
from .vlm_models import save_llava

transformers = pytest.importorskip("transformers")

PROMPT = "describe the photo ."


def _run(folder, out, *args, photos=(SAMPLES / "cat.png",)):
    return hookviz_run(list(photos), "--prompt", PROMPT, *args, model=f"hf:{folder}", weights=None, out=out)


def _said(result) -> list[str]:
    """The lines on stderr after the run's first, which says what runs (as a photo run's does)."""
    lines = result.stderr.strip().splitlines()
    assert lines and lines[0].startswith("hookviz: model hf:"), result.stderr
    return lines[1:]


def test_ctrl_c_midway_writes_the_photos_finished_and_marks_the_run_interrupted(llava_folder, tmp_path, monkeypatch):
    """As a run of another model stops: the photo being explained is abandoned at the model's next
    module, run.json and index.html describe the run, exit status 130, one line; --skip-existing
    then does only the photo left."""
    import os

    from hookviz.vlm import explain

    real, calls = explain.explain_photo, []

    def explain_photo(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # Ctrl-C as the second photo begins
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(explain, "explain_photo", explain_photo)
    out, previous = tmp_path / "out", signal.getsignal(signal.SIGINT)
    try:
        result = _run(llava_folder, out, "--answer", "a cat", photos=(SAMPLES / "cat.png", SAMPLES / "coffee.png"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.exit_code == 130, result.output
    assert _said(result) == [
        f"hookviz: interrupted: 1 image written, 0 failed, 1 not done; see {out / 'run.json'} "
        "(rerun with --skip-existing to resume)"
    ]
    run = json.loads((out / "run.json").read_text())
    assert run["interrupted"] is True and run["counts"] == {"images": 2, "done": 1, "failed": 0, "skipped": 0, "not_done": 1}
    assert [(e["output"], e["status"], e["error"]) for e in run["images"]] == [
        ("cat", "done", None),
        ("coffee", "not_done", "interrupted"),
    ]
    assert (out / "cat" / "report.json").exists() and not (out / "coffee").exists()
    assert (out / "index.html").exists() and no_partial_files(out)
    resumed = _run(
        llava_folder, out, "--answer", "a cat", "--skip-existing", photos=(SAMPLES / "cat.png", SAMPLES / "coffee.png")
    )
    assert resumed.exit_code == 0, resumed.output
    run = json.loads((out / "run.json").read_text())
    assert [(e["output"], e["status"]) for e in run["images"]] == [("cat", "skipped"), ("coffee", "done")]


def test_json_prints_the_run_file_as_a_run_of_another_model_does(llava_folder, tmp_path):
    result = _run(llava_folder, tmp_path / "out", "--answer", "a cat", "--json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads((tmp_path / "out" / "run.json").read_text())
    assert printed["task"] == "describe" and printed["counts"]["done"] == 1


def test_special_tokens_of_the_answer_are_left_out_of_its_text_and_not_explained_by_default(tmp_path):
    """Generated ids a tokenizer calls special (here ``<s>``) are what transformers'
    ``batch_decode(skip_special_tokens=True)`` leaves out; ``--tokens`` indexes every generated token."""
    import torch
    from PIL import Image

    folder = tmp_path / "llava"
    model, processor = save_llava(folder, seed=1)  # a seed whose greedy answer holds <s>
    photo = Image.open(SAMPLES / "cat.png").convert("RGB")
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}], add_generation_prompt=True
    )
    inputs = processor(images=photo, text=text, return_tensors="pt")
    with torch.no_grad():
        written = model.generate(**inputs, max_new_tokens=6, do_sample=False)[:, inputs["input_ids"].shape[1] :]
    special = [k for k, i in enumerate(written[0].tolist()) if i in processor.tokenizer.all_special_ids]
    assert special, "the tiny model's answer holds no special token: choose another seed"

    result = _run(folder, tmp_path / "out", "--max-new-tokens", "6", "--cam", "rollout")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    assert report["text"] == processor.batch_decode(written, skip_special_tokens=True)[0]
    assert [t["id"] for t in report["tokens"]] == written[0].tolist()
    assert [k for k, t in enumerate(report["tokens"]) if t.get("special")] == special
    assert [t["tokens"] for t in report["targets"]] == [[k] for k in range(6) if k not in special]

    asked = _run(folder, tmp_path / "asked", "--max-new-tokens", "6", "--cam", "rollout", "--tokens", str(special[0]))
    assert asked.exit_code == 0, asked.output
    (target,) = json.loads((tmp_path / "asked" / "cat" / "report.json").read_text())["targets"]
    assert target["tokens"] == [special[0]] and target["label"] == report["tokens"][special[0]]["token"]


@pytest.mark.parametrize(
    "args, line",
    [
        (["--resize", "64"], "--resize 64: a vision-language model's run does not take it yet; drop it"),
        (["--pictures", "none"], "--pictures none: a vision-language model's run does not take it yet; drop it"),
        (["--layer-type", "Linear"], "--layer-type: a vision-language model's run does not take it yet; drop it"),
        (["--task", "classify"], "--task classify: a vision-language model's run does not take it yet; drop it"),
        (["--cam", "occlusion", "--occlusion-window", "8"], "--occlusion-window 8: a vision-language model's run does not"),
        (["--objective", "ce"], "--objective ce: a vision-language model takes logit or logprob"),
        (["--weights", "model.pt"], "--weights model.pt: a vision-language model loads the weights saved with it (DEFAULT)"),
    ],
)
def test_an_option_the_run_does_not_honour_is_refused_in_one_line(llava_folder, tmp_path, args, line):
    result = _run(llava_folder, tmp_path / "out", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"hookviz: error: {line}") and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_max_pixels_refuses_a_larger_photo(llava_folder, tmp_path):
    result = _run(llava_folder, tmp_path / "out", "--max-pixels", "1000")
    assert result.exit_code == 1, result.output
    assert "cat.png: 451x300 is 135,300 pixels, above --max-pixels 1,000" in result.stderr
    assert json.loads((tmp_path / "out" / "run.json").read_text())["counts"]["failed"] == 1


def test_a_run_stopped_on_an_error_says_it_in_one_line_and_in_run_json(llava_folder, tmp_path):
    result = _run(llava_folder, tmp_path / "out", "--answer", "a cat", "--tokens", "7")
    assert result.exit_code == 2, result.output
    assert _said(result) == [
        "hookviz: error: --tokens 7: '7' is no token of the answer; give indices from 0 to 1 (the answer: 'a cat')"
    ]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["error"] == _said(result)[0].removeprefix("hookviz: error: ")
    assert [(e["status"], e["error"]) for e in run["images"]] == [("not_done", "the run stopped on an error")]


def test_the_run_holds_its_out_as_any_run_does(llava_folder, tmp_path, monkeypatch):
    """A run writing into --out now (here held as a run holds it) refuses this one in one line before
    the model loads, nothing written; while this one explains, another run is refused in turn; at
    its end the folder is free, and marked as a run's output."""
    from hookviz.errors import OutputError
    from hookviz.inputs.discovery import OUTPUT_MARKER
    from hookviz.store.outfolder import FolderLock
    from hookviz.vlm import explain

    out = tmp_path / "out"
    out.mkdir()
    other = FolderLock(out)
    assert other.acquire()
    refused = _run(llava_folder, out, "--answer", "a cat")
    other.release()
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.strip().splitlines() == [
        f"hookviz: error: --out {out}: another hookviz run is writing into this folder now; wait for it to end, "
        "or choose another --out (shards of one run share a folder with --shard K/N)"
    ]
    assert sorted(p.name for p in out.iterdir()) == [".hookviz-run.lock"]

    real, seen = explain.explain_photo, []

    def explain_photo(*args, **kwargs):
        with pytest.raises(OutputError, match="another hookviz run is writing into this folder now"):
            FolderLock(out).acquire()
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(explain, "explain_photo", explain_photo)
    result = _run(llava_folder, out, "--answer", "a cat")
    assert result.exit_code == 0 and seen == [1], result.output
    assert FolderLock(out).acquire() and (out / OUTPUT_MARKER).exists()


def test_a_photo_turned_by_its_exif_orientation_is_seen_upright(llava_folder, tmp_path):
    """As a photo run reads it (``inputs.images.load_image``): a camera's photo stored on its side
    with EXIF orientation 6 gives the answer and maps of the same photo stored upright."""
    import numpy as np
    from PIL import Image

    upright = Image.open(SAMPLES / "cat.png").convert("RGB").crop((60, 0, 360, 200))
    upright.save(tmp_path / "upright.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: turn a quarter clockwise to show it
    upright.transpose(Image.Transpose.ROTATE_90).save(tmp_path / "turned.png", exif=exif)
    photos = (tmp_path / "upright.png", tmp_path / "turned.png")
    result = _run(llava_folder, tmp_path / "out", "--max-new-tokens", "2", "--save-tensors", photos=photos)
    assert result.exit_code == 0, result.output
    reports = [json.loads((tmp_path / "out" / name / "report.json").read_text()) for name in ("upright", "turned")]
    assert reports[0]["text"] == reports[1]["text"]
    with np.load(tmp_path / "out" / "upright" / "tensors.npz") as a, np.load(tmp_path / "out" / "turned" / "tensors.npz") as b:
        assert sorted(a.files) == sorted(b.files) and a.files
        for key in a.files:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)

    import hookviz

    seen = hookviz.explain(f"hf:{llava_folder}", tmp_path / "turned.png", prompts=PROMPT, answer="a cat").photo
    assert np.allclose(seen, hookviz.explain(f"hf:{llava_folder}", upright, prompts=PROMPT, answer="a cat").photo)


def test_an_answer_of_special_tokens_alone_fails_its_photo_and_the_run_goes_on(tmp_path):
    """As a photo that cannot be used in a run of another model: that photo failed with its reason
    (one line, run.json), the next explained, exit status 1."""
    from PIL import Image

    folder = tmp_path / "llava"
    save_llava(folder, seed=1)  # a seed whose answer about a red square is <unk> alone
    Image.new("RGB", (32, 32), (255, 0, 0)).save(tmp_path / "red.png")
    out = tmp_path / "out"
    result = _run(folder, out, "--max-new-tokens", "2", photos=(tmp_path / "red.png", SAMPLES / "cat.png"))
    assert result.exit_code == 1, result.output
    reason = (
        f"{tmp_path / 'red.png'}: the answer '<unk> <unk>' is special tokens alone, which are not explained by default; "
        "give --answer, or --tokens to explain them"
    )
    assert _said(result) == [
        f"hookviz: failed: {reason}",
        f"hookviz: 1 of 2 images failed: {tmp_path / 'red.png'}; reasons in {out / 'run.json'}",
        f"hookviz: 1 of 2 images done, 1 failed; results in {out}/",
    ]
    run = json.loads((out / "run.json").read_text())
    assert [(e["output"], e["status"], e["error"]) for e in run["images"]] == [("red", "failed", reason), ("cat", "done", None)]
    assert run["error"] is None and not (out / "red").exists() and (out / "cat" / "report.json").exists()


def test_the_model_raising_on_a_photo_fails_that_photo_and_the_run_goes_on(llava_folder, tmp_path, monkeypatch):
    """A RuntimeError from inside the model's forward (foreign code) costs that photo, as in a run
    of another model: its line and run.json give the photo and the model's error, the next photo
    is explained, exit status 1 (it stopped the whole run, with a traceback's last line)."""
    from PIL import Image
    from transformers.models.clip import modeling_clip

    real = modeling_clip.CLIPVisionEmbeddings.forward

    def forward(self, pixel_values, *args, **kwargs):
        if float(pixel_values.flatten(2).std(-1).max()) == 0.0:  # the plain red photo's, flat in each channel
            raise RuntimeError("the vision tower cannot take a flat photo")
        return real(self, pixel_values, *args, **kwargs)

    monkeypatch.setattr(modeling_clip.CLIPVisionEmbeddings, "forward", forward)
    Image.new("RGB", (32, 32), (255, 0, 0)).save(tmp_path / "red.png")
    out = tmp_path / "out"
    result = _run(llava_folder, out, "--answer", "a cat", photos=(tmp_path / "red.png", SAMPLES / "cat.png"))
    assert result.exit_code == 1, result.output
    reason = f"{tmp_path / 'red.png'}: the model failed on it (RuntimeError: the vision tower cannot take a flat photo)"
    assert _said(result)[0] == f"hookviz: failed: {reason}"
    run = json.loads((out / "run.json").read_text())
    assert [(e["output"], e["status"], e["error"]) for e in run["images"]] == [("red", "failed", reason), ("cat", "done", None)]
    assert run["error"] is None and not (out / "red").exists() and (out / "cat" / "report.json").exists()


def test_a_runs_closing_lines_are_a_photo_runs(llava_folder, tmp_path):
    """A photo that fails and one explained: the lines on stderr are those a run of another model
    gives for the same photos (the failed photo's line, the photos that failed named, how many were
    done and where), and so is the exit status."""
    from .cli_helpers import hookviz_run

    broken = tmp_path / "broken.png"
    broken.write_bytes((SAMPLES / "cat.png").read_bytes()[:200])
    photos = (broken, SAMPLES / "cat.png")
    vlm = _run(llava_folder, tmp_path / "out", "--answer", "a cat", photos=photos)
    photo = hookviz_run(list(photos), "--pictures", "none", layer="features.3", out=tmp_path / "out")
    assert vlm.exit_code == photo.exit_code == 1, (vlm.output, photo.output)
    lines = photo.stderr.strip().splitlines()
    assert (
        _said(vlm)
        == lines[-3:]
        == [
            next(line for line in lines if line.startswith(f"hookviz: failed: {broken}: image data is corrupt or truncated")),
            f"hookviz: 1 of 2 images failed: {broken}; reasons in {tmp_path / 'out' / 'run.json'}",
            f"hookviz: 1 of 2 images done, 1 failed; results in {tmp_path / 'out'}/",
        ]
    )


def test_a_photo_superpixels_cannot_cut_fails_saying_only_what_the_run_takes(llava_folder, tmp_path, monkeypatch):
    """Feature ablation over SLIC superpixels: a photo of fewer pixels than its 16 superpixels, and
    one SLIC finds a single superpixel in, each fail alone, in a line that names none of the
    options a vision-language model's run refuses (--superpixels, --superpixel-compactness); the
    tiny photo stopped the whole run, naming --superpixels."""
    import numpy as np
    from PIL import Image
    from skimage import segmentation

    real = segmentation.slic

    def slic(image, *args, **kwargs):  # SLIC finding one superpixel in a flat photo
        return (
            np.zeros(image.shape[:2], dtype=int)
            if float(np.ptp(image, axis=(0, 1)).max()) == 0.0
            else real(image, *args, **kwargs)
        )

    monkeypatch.setattr(segmentation, "slic", slic)
    Image.new("RGB", (3, 3), (0, 0, 255)).save(tmp_path / "tiny.png")
    Image.new("RGB", (32, 32), (255, 0, 0)).save(tmp_path / "red.png")
    out, photos = tmp_path / "out", (tmp_path / "tiny.png", tmp_path / "red.png", SAMPLES / "cat.png")
    result = _run(llava_folder, out, "--answer", "a cat", "--cam", "feature-ablation", photos=photos)
    assert result.exit_code == 1, result.output
    run = json.loads((out / "run.json").read_text())
    assert [(e["output"], e["status"]) for e in run["images"]] == [("tiny", "failed"), ("red", "failed"), ("cat", "done")]
    tiny, red = (e["error"] for e in run["images"][:2])
    assert tiny == (
        f"{tmp_path / 'tiny.png'}: --cam feature-ablation: this 3x3 input has fewer pixels than the 16 superpixels "
        "it is cut into; give a larger photo, or another --cam"
    )
    assert red == (
        f"{tmp_path / 'red.png'}: --cam feature-ablation: SLIC finds only one superpixel in this 32x32 input, so there "
        "is nothing to compare; give a larger photo, or another --cam"
    )
    assert f"hookviz: failed: {tiny}" in result.stderr.splitlines() and "--superpixel" not in result.stderr


@pytest.mark.parametrize("cuda", [False, True])
def test_device_cuda_is_refused_in_the_line_a_photo_run_gives(llava_folder, tmp_path, monkeypatch, cuda):
    """Without CUDA, the line of a run of another model; with it, the run's own (it computes on the CPU)."""
    import torch

    from .cli_helpers import TINY_NET

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    result = _run(llava_folder, tmp_path / "out", "--device", "cuda")
    assert result.exit_code == 2, result.output
    if cuda:
        line = "hookviz: error: --device cuda: a vision-language model's run computes on the CPU yet; drop it"
    else:
        photo_run = hookviz_run(SAMPLES / "cat.png", "--device", "cuda", model=TINY_NET, out=tmp_path / "photo")
        assert photo_run.exit_code == 2, photo_run.output
        line = "hookviz: error: --device cuda: no CUDA device is available here; use --device cpu"
        assert photo_run.stderr.strip().splitlines() == [line]
    assert result.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "filename", ["config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json"]
)
def test_a_folder_naming_its_own_code_is_refused_for_that_with_the_models_options_too(llava_folder, tmp_path, filename):
    """Remote code stays refused, in its own words: not as another model given --answer, whichever
    of the files transformers reads names it (a file the folder lacks is written with that alone)."""
    import shutil

    folder = tmp_path / "custom"
    shutil.copytree(llava_folder, folder)
    path = folder / filename
    document = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**document, "auto_map": {"AutoConfig": "configuration_x.MyConfig"}}))
    result = _run(folder, tmp_path / "out", "--answer", "a cat")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"hookviz: error: --model hf:{folder}: {folder} needs its own Python code (auto_map in {filename}), which "
        "hookviz never runs; load the model yourself and pass the module to hookviz.explain"
    ]


@pytest.mark.parametrize("error", ["full", "refused"])
def test_a_disk_error_is_told_as_a_photo_run_tells_it(llava_folder, tmp_path, monkeypatch, error):
    """A full disk stops the run in one line naming --out and the photo, saying what to do (it gave
    a bare 'OSError: [Errno 28]'); a photo's folder it may not write fails that photo, and the run
    goes on (it stopped the run)."""
    import errno
    import os

    import hookviz.store.vlm_files as vlm_files

    real = vlm_files.atomic_write

    def failing(path, data):
        if path.parent.name == "cat":
            code = errno.ENOSPC if error == "full" else errno.EACCES
            raise OSError(code, os.strerror(code), str(path))
        return real(path, data)

    monkeypatch.setattr(vlm_files, "atomic_write", failing)
    out = tmp_path / "out"
    result = _run(llava_folder, out, "--answer", "a cat", photos=(SAMPLES / "cat.png", SAMPLES / "coffee.png"))
    assert result.exit_code == 1, result.output
    run = json.loads((out / "run.json").read_text())
    if error == "full":
        line = (
            f"hookviz: error: --out {out}: no space left on the device ({SAMPLES / 'cat.png'} was not written); "
            "free some space, then rerun with --skip-existing to resume"
        )
        assert _said(result) == [line]
        assert [e["status"] for e in run["images"]] == ["not_done", "not_done"]
    else:
        reason = f"{SAMPLES / 'cat.png'}: writing results failed ([Errno 13] Permission denied: '{out / 'cat'}"
        assert _said(result)[0].startswith(f"hookviz: failed: {reason}")
        assert [e["status"] for e in run["images"]] == ["failed", "done"]
    no_partial_files(out)


def test_a_run_says_what_it_runs_and_each_photo_its_answer_and_the_tokens_explained(llava_folder, tmp_path):
    """As a photo run says its model, weights and layers first, then each photo's target and top-5
    (it said nothing first, then only the folder each photo was written to)."""
    out = tmp_path / "out"
    result = _run(llava_folder, out, "--answer", "a cat", "--words", "cat")
    assert result.exit_code == 0, result.output
    run, report = (json.loads((out / name).read_text()) for name in ("run.json", "cat/report.json"))
    (target,) = report["targets"]
    line = f"{SAMPLES / 'cat.png'}: answer {json.dumps(report['text'])}; explained: {json.dumps(target['label'])}"
    assert line in result.stdout.splitlines()
    first = (
        f"hookviz: model hf:{llava_folder}, weights {run['weights']}, on cpu in float32; the answer given explained by "
        f"gradcam; layers: {run['layers'][0]}"
    )
    assert result.stderr.splitlines()[0] == first
    quiet = _run(llava_folder, tmp_path / "quiet", "--answer", "a cat", "-q")
    assert quiet.exit_code == 0 and quiet.stdout == "" and quiet.stderr == "", quiet.output


def test_skip_existing_skips_the_photos_done_by_the_same_recipe_and_redoes_the_others(llava_folder, tmp_path):
    """A killed run resumed: a photo whose folder holds its result by the same recipe is skipped
    (its files untouched); one whose token picture is gone, whose photo changed, or whose report
    came from another prompt is explained again."""
    import shutil

    photos = [tmp_path / "cat.png", tmp_path / "coffee.png"]
    for photo in photos:
        shutil.copy(SAMPLES / photo.name, photo)
    out = tmp_path / "out"

    def run(prompt=PROMPT):
        args = ("--prompt", prompt, "--answer", "a cat", "--skip-existing")
        result = hookviz_run(photos, *args, model=f"hf:{llava_folder}", weights=None, out=out)
        assert result.exit_code == 0, result.output
        statuses = [e["status"] for e in json.loads((out / "run.json").read_text())["images"]]
        return statuses, result

    assert run()[0] == ["done", "done"]
    kept = (out / "cat" / "token0.png").stat().st_mtime_ns
    statuses, result = run()
    assert statuses == ["skipped", "skipped"] and "2 skipped" in _said(result)[-1]
    assert (out / "cat" / "token0.png").stat().st_mtime_ns == kept
    assert json.loads((out / "run.json").read_text())["layers"]  # the skipped photos' layers, as the run's
    (out / "coffee" / "token1.png").unlink()
    assert run()[0] == ["skipped", "done"]
    photos[0].write_bytes((SAMPLES / "coffee.png").read_bytes())  # another photo under the same name
    assert run()[0] == ["done", "skipped"]
    assert run("what is this ?")[0] == ["done", "done"]


def test_shards_explain_their_slice_each_into_one_folder_and_open_as_one_run(llava_folder, tmp_path):
    """--shard K/N as a run of another model takes it: the K-th round-robin slice of the photos,
    each in the folder the whole list gives it, its own run-K-of-N.json; the gallery and the
    explorer show every shard's photos."""
    from .explorer_helpers import explorer_rows

    photos = [tmp_path / name for name in ("a.png", "b.png", "c.png")]
    for photo, source in zip(photos, ("cat.png", "coffee.png", "cat.png")):
        photo.write_bytes((SAMPLES / source).read_bytes())
    out = tmp_path / "out"
    for shard in ("2/2", "1/2"):
        result = hookviz_run(
            photos, "--prompt", PROMPT, "--answer", "a cat", "--shard", shard, model=f"hf:{llava_folder}", weights=None, out=out
        )
        assert result.exit_code == 0, result.output
    runs = {name: json.loads((out / name).read_text()) for name in ("run-1-of-2.json", "run-2-of-2.json")}
    assert [e["output"] for e in runs["run-1-of-2.json"]["images"]] == ["a", "c"]
    assert [e["output"] for e in runs["run-2-of-2.json"]["images"]] == ["b"]
    assert [r["shard"] for r in runs.values()] == [[1, 2], [2, 2]] and not (out / "run.json").exists()
    assert sorted(row["name"] for row in explorer_rows(out)) == ["a", "b", "c"]


def test_another_photo_of_the_same_name_never_takes_an_earlier_runs_folder(llava_folder, tmp_path):
    """As in a photo run: a second run into the same --out with another cat.png (another folder)
    writes its own folder, and the first photo's results stay (they were overwritten)."""
    first, second = tmp_path / "a" / "cat.png", tmp_path / "b" / "cat.png"
    for photo, source in ((first, "cat.png"), (second, "coffee.png")):
        photo.parent.mkdir()
        photo.write_bytes((SAMPLES / source).read_bytes())
    out = tmp_path / "out"
    for photo in (first, second):
        result = _run(llava_folder, out, "--answer", "a cat", photos=(photo,))
        assert result.exit_code == 0, result.output
    folders = {json.loads(r.read_text())["image"]: r.parent.name for r in out.glob("*/report.json")}
    assert folders[str(first)] == "cat" and folders[str(second)] not in ("cat", None)
    again = _run(llava_folder, out, "--answer", "a cat", "--skip-existing", photos=(first, second))
    assert [e["status"] for e in json.loads((out / "run.json").read_text())["images"]] == ["skipped", "skipped"], again.output
