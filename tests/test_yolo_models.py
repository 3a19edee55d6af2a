"""Ultralytics YOLO detectors (``yolo:``): built from configs with random weights, never downloaded."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

import hookviz
from hookviz.errors import UnknownModelError
from hookviz.models.loading import load_model

from .cli_helpers import hookviz_cli
from .conftest import SAMPLES
from .explorer_helpers import explorer_text

# Not importorskip: importing ultralytics replaces PIL.Image.open in the whole test process;
# hookviz imports it only inside quiet_ultralytics, which puts everything back.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None, reason="needs ultralytics (the yolo extra)")

LOW = 1e-4  # a random head's class scores are about 1e-5 to 2e-4 (ultralytics' bias prior)
CONFIG = "yolo:yolov8n.yaml"


def invoke(*args):
    return hookviz_cli(*args, catch_exceptions=False)


@pytest.fixture(scope="module")
def yolo():
    return load_model(CONFIG, weights="none")


@pytest.fixture(scope="module")
def photo():
    """160 x 192: enlarged to 533 x 640 and padded to 544 x 640, as ultralytics' predict letterboxes it:
    5 grey rows above it and 6 below."""
    return torchvision.transforms.functional.to_tensor(Image.open(SAMPLES / "cat.png").convert("RGB").resize((192, 160)))


def _anchor_gradcam(yolo, photo, layer: str, anchor: int, label: int) -> np.ndarray:
    """Grad-CAM of the class score at ``anchor`` in the raw prediction, by plain autograd, on
    the letterboxed photo."""
    seen = {}
    batch = yolo.module.transform([photo])[0].tensors
    handle = yolo.module.get_submodule(layer).register_forward_hook(lambda _m, _i, out: seen.update(a=out))
    try:
        raw = yolo.module.yolo(batch)[0]
    finally:
        handle.remove()
    (grads,) = torch.autograd.grad(raw[0, 4 + label, anchor], seen["a"])
    return np.maximum((grads.mean(dim=(2, 3), keepdim=True) * seen["a"]).sum(dim=1).detach().numpy(), 0)[0]


@pytest.mark.slow
def test_each_box_cam_is_the_gradcam_of_its_anchors_class_score(yolo, photo):
    assert yolo.module.transform([photo])[0].offsets == [(5, 0)]  # off-centre: the CAMs cover padding above it
    result = hookviz.explain(yolo, photo, score_threshold=LOW, max_detections=2)
    assert result.prediction.window.top == 5 / 544
    assert [layer.name for layer in result.layers] == list(yolo.module.neck_layers)
    assert "class score at its anchor before NMS" in result.prediction.objective
    yolo.module.score_thresh = LOW
    try:
        with torch.no_grad():
            found = yolo.module([photo])[0]
    finally:
        yolo.module.score_thresh = 0.25
    assert len(result.prediction.detections) == 2
    for j, detection in enumerate(result.prediction.detections):
        anchor, label, stride = int(found["anchors"][j]), int(found["labels"][j]), int(found["strides"][j])
        assert detection.score == pytest.approx(float(found["scores"][j]))
        assert f"detection {j + 1}: its score is read at anchor {anchor}, on the stride-{stride} map" in result.notes
        for layer in result.layers:
            ours = next(cam for target, cam in layer.topk_cams if target is detection)
            theirs = _anchor_gradcam(yolo, photo, layer.name, anchor, label)
            assert ours.shape == theirs.shape
            assert np.abs(ours - theirs).max() <= 1e-4 * max(np.abs(theirs).max(), 1e-12)
    wanted = int(found["labels"][1]) if len(set(found["labels"].tolist())) > 1 else int(found["labels"][0])
    only = hookviz.explain(yolo, photo, layers=[yolo.module.neck_layers[0]], target=wanted, score_threshold=LOW)
    assert only.prediction.detections and {d.index for d in only.prediction.detections} == {wanted}


@pytest.mark.parametrize("height, width", [(50, 64), (700, 1000)])
def test_a_photo_is_letterboxed_to_the_size_ultralytics_predict_gives(yolo, height, width):
    from hookviz.models.sources.yolo_models import quiet_ultralytics

    with quiet_ultralytics():
        from ultralytics.data.augment import LetterBox

        # ultralytics' predictor's own transform for one photo of a PyTorch model (rect, auto)
        theirs = LetterBox(640, auto=True, stride=32)(image=np.zeros((height, width, 3), np.uint8)).shape[:2]
    photo = torch.rand(3, height, width, generator=torch.Generator().manual_seed(0))
    result = hookviz.explain(yolo, photo, layers=["yolo.model.0"], score_threshold=LOW, max_detections=1)
    assert tuple(result.layers[0].input.shape[-2:]) == theirs  # a small photo is enlarged, as theirs is


def _smooth_photo(height: int, width: int, seed: int) -> np.ndarray:
    """An RGB uint8 photo of coarse random blobs (no row or column of it is all grey 114)."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (height // 8 + 2, width // 8 + 2, 3), dtype=np.uint8))
    return np.asarray(coarse.resize((width, height), Image.BILINEAR))


def _grey_lines(image: np.ndarray) -> tuple[list[int], list[int]]:
    """The rows and the columns of an H x W x 3 image in [0, 255] that are all padding grey."""
    grey = np.abs(image - 114).max(axis=2) < 1e-3
    return np.flatnonzero(grey.all(axis=1)).tolist(), np.flatnonzero(grey.all(axis=0)).tolist()


@pytest.mark.parametrize("shapes", [[(64, 112)], [(112, 64)], [(64, 112), (96, 80)]], ids=["wide", "tall", "batch"])
def test_photos_are_letterboxed_as_ultralytics_predictor_pads_them(yolo, shapes):
    from hookviz.models.sources.yolo_models import quiet_ultralytics

    photos = [_smooth_photo(*shape, seed=k) for k, shape in enumerate(shapes)]
    with quiet_ultralytics():
        from ultralytics.data.augment import LetterBox

        # the predictor's pre_transform: `auto` (least padding) only when the photos share a shape
        letterbox = LetterBox(640, auto=len(set(shapes)) == 1, stride=32)
        theirs = [letterbox(image=photo).astype(np.float32) for photo in photos]
    with torch.no_grad():
        batch, _ = yolo.module.transform([torch.from_numpy(photo.copy()).permute(2, 0, 1) / 255 for photo in photos])
    for k, their in enumerate(theirs):
        ours = batch.tensors[k].permute(1, 2, 0).numpy() * 255
        assert ours.shape == their.shape
        assert _grey_lines(ours) == _grey_lines(their)  # the padding lies where theirs does, to the pixel
        assert _grey_lines(their)[0] or _grey_lines(their)[1]
        assert np.abs(ours - their).max() < 2  # torch's bilinear in float against cv2's INTER_LINEAR in uint8


def _their_boxes(model, photos: list, conf: float) -> list[np.ndarray]:
    """ultralytics' own predictor on BGR photos, as cv2 reads them: per photo, rows of x0, y0, x1, y1, score, class."""
    from hookviz.models.sources.yolo_models import quiet_ultralytics

    with quiet_ultralytics():
        from ultralytics import YOLO

        theirs = YOLO(CONFIG.removeprefix("yolo:"))
        theirs.model.load_state_dict(model.state_dict())
        results = theirs.predict([photo[..., ::-1].copy() for photo in photos], conf=conf, device="cpu", verbose=False)
    return [r.boxes.data.numpy() for r in results]


def _sorted(rows: np.ndarray) -> np.ndarray:
    return rows[np.lexsort(rows.T[::-1])]


@pytest.mark.parametrize("shapes", [[(64, 112)], [(112, 64), (96, 80)]], ids=["wide", "batch"])
def test_boxes_are_those_ultralytics_predictor_gives(yolo, shapes):
    photos = [_smooth_photo(*shape, seed=k + 7) for k, shape in enumerate(shapes)]
    theirs = _their_boxes(yolo.module.yolo, photos, LOW)
    yolo.module.score_thresh = LOW
    try:
        with torch.no_grad():
            found = yolo.module([torch.from_numpy(photo.copy()).permute(2, 0, 1) / 255 for photo in photos])
    finally:
        yolo.module.score_thresh = 0.25
    for ours, their in zip(found, theirs):
        rows = torch.cat([ours["boxes"], ours["scores"][:, None], ours["labels"][:, None].float()], dim=1).numpy()
        assert len(rows) == len(their) > 0
        # within 1 px and 1e-6 in score: the letterboxed inputs differ by under 1/255 (see above)
        assert np.abs(_sorted(rows)[:, :4] - _sorted(their)[:, :4]).max() < 1
        assert np.abs(_sorted(rows)[:, 4] - _sorted(their)[:, 4]).max() < 1e-6
    alone = theirs[0] if len(photos) == 1 else _their_boxes(yolo.module.yolo, photos[:1], LOW)[0]
    result = hookviz.explain(yolo, photos[0], cam="none", score_threshold=LOW, max_detections=3)
    assert result.prediction.window.top > 0 or result.prediction.window.left > 0
    assert len(result.prediction.detections) == 3
    for detection in result.prediction.detections:  # what report.json says: one of theirs
        assert np.abs(alone[:, :4] - np.asarray(detection.box)).max(axis=1).min() < 1


@pytest.mark.slow
def test_a_run_draws_the_boxes_and_compares_with_a_baseline(tmp_path):
    import jsonschema

    from hookviz.models.sources.yolo_models import quiet_ultralytics
    from hookviz.store.records import schema_path

    common = [
        "--model",
        CONFIG,
        "--weights",
        "none",
        "--score-threshold",
        LOW,
        "--max-detections",
        2,
        "--pictures",
        "cam",
        SAMPLES / "cat.png",
    ]
    first = invoke("run", *common, "-o", tmp_path / "a")
    assert first.exit_code == 0, first.output
    report = json.loads((tmp_path / "a" / "cat" / "report.json").read_text())
    assert len(report["prediction"]["detections"]) == 2
    with quiet_ultralytics():
        from ultralytics.data.augment import LetterBox

        placed = LetterBox(640, auto=True, stride=32).get_params({"img": np.zeros((300, 451, 3), np.uint8)})
    (w, h), top, left = placed["new_unpad"], placed["top"], placed["left"]
    height, width = h + top + placed["bottom"], w + left + placed["right"]
    assert top > 0  # cat.png (451 x 300) is centred between grey rows
    assert report["prediction"]["window"] == pytest.approx([h / height, w / width])
    assert report["prediction"]["window_origin"] == pytest.approx([top / height, left / width])
    schema = json.loads(schema_path("report").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(report)
    assert "before NMS" in report["prediction"]["objective"]
    assert "neck outputs" in first.output
    assert (tmp_path / "a" / "cat" / "prediction.png").is_file()
    assert (tmp_path / "a" / "cat" / "yolo.model.15.cam.png").is_file()
    assert "detections with score" in explorer_text(tmp_path / "a")
    second = invoke("run", *common, "-o", tmp_path / "b", "--baseline", tmp_path / "a")
    assert second.exit_code == 0, second.output
    assert (tmp_path / "b" / "diff.json").is_file()


def test_a_checkpoint_is_refused_unless_trusted(tmp_path):
    path = tmp_path / "best.pt"
    path.write_bytes(b"not read")
    result = invoke("run", "--model", f"yolo:{path}", SAMPLES / "cat.png", "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert "runs code when loaded" in result.output and "--trust-checkpoint" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    listed = invoke("layers", "--model", f"yolo:{path}")
    assert listed.exit_code == 2 and "--trust-checkpoint" in listed.output


#: What a file that torch.load read as trusted, and that was no YOLO checkpoint, is called.
TRUSTED = "loaded as trusted (--trust-checkpoint: any code in it has run), but"


def test_a_missing_checkpoint_is_said_missing_before_trust_is_asked(tmp_path):
    """It asked for --trust-checkpoint first, and only with it said the file does not exist."""
    (tmp_path / "folder.pt").mkdir()
    for missing in (tmp_path / "nowhere" / "best.pt", tmp_path / "folder.pt"):
        result = invoke("run", "--model", f"yolo:{missing}", SAMPLES / "cat.png", "-o", tmp_path / "out")
        assert result.exit_code == 2
        assert result.output == (
            f"hookviz: error: --model yolo:{missing}: no such file '{missing}'; check the path to the .pt file\n"
        )


class _Runs:
    """A raw pickle (no torch.save zip) that runs code when unpickled: it creates ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.mark.parametrize("saved", ["code", "a dict"])
def test_a_trusted_file_that_is_no_yolo_checkpoint_says_it_was_loaded(tmp_path, saved):
    """It was "cannot read it as a YOLO checkpoint", though its code had run: it was read."""
    import pickle

    path, marker = tmp_path / "raw.pt", tmp_path / "ran"
    if saved == "code":
        path.write_bytes(pickle.dumps(_Runs(marker)))
    else:
        torch.save({"weights": torch.zeros(2)}, path)
    result = invoke("run", "--model", f"yolo:{path}", "--trust-checkpoint", SAMPLES / "cat.png", "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert marker.exists() == (saved == "code")
    said = "(RuntimeError: Invalid magic number; corrupt file?)" if saved == "code" else "(no model in it, a dict)"
    assert result.output.startswith(f"hookviz: error: --model yolo:{path}: {TRUSTED} it is not a YOLO checkpoint {said}")
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_trusted_checkpoint_loads_and_one_of_another_task_is_refused(tmp_path, yolo, photo):
    from hookviz.models.sources.yolo_models import quiet_ultralytics

    with quiet_ultralytics():
        from ultralytics.nn.tasks import SegmentationModel

        segmenter = SegmentationModel("yolov8n-seg.yaml", verbose=False)
    torch.save({"model": yolo.module.yolo}, tmp_path / "det.pt")
    loaded = load_model(f"yolo:{tmp_path / 'det.pt'}", trust_checkpoint=True)
    with torch.no_grad():
        assert torch.equal(loaded.module.yolo(photo[None])[0], yolo.module.yolo(photo[None])[0])
    torch.save({"model": segmenter}, tmp_path / "seg.pt")
    result = invoke(
        "run", "--model", f"yolo:{tmp_path / 'seg.pt'}", "--trust-checkpoint", SAMPLES / "cat.png", "-o", tmp_path / "out"
    )
    assert result.exit_code == 2 and "a YOLO segment model" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("saved", ["alone", "in a dict"])
def test_hookviz_layers_lists_a_checkpoints_layers(tmp_path, yolo, saved):
    # before: "--weights none: best.pt carries its own weights; drop --weights", though none was
    # given (it is what `layers` loads by default); and torch.save(YOLO(...).model), a model
    # saved alone, was "not an ultralytics checkpoint (no model in it)"
    torch.save(yolo.module.yolo if saved == "alone" else {"model": yolo.module.yolo}, tmp_path / "best.pt")
    listed = invoke("layers", "--model", f"yolo:{tmp_path / 'best.pt'}", "--trust-checkpoint", "--filter", "yolo.model.21")
    assert listed.exit_code == 0, listed.output
    assert "yolo.model.21" in listed.output


def raw_detection_model():
    """Factory used as ``--model tests.test_yolo_models:raw_detection_model``: ultralytics' own module."""
    from hookviz.models.sources.yolo_models import quiet_ultralytics

    with quiet_ultralytics():
        from ultralytics.nn.tasks import DetectionModel

        return DetectionModel("yolov8n.yaml", verbose=False)


@pytest.mark.parametrize("task", [[], ["--task", "detect"]], ids=["auto", "detect"])
def test_an_ultralytics_module_from_a_factory_is_sent_to_the_yolo_source(tmp_path, task):
    # before: "pass --task detect", and with it every photo failed on conv2d(list, ...)
    args = ["--model", "tests.test_yolo_models:raw_detection_model", "--weights", "none", *task]
    result = invoke("run", *args, SAMPLES / "cat.png", "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert result.output == (
        "hookviz: error: --model tests.test_yolo_models:raw_detection_model: an ultralytics DetectionModel, which "
        "hookviz explains only through --model yolo:PATH.pt (torch.save it) or --model yolo:CONFIG.yaml\n"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "spec, trust, said",
    [
        ("yolov8n", False, "neither a config (.yaml) nor a checkpoint (.pt); try yolo:yolov8n.yaml (random weights)"),
        ("TEXT", True, f"{TRUSTED} it is not a YOLO checkpoint (UnpicklingError: "),
        ("EMPTY", True, f"{TRUSTED} it is not a YOLO checkpoint (EOFError: Ran out of input); give a .pt file ultralytics"),
        ("BAD", False, "ultralytics cannot build it (KeyError: 'Foo'); compare it with a config ultralytics ships"),
    ],
    ids=["no-suffix", "text-as-pt", "empty-pt", "bad-config"],
)
def test_what_is_not_a_yolo_model_is_refused_with_what_to_give(tmp_path, spec, trust, said):
    # before: ultralytics' "acceptable suffix is ('.yaml', '.yml'), not .yolov8n", and errors that said no remedy
    files = {
        "TEXT": ("text.pt", "hello\n"),
        "EMPTY": ("empty.pt", ""),
        "BAD": ("bad.yaml", "nc: 80\nbackbone: [[-1, 1, Foo, [64]]]\nhead: []\n"),
    }
    if spec in files:
        name, text = files[spec]
        (tmp_path / name).write_text(text)
        spec = str(tmp_path / name)
    trusted = ["--trust-checkpoint"] if trust else ["--weights", "none"]
    result = invoke("run", "--model", f"yolo:{spec}", *trusted, SAMPLES / "cat.png", "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert result.output.startswith(f"hookviz: error: --model yolo:{spec}: {said}")
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("config", ["yolov8n-seg.yaml", "yolov8n-cls.yaml", "rtdetr-l.yaml"])  # rtdetr: an AttributeError before
def test_segmentation_and_classification_configs_are_refused_in_one_line(tmp_path, config):
    result = invoke("run", "--model", f"yolo:{config}", "--weights", "none", SAMPLES / "cat.png", "-o", tmp_path)
    assert result.exit_code == 2
    assert "hookviz explains YOLO detection models" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("config, head", [("yolov8n-world.yaml", "WorldDetect"), ("yoloe-v8s.yaml", "YOLOEDetect")])
def test_an_open_vocabulary_config_is_refused_naming_what_hookviz_explains(tmp_path, config, head):
    # before: "ultralytics cannot build it (TypeError: ...); compare it with a config ultralytics ships", which it is
    result = invoke("run", "--model", f"yolo:{config}", "--weights", "none", SAMPLES / "cat.png", "-o", tmp_path / "out")
    assert result.exit_code == 2
    assert result.output == (
        f"hookviz: error: --model yolo:{config}: a model whose head is {head}, not a YOLO Detect head; hookviz "
        "explains plain YOLO detection models, such as yolo:yolov8n.yaml or yolo:yolo11n.yaml (`hookviz models` "
        "lists them), or a detect checkpoint\n"
    )
    assert not (tmp_path / "out").exists()


def test_without_ultralytics_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ultralytics", None)
    with pytest.raises(UnknownModelError) as error:
        load_model(CONFIG, weights="none")
    assert (
        str(error.value)
        == "model='yolo:yolov8n.yaml' needs ultralytics, an optional extra (AGPL-3.0): pip install 'hookviz[yolo]'"
    )


@pytest.mark.slow
def test_loading_leaves_the_process_and_the_users_config_as_they_were(tmp_path):
    """In a fresh process (ultralytics' import is what changes things): the environment, print
    options, warning filters are the caller's again, nothing is written in the config folder,
    and ultralytics printed nothing."""
    script = """
import os, warnings, numpy as np, torch, PIL.Image
state = lambda: (dict(os.environ), np.get_printoptions(), str(torch._tensor_str.PRINT_OPTS.__dict__), len(warnings.filters),
                 PIL.Image.open, torch.save, torch.load)
before = state()
from hookviz.models.loading import load_model
load_model("yolo:yolov8n.yaml", weights="none")
after = state()
assert before == after, [a == b for a, b in zip(before, after)]
"""
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""
    assert list(home.iterdir()) == []
