"""Every registered task, CAM method and picture kind, the built-in ones and the test plug-in's
(tests/extension_plugin.py), through every option that reaches into them: ``--faithfulness``,
``--sanity``, ``--topk``, ``--baseline``, ``--skip-existing`` and ``--smooth``. Each run works, with files
valid against the schemas, or is refused in one line; none ends in a traceback. This is the
check that finds an attribute a plug-in lacks before a user does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from PIL import Image

from .cli_helpers import hookviz_cli
from .conftest import SAMPLES
from .test_records import _validate_run_folder

#: One small model per task: (task, --model and what the task needs beside it).
MODELS = {
    "classify": ["--model", "tests.conftest:tiny_net", "--resize", "48"],
    "segment": ["--model", "tests.test_conformance:tiny_segmenter", "--resize", "48"],
    "detect": ["--model", "tests.test_conformance:tiny_detector", "--layer", "backbone.1", "--score-threshold", "0"],
    "embed": ["--model", "tests.conftest:tiny_net", "--resize", "48", "--target-image", str(SAMPLES / "coffee.png")],
    "regress": ["--model", "tests.extension_plugin:brightness_net", "--resize", "48"],
    # the methods that read a vision transformer's attention (refused on the others' CNNs), on a classifier
    "vit": ["--model", "tests.test_conformance:tiny_vit", "--resize", "64", "--crop", "64"],
}
OPTIONS = {
    "faithfulness": ["--faithfulness"],
    "sanity": ["--sanity"],
    "topk": ["--topk", "2"],
    "skip-existing": ["--skip-existing"],
    "baseline": ["--baseline", "{first}"],
    "smooth": ["--smooth", "vargrad", "--smooth-samples", "2"],
}


class TinySegmenter(nn.Module):
    """conv -> ReLU -> conv to 3 classes' logits per pixel, in torchvision's ``{"out": ...}``."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 6, 3, padding=1), nn.ReLU())
        self.classifier = nn.Conv2d(6, 3, 1)

    def forward(self, x):
        return {"out": self.classifier(self.backbone(x))}


def tiny_segmenter() -> nn.Module:
    torch.manual_seed(0)
    return TinySegmenter()


def tiny_vit() -> nn.Module:
    """timm's ViT-Tiny with two blocks at 64 pixels (a 4x4 grid of patches)."""
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, depth=2, num_classes=10)


def tiny_detector() -> nn.Module:
    """torchvision's Faster R-CNN around a two-convolution backbone, at 64 pixels: every
    method runs on it in seconds, where a real detector's Score-CAM takes minutes."""
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1))
    backbone.out_channels = 8
    anchors = AnchorGenerator(sizes=((16, 32),), aspect_ratios=((0.5, 1.0, 2.0),))
    pooler = MultiScaleRoIAlign(featmap_names=["0"], output_size=7, sampling_ratio=2)
    return FasterRCNN(
        backbone,
        num_classes=3,
        min_size=64,
        max_size=64,
        rpn_anchor_generator=anchors,
        box_roi_pool=pooler,
        box_detections_per_img=5,
    )


@pytest.fixture
def plugin(registries_restored):
    """The plug-in's method, task, presentation and picture kind, registered (again, where an earlier
    test's ``registries_restored`` took them away: a module imported once registers once)."""
    from hookviz.methods.base import METHODS
    from hookviz.render.kinds import KINDS
    from hookviz.render.presentation import PRESENTATIONS
    from hookviz.tasks import TASKS

    from . import extension_plugin, picture_plugin

    for registry, name, entry in (
        (METHODS, "peak", extension_plugin.peak),
        (TASKS, "regress", extension_plugin.Regress()),
        (PRESENTATIONS, "regress", extension_plugin.ValueShown()),
        (KINDS, "toy", picture_plugin.KIND),  # the module's own: render workers unpickle it by name
    ):
        if name not in registry:
            registry.add(name, entry)


#: Where the extensions under test come from: hookviz's own, and the plug-in's (other test
#: modules register methods that fail on purpose, in this process too).
OURS = ("hookviz.", "tests.extension_plugin", "tests.picture_plugin")


#: Methods made for one family of models, which refuse the others in one line (lrp: layers
#: zennit has rules for, attnlrp: torchvision's ViT, cam: a classifier with an nn.Linear head,
#: finer-cam: a classifier, whose classes it compares); tests/test_lrp.py, test_attnlrp.py,
#: test_methods_multilayer.py and test_methods_finer.py run them.
FAMILY_METHODS = ("lrp", "attnlrp", "cam", "finer-cam")
#: Methods that refuse one task's model in one line: DeepLIFT's rescale rule needs every
#: nonlinearity as a module, and a torchvision detector's heads call relu, sigmoid and softmax as
#: functions (tests/test_methods_captum.py runs the refusal).
REFUSED = {"detect": ("deeplift", "deeplift-shap")}

#: The methods that sample or slide, at settings that keep their code paths and cut their passes:
#: at their defaults the detector's 451x300 photo took 2072 occlusion passes and 1000 RISE masks,
#: and the detector's five detections 280 SS-CAM passes each, so the sweep took 672 s, not 194 s.
FEW_PASSES = {
    "ss-cam": ["--ss-samples", "2"],
    "is-cam": ["--is-samples", "2"],
    "rise": ["--rise-masks", "16"],
    "occlusion": ["--occlusion-window", "32", "--occlusion-stride", "32"],
}


def _methods(task: str) -> str:
    """Every method of ours and the plug-in's for ``task``'s model: the attention methods and
    two others for the ViT (it has no ``nn.ReLU`` to guide), the rest for the CNNs (the
    attention methods refuse a CNN in one line: tests/test_attention.py)."""
    from hookviz.methods import METHODS

    ours = [name for name in METHODS.names() if METHODS.get(name).function.__module__.startswith(OURS)]
    attention = [name for name in ours if METHODS.get(name).needs_attention]
    if task == "vit":
        return ",".join([*attention, "gradcam", "peak"])
    refused = (*attention, *FAMILY_METHODS, *REFUSED.get(task, ()))
    return ",".join(name for name in ours if name not in refused)


def _kinds() -> str:
    from hookviz.render.kinds import kinds

    groups = [kind.group for kind in kinds() if not kind.compares and kind.build.__module__.startswith(OURS)]
    return ",".join(dict.fromkeys(groups))


def _photo(task: str, folder: Path) -> Path:
    """The cat, at 96x64 for the detector (which takes photos at their own size, where the others
    resize them to 48 or 64 pixels): its pictures and input-sized masks then cost what the others' do."""
    if task != "detect":
        return SAMPLES / "cat.png"
    small = folder / "small" / "cat.png"
    small.parent.mkdir()
    Image.open(SAMPLES / "cat.png").convert("RGB").resize((96, 64)).save(small)
    return small


def _invoke(args: list[str]):
    result = hookviz_cli("run", *args)
    assert "Traceback" not in result.output, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result


def _works_or_is_refused_in_one_line(result, out) -> str:
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("hookviz: error: "), result.stderr
        return lines[0]
    assert result.exit_code == 0, result.output
    assert _validate_run_folder(out) >= 2
    return "works"


@pytest.mark.slow  # every method and picture kind, six runs: 15-90 s of CPU a task
@pytest.mark.parametrize("task", sorted(MODELS))
def test_every_task_method_and_picture_kind_works_or_is_refused_in_one_line_under_every_option(task, plugin, tmp_path):
    common = [str(_photo(task, tmp_path)), *MODELS[task], "--weights", "none"]
    common += ["--cam", _methods(task), "--pictures", _kinds()]
    common += [flag for name in _methods(task).split(",") for flag in FEW_PASSES.get(name, [])]
    assert "peak" in common[common.index("--cam") + 1].split(",") and "toy" in common[common.index("--pictures") + 1].split(",")
    first = tmp_path / "first"
    result = _invoke([*common, "--out", str(first)])
    assert _works_or_is_refused_in_one_line(result, first) == "works"
    report = json.loads((first / "cat" / "report.json").read_text(encoding="utf-8"))
    assert report["task"] == ("classify" if task == "vit" else task)
    outcomes = {}
    for name, extra in OPTIONS.items():
        out = first if name == "skip-existing" else tmp_path / name
        extra = [value.format(first=first) for value in extra]
        outcomes[name] = _works_or_is_refused_in_one_line(_invoke([*common, *extra, "--out", str(out)]), out)
    assert outcomes["skip-existing"] == outcomes["baseline"] == outcomes["smooth"] == "works", outcomes


def test_every_sample_kind_meets_the_interface_and_its_blank_sample_is_a_batch_of_one(registries_restored):
    """The built-in photo and the plug-in's photo+vector (tests/sample_plugin.py, run end to end by
    tests/test_samples.py) each have every member of ``SampleKind``."""
    from hookviz.inputs.images import Preprocessing
    from hookviz.samples import SAMPLE_KINDS, SampleKind, SampleKindBase, get_sample_kind

    from . import sample_plugin

    get_sample_kind("photo")
    if "photo+vector" not in SAMPLE_KINDS:  # an earlier test's registries_restored took it away
        SAMPLE_KINDS.add("photo+vector", sample_plugin.PhotoAndVector())
    members = {name for name in vars(SampleKind) if not name.startswith("_")} | set(SampleKind.__annotations__)
    assert {"find", "files", "load", "prepare", "blank", "identity", "match", "name", "main"} <= members
    for name in SAMPLE_KINDS:
        kind = SAMPLE_KINDS.get(name)
        assert kind.name == name and all(hasattr(kind, member) for member in members), name
        settings = kind.options_type() if kind.options_type is not None else None
        blank = kind.blank(Preprocessing(resize=32, size=32), settings)
        assert all(isinstance(t, torch.Tensor) and t.shape[0] == 1 for t in blank) and blank[0].shape[:2] == (1, 3)
        assert blank[0].shape[-2:] == (32, 32)
        if type(kind).find is SampleKindBase.find:  # its key file is a photo
            assert kind.files(SAMPLES / "cat.png")[0] == SAMPLES / "cat.png"
