"""Detection models: one CAM per detection, equal to pytorch-grad-cam's, and the run around it."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

import hookviz

from .cli_helpers import hookviz_cli, hookviz_run
from .conftest import SAMPLES

DETECTOR = "fasterrcnn_mobilenet_v3_large_320_fpn"
LOW = ["--score-threshold", "0.01", "--max-detections", "3"]  # random weights score about 1/91


def detector() -> torch.nn.Module:
    """Factory for ``--model tests.test_detect:detector``: torchvision's detector, random weights."""
    torch.manual_seed(0)
    return torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)


@pytest.fixture(scope="module")
def model():
    return detector().eval()


@pytest.fixture(scope="module")
def photo_tensor():
    return torchvision.transforms.functional.to_tensor(Image.open(SAMPLES / "cat.png").convert("RGB"))


@pytest.fixture(scope="module")
def small_photo():
    return torchvision.transforms.functional.to_tensor(Image.open(SAMPLES / "cat.png").convert("RGB").resize((200, 160)))


def _forward(model, photo):
    """The model's output for ``photo`` and the output of ``backbone.body.16`` on the way."""
    seen = {}
    handle = model.backbone.body.get_submodule("16").register_forward_hook(lambda _m, _i, out: seen.update(a=out))
    try:
        return model([photo])[0], seen["a"]
    finally:
        handle.remove()


def _gradcam(activations, objective) -> np.ndarray:
    (grads,) = torch.autograd.grad(objective, activations, retain_graph=True)
    return np.maximum((grads.mean(dim=(2, 3), keepdim=True) * activations).sum(dim=1).detach().numpy(), 0)[0]


def _pytorch_grad_cams(model, photo, targets) -> list[np.ndarray]:
    from pytorch_grad_cam import GradCAM

    maps = []
    with GradCAM(model=model, target_layers=[model.backbone.body.get_submodule("16")]) as cam:
        for target in targets:
            cam(input_tensor=photo[None], targets=[target])
            activations = cam.activations_and_grads.activations[0].numpy()
            gradients = cam.activations_and_grads.gradients[0].numpy()
            maps.append(np.maximum((gradients.mean(axis=(2, 3), keepdims=True) * activations).sum(axis=1), 0)[0])
    return maps


@contextlib.contextmanager
def _score_thresh(model, value: float):
    old = model.roi_heads.score_thresh
    model.roi_heads.score_thresh = value  # so that a pass of the reference sees the same low-scoring boxes
    try:
        yield
    finally:
        model.roi_heads.score_thresh = old


def _close(ours, theirs) -> bool:
    return ours.shape == theirs.shape and theirs.max() > 0 and np.abs(ours - theirs).max() / np.abs(theirs).max() < 1e-3


@pytest.mark.slow
def test_score_iou_cams_equal_pytorch_grad_cams_box_score_target_and_score_cams_the_scores_gradient(model, small_photo):
    from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget

    common = dict(layers=["backbone.body.16"], score_threshold=0.01, max_detections=2)
    iou = hookviz.explain(model, small_photo, box_objective="score+iou", **common)
    assert iou.task == "detect" and len(iou.prediction.detections) == 2
    assert model.roi_heads.score_thresh == 0.05  # lowered for the pass only
    assert [target for target, _ in iou.layers[0].topk_cams] == list(iou.prediction.detections)
    targets = [FasterRCNNBoxScoreTarget([d.index], [np.array(d.box)]) for d in iou.prediction.detections]
    nudged = [FasterRCNNBoxScoreTarget([d.index], [np.array(d.box) + 0.5]) for d in iou.prediction.detections]
    with _score_thresh(model, 0.001):
        theirs = _pytorch_grad_cams(model, small_photo, targets + nudged)
        output, activations = _forward(model, small_photo)
        by_hand = [_gradcam(activations, output["scores"][k]) for k in range(2)]
    for (_, ours), reference in zip(iou.layers[0].topk_cams, theirs):
        assert _close(ours, reference)
    score = hookviz.explain(model, small_photo, **common)
    for (_, ours), reference in zip(score.layers[0].topk_cams, by_hand):
        assert _close(ours, reference)
    # Why the two objectives give the same CAMs here: given the detection's own box, the IoU is 1
    # and has no gradient. Half a pixel off, as a box rounded to whole pixels is, it has one, and
    # it outweighs the score's.
    for reference, off in zip(theirs, theirs[2:]):
        assert np.corrcoef(reference.ravel(), off.ravel())[0, 1] < 0.9
    assert iou.logits == pytest.approx(score.logits + 1, abs=1e-6)


def test_score_iou_is_pytorch_grad_cams_target_where_the_boxes_move(model, small_photo):
    """Boxes cut to whole pixels, as pytorch-grad-cam's tutorial passes them: the IoU then has a
    gradient, and ``score+iou`` must match the target's value and gradient, ``score`` not."""
    from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget

    from hookviz.tasks.detect import box_objective

    with _score_thresh(model, 0.001):
        output, activations = _forward(model, small_photo)
    matched = []
    for k in range(4):
        box, label = output["boxes"][k].detach().floor(), int(output["labels"][k])
        theirs = FasterRCNNBoxScoreTarget([label], [box.numpy()])(output)[0]
        ours = box_objective(output, box, label, "score+iou")
        assert float(ours.detach()) == pytest.approx(float(theirs.detach()), abs=1e-6)
        matched += [(box, label, ours, theirs)] if float(theirs.detach()) > 0 else []
        other = next(c for c in range(1, 91) if c not in output["labels"][: k + 1])
        unmatched = box_objective(output, box, other, "score+iou"), FasterRCNNBoxScoreTarget([other], [box.numpy()])(output)
        assert [float(v.detach().sum()) for v in unmatched] == [0, 0]
    assert len(matched) >= 2
    box, label, ours, theirs = matched[0]
    reference = _gradcam(activations, theirs)
    assert _close(_gradcam(activations, ours), reference)
    alone = _gradcam(activations, box_objective(output, box, label, "score"))
    assert np.corrcoef(alone.ravel(), reference.ravel())[0, 1] < 0.9


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_an_image_without_detections_is_done_and_says_so(tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", model="tests.test_detect:detector", out=out)
    assert result.exit_code == 0, result.output
    assert "no detections to explain" in result.stdout
    assert "no detections with a score of at least 0.5; lower --score-threshold to explain weaker boxes" in result.stderr
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["task"] == "detect" and report["prediction"]["detections"] == [] and report["target"] is None
    assert "prediction.png" in report["files"] and "backbone.body.16.summary.png" in report["files"]
    assert report["layer_choice"].startswith("backbone.body.16") and "backbone's last feature map" in report["layer_choice"]


@pytest.mark.slow
def test_a_detection_run_batches_photos_of_one_size_and_explains_each_detection(tmp_path, model, photo_tensor):
    folder = tmp_path / "in"
    folder.mkdir()
    photo = Image.open(SAMPLES / "cat.png").convert("RGB")
    for i in range(3):
        photo.save(folder / f"same{i}.png")
    photo.resize((200, 150)).save(folder / "small.png")
    out = tmp_path / "out"
    result = hookviz_run(folder, *LOW, "--save-tensors", "--batch-size", "4", model=DETECTOR, out=out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "same1" / "report.json").read_text())
    assert len(report["prediction"]["detections"]) == 3 and report["preprocessing"]["mode"] == "original"
    assert report["layers"][0]["pictures"]["cam"] == "backbone.body.16.cam.png"
    alone = hookviz.explain(model, photo_tensor, layers=["backbone.body.16"], score_threshold=0.01, max_detections=3)
    batched = np.load(out / "same1" / "tensors.npz")
    np.testing.assert_allclose(batched["backbone.body.16/cam"], alone.layers[0].cam, rtol=1e-4, atol=1e-12)
    small = json.loads((out / "small" / "report.json").read_text())["prediction"]
    assert small["window"] is not None and small["window_origin"] == [0, 0]  # torchvision pads right and below


@pytest.mark.slow
def test_a_target_class_keeps_only_its_detections(model, photo_tensor):
    names = torchvision.models.get_model_weights(DETECTOR).DEFAULT.meta["categories"]
    common = dict(layers=["backbone.body.16"], score_threshold=0.005, max_detections=20, categories=names)
    every = hookviz.explain(model, photo_tensor, **common)
    seen = every.prediction.detections[0].index  # random weights: one class scores highest everywhere
    only = hookviz.explain(model, photo_tensor, target=names[seen], **common)
    assert only.prediction.detections and all(d.index == seen for d in only.prediction.detections)
    other = next(i for i, name in enumerate(names) if i != seen and name not in ("__background__", "N/A"))
    none = hookviz.explain(model, photo_tensor, target=names[other], **common)
    assert none.prediction.detections == () and none.target is None
    assert none.notes == (
        f"no detections of class {names[other]} with a score of at least 0.005; lower score_threshold to explain weaker boxes",
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--score-threshold", "2"], "--score-threshold 2.0: a score threshold is between 0 and 1"),
        (["--crop", "224"], "--crop: a detector resizes and normalises photos itself"),
        (["--target", "unicorn"], "--target unicorn: not a class name of this model"),
        (["--topk", "3"], "--topk 3: a detector gets one CAM per detection; use --max-detections"),
        (["--layer", "backbone"], "--layer backbone: backbone returns 3 feature maps"),
        (["--box-objective", "iou"], "--box-objective iou: choose score or score+iou"),
    ],
)
def test_detection_usage_errors_are_one_line(tmp_path, args, message):
    result = hookviz_run(SAMPLES / "cat.png", *args, model=DETECTOR, out=tmp_path / "out")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_the_box_objective_is_recorded_in_the_report(tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", *LOW, "--box-objective", "score+iou", "--pictures", "none", model=DETECTOR, out=out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert report["objective"] == "score+iou" and report["asked"]["target"]["box_objective"] == "score+iou"
    assert report["prediction"]["objective"].startswith("pytorch-grad-cam's FasterRCNNBoxScoreTarget: the IoU")


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_a_factory_model_is_recognised_from_its_output(tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", *LOW, "--pictures", "none", model="tests.test_detect:detector", out=out)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "cat" / "report.json").read_text())["task"] == "detect"
    result = hookviz_run(
        SAMPLES / "cat.png",
        "--task",
        "classify",
        model="tests.test_detect:detector",
        layer="backbone.body.16",
        out=tmp_path / "b",
    )
    assert result.exit_code == 2 and "not (batch, classes) logits" in result.stderr


@pytest.fixture
def constant_init(monkeypatch):
    """torch.nn.init's random fills replaced by a constant: a listing shows paths, types, shapes
    and parameter counts, none of which depend on the values, and drawing a detector's random
    weights costs more than half of its listing's CPU."""

    def fill(tensor, *args, **kwargs):
        with torch.no_grad():
            return tensor.fill_(0.01)

    for name in ("kaiming_uniform_", "kaiming_normal_", "normal_", "uniform_", "xavier_uniform_", "trunc_normal_"):
        monkeypatch.setattr(torch.nn.init, name, fill)


@pytest.mark.slow
def test_models_lists_every_task_and_layers_works_for_each(tmp_path, constant_init):
    listing = hookviz_cli("models").stdout.splitlines()
    heading = {line.split(":")[0]: i for i, line in enumerate(listing) if line.startswith("#")}
    assert list(heading).index("# torchvision segmentation") > list(heading).index("# factory")  # grouped by task
    segmentation = listing[heading["# torchvision segmentation"] + 1 : heading["# torchvision detection"]]
    after = [i for i in heading.values() if i > heading["# torchvision detection"]]  # ultralytics' group follows
    detection = listing[heading["# torchvision detection"] + 1 : min(after, default=len(listing))]
    assert len(segmentation) == 6 and len(detection) == 12
    for name in segmentation + detection:
        result = hookviz_cli("layers", "--model", name, "--crop", "64")
        assert result.exit_code == 0, (name, result.output)
        assert "backbone" in result.stdout


@pytest.mark.slow
def test_default_weights_come_from_the_hub_cache_with_coco_names(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    entry = torchvision.models.get_model_weights(DETECTOR).DEFAULT
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    state = detector().state_dict()
    torch.save(state, cache / entry.url.rsplit("/", 1)[1])
    loaded = hookviz.load_model(DETECTOR, "DEFAULT")
    assert loaded.task == "detect" and loaded.categories[1] == "person" and loaded.preprocessing.mode == "original"
    assert torch.equal(loaded.module.roi_heads.box_predictor.cls_score.weight, state["roi_heads.box_predictor.cls_score.weight"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["retinanet_resnet50_fpn", "fcos_resnet50_fpn", "ssdlite320_mobilenet_v3_large"])
def test_detectors_without_roi_heads_explain_each_detection_and_keep_their_cut(name, photo_tensor):
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, weights_backbone=None).eval()
    cut = model.score_thresh
    result = hookviz.explain(model, photo_tensor, score_threshold=0.01, max_detections=2)
    assert model.score_thresh == cut  # lowered for the pass only
    assert len(result.prediction.detections) == 2 and len(result.layers[0].topk_cams) == 2
    assert all(np.isfinite(cam).all() for _, cam in result.layers[0].topk_cams)


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_a_detectors_tensors_hold_every_detections_cam_and_say_what_the_gradients_are(tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", *LOW, "--save-tensors", model=DETECTOR, out=out)
    assert result.exit_code == 0, result.output
    arrays = np.load(out / "cat" / "tensors.npz")
    assert {"backbone.body.16/cam", "backbone.body.16/cam_1", "backbone.body.16/cam_2", "backbone.body.16/cam_3"} <= set(
        arrays.files
    )
    np.testing.assert_array_equal(arrays["backbone.body.16/cam"], arrays["backbone.body.16/cam_1"])
    assert json.loads((out / "cat" / "report.json").read_text())["objective"] == "score"


def test_a_per_proposal_layer_and_a_layer_without_a_tensor_are_refused(tmp_path):
    for layer, message in (
        ("roi_heads.box_head", "rows for 1 photo (proposals or windows, not photos)"),
        ("transform", "holds no floating-point tensor"),
    ):
        result = hookviz_run(SAMPLES / "cat.png", *LOW, model=DETECTOR, layer=layer, out=tmp_path / layer)
        assert result.exit_code == 2 and message in result.stderr, result.output


def test_a_glob_over_the_pyramid_skips_what_returns_several_maps(tmp_path):
    out = tmp_path / "out"
    result = hookviz_run(SAMPLES / "cat.png", "--pictures", "none", model=DETECTOR, layer="backbone.fpn*", out=out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "cat" / "report.json").read_text())
    assert "backbone.fpn" in report["skipped_layers"] and "backbone.fpn.layer_blocks.0.0" in [l["name"] for l in report["layers"]]


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_a_task_the_model_does_not_do_is_refused_and_no_detection_is_no_zero_grad(tmp_path):
    result = hookviz_run(SAMPLES / "cat.png", "--task", "detect", model="lraspp_mobilenet_v3_large", out=tmp_path / "a")
    assert result.exit_code == 2 and "--task detect: lraspp_mobilenet_v3_large is a segmentation model" in result.stderr
    result = hookviz_run(
        SAMPLES / "cat.png",
        "--fail-on",
        "zero-grad",
        "--target",
        "person",
        "--score-threshold",
        "0.01",
        model=DETECTOR,
        out=tmp_path / "b",
    )
    assert result.exit_code == 0, result.output  # nothing to explain: no gradient is due
    from hookviz import explain
    from hookviz.render.prediction import prediction_figure

    names = torchvision.models.get_model_weights(DETECTOR).DEFAULT.meta["categories"]
    nothing = explain(detector().eval(), SAMPLES / "cat.png", target="person", score_threshold=0.01, categories=names)
    figure = prediction_figure(nothing)
    assert "no detections of class person with score ≥ 0.01" in figure._suptitle.get_text()


def _drawn_labels(detections, score_threshold: float) -> tuple:
    """Draw the prediction picture of ``detections`` on a 300x450 photo; return the picture's
    extent and each label's text and extent, in display pixels."""
    from types import SimpleNamespace

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hookviz.render.presentations.detect import DetectPresentation

    explanation = SimpleNamespace(
        prediction=SimpleNamespace(detections=tuple(detections), of_class=None, score_threshold=score_threshold),
        image=SimpleNamespace(shown=np.zeros((300, 450, 3))),
    )
    figure, ax = plt.subplots(figsize=(5, 4))
    try:
        ax.imshow(explanation.image.shown)
        DetectPresentation().draw_prediction(ax, explanation)
        figure.canvas.draw()
        return ax.get_window_extent(), [text.get_text() for text in ax.texts], [t.get_window_extent() for t in ax.texts]
    finally:
        plt.close(figure)


def _overlapping(extents) -> bool:
    return any(a.overlaps(b) for i, a in enumerate(extents) for b in extents[i + 1 :])


def test_labels_of_boxes_that_share_a_corner_do_not_cover_each_other():
    """Detections often share a corner (a YOLO's boxes at one anchor, a box and its part):
    each label must stay readable in the prediction picture."""
    from hookviz.tasks.base import Detection

    boxes = [(0.0, 0.0, 180.0, 172.0), (0.0, 0.0, 248.0, 172.0), (0.0, 0.0, 90.0, 172.0), (300, 100, 400, 200)]
    _, texts, extents = _drawn_labels([Detection(box, 0, None, 0.00015) for box in boxes], 0.0001)
    assert texts == [f"{k}. 0 0.00015" for k in range(1, 5)]
    assert not _overlapping(extents), extents


def test_labels_of_many_boxes_sharing_corners_stay_inside_the_picture():
    """Twenty boxes sharing two corners near the top (random weights at --score-threshold 0
    give such piles): the labels stacked up out of the picture, over the title and off the
    figure; each must stay inside the picture, clear of the others."""
    from hookviz.tasks.base import Detection

    left = [(60.0, 35.0, 60.0 + 8 * k, 35.0 + 10 * k) for k in range(3, 13)]
    right = [(300.0 - 8 * k, 35.0, 449.0, 250.0 - 5 * k) for k in range(10)]
    detections = [Detection(box, 17, "a long-named class", 0.5) for box in left + right]
    picture, _, extents = _drawn_labels(detections, 0.0)
    assert len(extents) == 20
    outside = [
        e for e in extents if e.x0 < picture.x0 - 1 or e.x1 > picture.x1 + 1 or e.y0 < picture.y0 - 1 or e.y1 > picture.y1 + 1
    ]
    assert not outside, (picture, outside)
    assert not _overlapping(extents), extents
