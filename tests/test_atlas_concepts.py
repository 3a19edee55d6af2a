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
    assert "#1 · relevance " in page and "#1 · max " in page  # each crop labelled with what ranks it
    # a crop ranked by relevance shows the relevance it is ranked by: atlas.npz holds the cells under it,
    # a block of the plain autograd relevance map around its most relevant unit (not the activation's)
    planes = relevance.reshape(*relevance.shape[:2], *layer["grid"]).numpy()
    with np.load(tmp_path / "atlas" / "atlas.npz") as saved:
        for channel, item in enumerate(layer["items"]):
            for k, example in enumerate(item["relevance_top"]):
                plane = planes[paths.index(Path(example["source"])), channel]
                assert _holds(plane, saved[f"{LAYER}/{channel}/relevance/{k}"], example["position"]), (channel, k)


def _holds(plane: np.ndarray, cells: np.ndarray, position: list[int]) -> bool:
    """Whether ``cells`` is the block of ``plane`` at some place that covers ``position``."""
    (height, width), (row, column) = cells.shape, position
    return any(
        np.allclose(plane[top : top + height, left : left + width], cells, rtol=1e-4, atol=1e-6)
        for top in range(max(row - height + 1, 0), row + 1)
        for left in range(max(column - width + 1, 0), column + 1)
        if top + height <= plane.shape[0] and left + width <= plane.shape[1]
    )


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
    order, values, neurons = ChannelConcept().reference_sampling(
        result.relevances[LAYER], LAYER, max_target="sum", abs_norm=False
    )
    layer = document["layers"][0]
    for channel, item in enumerate(layer["items"]):
        assert [e["source"] for e in item["relevance_top"]] == [str(paths[i]) for i in order[:3, channel].tolist()]
        assert [e["score"] for e in item["relevance_top"]] == pytest.approx(
            values[:3, channel].double().numpy(), rel=1e-4, abs=1e-6
        )
        positions = [list(np.unravel_index(int(n), layer["grid"])) for n in neurons[:3, channel]]
        assert [e["position"] for e in item["relevance_top"]] == positions
    assert document["relevance"] == "2" and document["relevance_rule"] == "lrp"
    planes = result.relevances[LAYER].detach().numpy()  # the crops show zennit-crp's relevance too
    with np.load(tmp_path / "atlas" / "atlas.npz") as saved:
        for channel, item in enumerate(layer["items"]):
            for k, example in enumerate(item["relevance_top"]):
                plane = planes[paths.index(Path(example["source"])), channel]
                assert _holds(plane, saved[f"{LAYER}/{channel}/relevance/{k}"], example["position"]), (channel, k)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--relevance", "9"), "--relevance 9: the model has 5 classes"),
        (("--relevance", "zebra"), "--relevance zebra: the model names no classes"),
        (("--relevance", "1", "--relevance-rule", "occlusion"), "--relevance-rule occlusion: choose"),
        (("--rank", "relevance"), "--rank relevance: give max or mean"),
        (("--label-with", "open_clip:RN50"), "--label-with needs --vocabulary"),
        (
            ("--label-with", "timm:resnet18", "--vocabulary", "words.txt"),
            "--label-with timm:resnet18: names come from an open_clip",
        ),
        (("--visualize", "-1"), "--visualize -1: give how many channels"),
        (("--visualize", "1", "--visualize-steps", "0"), "--visualize-steps 0: give a whole number of steps"),
        (("--visualize", "1", "--visualize-seconds", "-2"), "--visualize-seconds -2.0: give a positive number"),
    ],
)
def test_bad_concept_options_are_refused_in_one_line_and_leave_no_folder(tmp_path, args, says):
    data = _photos(tmp_path / "photos", per_class=1)
    result = hookviz_cli(
        "atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYER, "--out", tmp_path / "atlas", *args
    )
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


@pytest.mark.slow  # open_clip's import (~5-10 s)
def test_label_with_names_each_channel_by_soft_wpmi_by_hand_on_a_seeded_random_open_clip(tmp_path, monkeypatch):
    import open_clip
    import open_clip.factory

    from hookviz.concepts.naming import clip_concepts
    from tests.test_concepts_naming import TINY_CLIP, WORDS, _by_hand

    monkeypatch.setitem(open_clip.factory._MODEL_CONFIGS, "hookviz-tiny-dissect", TINY_CLIP)
    data = _photos(tmp_path / "photos", per_class=2)
    (tmp_path / "words.txt").write_text("\n".join(WORDS) + "\n")
    out = tmp_path / "atlas"
    document = _atlas(data, out, "--label-with", "open_clip:hookviz-tiny-dissect", "--label-weights", "none",
                      "--vocabulary", tmp_path / "words.txt")  # fmt: skip
    # open_clip's own model, seeded as hookviz seeds random weights; each crop as the model takes it
    prepare = clip_concepts("open_clip:hookviz-tiny-dissect", WORDS, weights="none").prepare
    torch.manual_seed(0)
    model = open_clip.create_model("hookviz-tiny-dissect", pretrained=None).eval()
    items = document["layers"][0]["items"]
    with torch.no_grad():
        text = model.encode_text(open_clip.get_tokenizer("hookviz-tiny-dissect")(list(WORDS)))
        text = (text / text.norm(dim=-1, keepdim=True)).numpy()
        sims = []
        for item in items:
            crops = torch.stack([prepare(Image.open(out / e["crop"]).convert("RGB")) for e in item["top"]])
            image = model.encode_image(crops)
            sims.append((image / image.norm(dim=-1, keepdim=True)).numpy() @ text.T)
    expected = _by_hand(np.array(sims).tolist())
    for item, row in zip(items, expected, strict=True):
        first, second = np.argsort(row)[::-1][:2]
        label = item["label"]
        assert (label["concept"], label["runner_up"]) == (WORDS[first], WORDS[second])
        assert (label["score"], label["runner_up_score"]) == pytest.approx((row[first], row[second]), abs=1e-4)
        page = (out / item["page"]).read_text()
        assert f"channel {item['index']} · <span class=label>{WORDS[first]}</span>" in page and "runner-up" in page
    assert '<th class="name">name</th>' in (out / "index.html").read_text()


@pytest.mark.slow  # open_clip's import
def test_label_with_uncached_weights_says_where_to_put_them_before_the_work(tmp_path, monkeypatch):
    data = _photos(tmp_path / "photos", per_class=1)
    (tmp_path / "words.txt").write_text("fur\nsky\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYER, "--out", tmp_path / "atlas",
                         "--label-with", "open_clip:RN50", "--vocabulary", tmp_path / "words.txt")  # fmt: skip
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("hookviz: error: --label-with open_clip:RN50")
    assert "empty-cache" in lines[0] and "hf download" in lines[0]
    assert not (tmp_path / "atlas").exists()


@pytest.mark.slow  # a few optimiser steps at 224 pixels (~1.5 s)
def test_visualize_puts_the_strongest_channels_input_on_their_pages_and_measures_it_again(tmp_path):
    from tests.conftest import tiny_net

    data = _photos(tmp_path / "photos", per_class=1)
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYER, "--top", 2,
                         "--out", tmp_path / "atlas", "--visualize", 2, "--visualize-steps", 3)  # fmt: skip
    assert result.exit_code == 0, result.output
    document = _valid(json.loads((tmp_path / "atlas" / "atlas.json").read_text()))
    items = document["layers"][0]["items"]
    best = sorted(range(len(items)), key=lambda i: (-items[i]["top"][0]["score"], i))[:2]
    assert [i for i, item in enumerate(items) if "visualization" in item] == sorted(best)
    assert result.output.count("its best example, 3 steps") == 2  # a progress line per channel
    model = tiny_net().eval()
    for index in best:
        found = items[index]["visualization"]
        pixels = np.asarray(Image.open(tmp_path / "atlas" / found["image"]).convert("RGB"), dtype=np.float32) / 255
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
        tensor = torch.from_numpy(((pixels - mean) / std).astype(np.float32)).permute(2, 0, 1)[None]
        kept: list = []
        handle = model.features[3].register_forward_hook(lambda _m, _a, out, into=kept: into.append(out.detach()))
        with torch.no_grad():
            model(tensor)
        handle.remove()
        assert found["activation"] == pytest.approx(float(kept[0][0, index].max()), rel=1e-4, abs=1e-6)
        assert found["ratio"] == pytest.approx(found["activation"] / items[index]["top"][0]["score"], rel=1e-6)
        assert found["steps"] == 3 and pixels.shape == (224, 224, 3)
        assert f'src="../../{found["image"]}"' in (tmp_path / "atlas" / items[index]["page"]).read_text()


@pytest.mark.slow
def test_shards_relevance_rankings_merge_into_the_single_runs(tmp_path):
    from hookviz.atlas import AtlasRequest, make_atlas, merge_atlas

    data = _photos(tmp_path / "photos", per_class=2)

    def request(out: Path, **given) -> AtlasRequest:
        return AtlasRequest(model=TINY_NET, weights="none", layers=(LAYER,), sources=(str(data),), out=out, top=2,
                            batch_size=2, relevance="predicted", **given)  # fmt: skip

    make_atlas(request(tmp_path / "single"))
    for shard in (1, 2):
        make_atlas(request(tmp_path / "sharded", shard=(shard, 2)))
    (tmp_path / "sharded" / "atlas.json").unlink()
    merge_atlas(tmp_path / "sharded")
    single, merged = (json.loads((tmp_path / name / "atlas.json").read_text()) for name in ("single", "sharded"))
    assert merged["relevance"] == "predicted"
    assert [item["relevance_top"] for item in merged["layers"][0]["items"]] == [
        item["relevance_top"] for item in single["layers"][0]["items"]
    ]


@pytest.mark.slow  # four small atlases, two optimisations of 2 steps
def test_merge_names_and_visualises_as_the_shards_were_run_and_refuses_a_line_that_contradicts_them(tmp_path):
    """``hookviz atlas --merge DIR`` writes the atlas the last shard writes: with the shards'
    ``--visualize`` (and naming) options, where it took its own command line's (none: the merged
    atlas lost its pictures and names); a different value is refused in one line, and shards run
    with different ones need the merge to choose."""
    data = _photos(tmp_path / "photos", per_class=1)
    out = tmp_path / "atlas"

    def shard(k: int, *args: object):
        result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYER, "--top", 2,
                             "--shard", f"{k}/2", "--out", out, "--quiet", *args)  # fmt: skip
        assert result.exit_code == 0, result.output

    def merged(*args: object):
        (out / "atlas.json").unlink(missing_ok=True)
        return hookviz_cli("atlas", "--merge", out, "--quiet", *args)

    def visualised() -> list:
        items = json.loads((out / "atlas.json").read_text())["layers"][0]["items"]
        return [(item["index"], item["visualization"]["steps"]) for item in items if "visualization" in item]

    for k in (1, 2):
        shard(k, "--visualize", 1, "--visualize-steps", 2)
    by_last_shard = visualised()
    assert len(by_last_shard) == 1
    result = merged()
    assert result.exit_code == 0, result.output
    assert visualised() == by_last_shard
    for args, says in (
        (("--visualize", 3), "--visualize 3: the shards were run with --visualize 1"),
        (("--visualize-steps", 5), "--visualize-steps 5: the shards were run with --visualize-steps 2"),
    ):
        result = merged(*args)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and says in lines[0], result.output
    from hookviz.atlas.state import load_state, state_path

    # shard 2 ended without --visualize as shard 1 ended (shards started together: a shard refuses it when it sees the other)
    second = state_path(out, (2, 2))
    state = load_state(second)
    state.rendering = {**state.rendering, "visualize": 0}
    state.save(second)
    result = merged()
    assert (
        result.exit_code == 2
        and "the shards were run with different --visualize (state-1-of-2.npz: 1, state-2-of-2.npz: 0)" in result.output
    )
    result = merged("--visualize", 0)
    assert result.exit_code == 0, result.output
    assert visualised() == []
