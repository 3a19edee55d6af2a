"""``hookviz atlas``'s concept options through the command line, each held to an independent
computation: ``--relevance`` (gradient x activation by plain autograd; LRP by zennit-crp's own
CondAttribution and reference sampling, its "RelMax"), ``--label-with`` (CLIP-Dissect's
SoftWPMI written out by hand over a seeded random open_clip model built from a config) and
``--visualize`` (the saved input re-measured by a plain forward hook); and their refusals."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.cli_helpers import TINY_NET, hookviz_cli
from tests.test_atlas_brute import _photos, _torchvision_input, _valid

LAYER = "features.3"


def _atlas(data: Path, out: Path, *args: object):
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYER, "--top", 3,
                         "--batch-size", 4, "--out", out, "--quiet", *args)  # fmt: skip
    assert result.exit_code == 0, result.output
    return _valid(json.loads((out / "atlas.json").read_text()))


def _inputs(data: Path) -> tuple[list[Path], torch.Tensor]:
    paths = sorted(data.rglob("*.png"))
    return paths, torch.stack([_torchvision_input(path) for path in paths])


def _assert_ranked(items: list[dict], paths: list[Path], contributions: np.ndarray, peaks: np.ndarray, grid) -> None:
    """Each channel's ``relevance_top``: the samples of the 3 largest contributions, their sums and most relevant units."""
    for channel, item in enumerate(items):
        order = np.argsort(-contributions[:, channel], kind="stable")[:3]
        assert [e["source"] for e in item["relevance_top"]] == [str(paths[i]) for i in order]
        assert [e["score"] for e in item["relevance_top"]] == pytest.approx(contributions[order, channel], rel=1e-4, abs=1e-6)
        positions = [list(np.unravel_index(int(peaks[i, channel]), grid)) for i in order]
        assert [e["position"] for e in item["relevance_top"]] == positions


@pytest.mark.slow
def test_relevance_ranks_by_gradient_x_activation_summed_over_positions_as_plain_autograd(tmp_path):
    from tests.conftest import tiny_net

    data = _photos(tmp_path / "photos", per_class=3)
    document = _atlas(data, tmp_path / "atlas", "--relevance", "predicted")
    paths, inputs = _inputs(data)
    model = tiny_net().eval()
    kept = []
    handle = model.features[3].register_forward_hook(lambda _m, _a, out: kept.append(out) or out.retain_grad())
    logits = model(inputs)
    handle.remove()
    logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
    relevance = (kept[0] * kept[0].grad).detach().flatten(2)  # A * dy/dA, per position
    layer = document["layers"][0]
    _assert_ranked(layer["items"], paths, relevance.sum(2).numpy(), relevance.argmax(2).numpy(), layer["grid"])
    assert document["relevance"] == "predicted" and document["relevance_rule"] == "gradient-x-activation"
    first = layer["items"][0]
    assert first["relevance_top"][0]["crop"] == "crops/features.3/0/relevance/0.png"
    assert (tmp_path / "atlas" / first["relevance_top"][0]["overlay"]).is_file()
    page = (tmp_path / "atlas" / first["page"]).read_text()
    assert "Fires most" in page and "Matters most" in page and "relevance/0.map.png" in page  # both rankings, side by side


@pytest.mark.slow
def test_lrp_relevance_top_is_zennit_crps_relmax(tmp_path):
    from crp.attribution import CondAttribution
    from crp.concepts import ChannelConcept
    from zennit.canonizers import SequentialMergeBatchNorm
    from zennit.composites import EpsilonPlusFlat

    from tests.conftest import tiny_net

    data = _photos(tmp_path / "photos", per_class=3)
    document = _atlas(data, tmp_path / "atlas", "--relevance", "2", "--relevance-rule", "lrp")
    paths, inputs = _inputs(data)
    attribution = CondAttribution(copy.deepcopy(tiny_net().eval()))
    composite = EpsilonPlusFlat(canonizers=[SequentialMergeBatchNorm()])
    result = attribution(inputs.requires_grad_(True), [{"y": [2]}] * len(paths), composite, record_layer=[LAYER])
    order, values, neurons = ChannelConcept().reference_sampling(result.relevances[LAYER], LAYER, max_target="sum", abs_norm=False)
    layer = document["layers"][0]
    for channel, item in enumerate(layer["items"]):
        assert [e["source"] for e in item["relevance_top"]] == [str(paths[i]) for i in order[:3, channel].tolist()]
        assert [e["score"] for e in item["relevance_top"]] == pytest.approx(values[:3, channel].double().numpy(), rel=1e-4, abs=1e-6)
        positions = [list(np.unravel_index(int(n), layer["grid"])) for n in neurons[:3, channel]]
        assert [e["position"] for e in item["relevance_top"]] == positions
    assert document["relevance"] == "2" and document["relevance_rule"] == "lrp"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--relevance", "9"), "--relevance 9: the model has 5 classes"),
        (("--relevance", "zebra"), "--relevance zebra: the model names no classes"),
        (("--relevance", "1", "--relevance-rule", "occlusion"), "--relevance-rule occlusion: choose"),
        (("--rank", "relevance"), "--rank relevance: give max or mean"),
        (("--label-with", "open_clip:RN50"), "--label-with needs --vocabulary"),
        (("--label-with", "timm:resnet18", "--vocabulary", "words.txt"), "--label-with timm:resnet18: names come from an open_clip"),
        (("--visualize", "-1"), "--visualize -1: give how many channels"),
        (("--visualize", "1", "--visualize-steps", "0"), "--visualize-steps 0: give a whole number of steps"),
        (("--visualize", "1", "--visualize-seconds", "-2"), "--visualize-seconds -2.0: give a positive number"),
    ],
)
def test_bad_concept_options_are_refused_in_one_line_and_leave_no_folder(tmp_path, args, says):
    data = _photos(tmp_path / "photos", per_class=1)
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYER, "--out", tmp_path / "atlas", *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"hookviz: error: {lines[0].removeprefix('hookviz: error: ')}"] and says in lines[0]
    assert not (tmp_path / "atlas").exists()


def test_a_missing_vocabulary_is_refused_before_the_work(tmp_path):
    data = _photos(tmp_path / "photos", per_class=1)
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYER, "--out", tmp_path / "atlas",
                         "--label-with", "open_clip:RN50", "--vocabulary", tmp_path / "none.txt")  # fmt: skip
    assert result.exit_code == 2 and "--vocabulary" in result.output and "cannot read it" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "atlas").exists()
