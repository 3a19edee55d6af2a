"""``hookviz atlas`` held to brute force: every channel's top-K computed by a plain loop over the
dataset (its own preprocessing and a plain forward hook, one sample at a time) on photos and on
clips; the shards' merged atlas held to the single run's; a resumed run to an unbroken one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hookviz.atlas import AtlasRequest, make_atlas
from tests.cli_helpers import TINY_NET, hookviz_cli

LAYERS = ("features.0", "features.3")


def _photos(root: Path, per_class: int = 5) -> Path:
    rng = np.random.default_rng(7)
    for name in ("apples", "sky"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (36 + i, 44, 3), dtype=np.uint8)
            pixels[..., 0 if name == "apples" else 2] //= 3
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


def _plain_maps(model, layer: str, tensor):
    """The layer's output for one input, by a plain forward hook."""
    seen = []
    handle = dict(model.named_modules())[layer].register_forward_hook(lambda _m, _a, out: seen.append(out.detach().clone()))
    try:
        with torch.no_grad():
            model(tensor[None])
    finally:
        handle.remove()
    return seen[0][0]


def _brute_top(maps_by_source: dict, k: int) -> list[list[tuple]]:
    """Per channel, (source, score, position) of the k highest spatial maxima, by a plain loop."""
    channels = next(iter(maps_by_source.values())).shape[0]
    tops = []
    for channel in range(channels):
        rows = []
        for source, maps in maps_by_source.items():
            plane = maps[channel].numpy()
            rows.append((source, float(plane.max()), list(np.unravel_index(int(plane.argmax()), plane.shape))))
        rows.sort(key=lambda row: -row[1])
        tops.append(rows[:k])
    return tops


def _valid(document: dict) -> dict:
    """``document``, checked against the published schema of atlas.json."""
    import jsonschema

    from hookviz.store.documents import schema_path

    jsonschema.Draft202012Validator(json.loads(schema_path("atlas").read_text(encoding="utf-8"))).validate(document)
    return document


def _assert_matches(layer_json: dict, brute: list[list[tuple]]) -> None:
    for item, expected in zip(layer_json["items"], brute, strict=True):
        assert [e["source"] for e in item["top"]] == [str(source) for source, _, _ in expected]
        assert [e["score"] for e in item["top"]] == pytest.approx([score for _, score, _ in expected], abs=1e-5)
        assert [e["position"] for e in item["top"]] == [position for _, _, position in expected]


def _torchvision_input(path: Path):
    from torchvision import transforms

    pipeline = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )
    return pipeline(Image.open(path).convert("RGB"))


@pytest.mark.slow
def test_atlas_of_photos_is_the_brute_force_top_k(tmp_path):
    from tests.conftest import tiny_net

    data = _photos(tmp_path / "photos")
    result = hookviz_cli(
        "atlas",
        data,
        "--model",
        TINY_NET,
        "--weights",
        "none",
        "--layer",
        LAYERS[0],
        "--layer",
        LAYERS[1],
        "--top",
        4,
        "--batch-size",
        3,
        "--out",
        tmp_path / "atlas",
    )
    assert result.exit_code == 0, result.output
    document = _valid(json.loads((tmp_path / "atlas" / "atlas.json").read_text()))
    model = tiny_net().eval()
    paths = sorted(data.rglob("*.png"))
    for layer_json, layer in zip(document["layers"], LAYERS, strict=True):
        maps = {path: _plain_maps(model, layer, _torchvision_input(path)) for path in paths}
        _assert_matches(layer_json, _brute_top(maps, 4))
        stats = layer_json["items"][1]["stats"]
        maxima = np.array([m[1].max().item() for m in maps.values()])
        assert stats["mean"] == pytest.approx(np.mean([m[1].mean().item() for m in maps.values()]), rel=1e-5)
        assert stats["dead"] == pytest.approx(np.mean(maxima <= 0))
        for q, value in stats["max_quantiles"].items():
            exact = np.quantile(maxima, float(q), method="nearest")
            assert value == pytest.approx(exact, rel=0.0101, abs=1e-6)
        assert {c["class"] for c in stats["classes"]} == {"apples", "sky"}
    assert document["samples"] == len(paths) and document["classes_from"] == "true"


@pytest.mark.slow
def test_atlas_of_clips_is_the_brute_force_top_k(tmp_path):
    from hookviz.models.loading import load_model
    from hookviz.samples import VideoOptions, get_sample_kind, kind_settings, sample_keys, settings_for_model
    from tests.video_clips import encode

    (tmp_path / "clips").mkdir()
    for i in range(4):
        encode(tmp_path / "clips" / f"walk{i}.mp4", frames=12 + 4 * i)
    result = hookviz_cli(
        "atlas",
        tmp_path / "clips",
        "--model",
        "tests.video_clips:video_net",
        "--weights",
        "none",
        "--layer",
        "features.2",
        "--top",
        3,
        "--batch-size",
        2,
        "--out",
        tmp_path / "atlas",
        "--clips",
        2,
        "--frames",
        6,
    )
    assert result.exit_code == 0, result.output
    document = _valid(json.loads((tmp_path / "atlas" / "atlas.json").read_text()))
    loaded = load_model("tests.video_clips:video_net", "none")
    kind = get_sample_kind("video")
    settings = settings_for_model(kind, kind_settings(kind, (VideoOptions(frames=6, clips=2),), loaded.name), loaded)
    maps = {}
    for path in sample_keys(kind, sorted((tmp_path / "clips").glob("*.mp4")), settings):  # walk0.mp4#1, walk0.mp4#2, ...
        clip = kind.prepare(kind.load(path, 10**9, settings), loaded.preprocessing, 10**9, settings)
        maps[path] = _plain_maps(loaded.module, "features.2", clip.tensor)
    layer = document["layers"][0]
    assert len(layer["grid"]) == 3 and document["samples"] == 8
    _assert_matches(layer, _brute_top(maps, 3))
    first = layer["items"][0]["top"][0]
    assert first["frame"] is not None and (tmp_path / "atlas" / first["crop"]).is_file()


def _request(data: Path, out: Path, **given) -> AtlasRequest:
    return AtlasRequest(
        model=TINY_NET, weights="none", layers=LAYERS, sources=(str(data),), out=out, top=3, batch_size=2, **given
    )


def _same_atlas(one: Path, other: Path) -> None:
    a, b = (json.loads((folder / "atlas.json").read_text()) for folder in (one, other))
    for layer_a, layer_b in zip(a["layers"], b["layers"], strict=True):
        for item_a, item_b in zip(layer_a["items"], layer_b["items"], strict=True):
            assert item_a["top"] == item_b["top"]
            stats_a, stats_b = item_a["stats"], item_b["stats"]
            assert stats_a["mean"] == pytest.approx(stats_b["mean"], rel=1e-12)
            assert (stats_a["dead"], stats_a["max_quantiles"], stats_a["max_range"]) == (
                stats_b["dead"],
                stats_b["max_quantiles"],
                stats_b["max_range"],
            )
            assert [(c["class"], c["count"]) for c in stats_a["classes"]] == [
                (c["class"], c["count"]) for c in stats_b["classes"]
            ]
    assert a["samples"] == b["samples"]
    with np.load(one / "atlas.npz") as maps_a, np.load(other / "atlas.npz") as maps_b:
        assert sorted(maps_a.files) == sorted(maps_b.files)
        for key in maps_a.files:
            np.testing.assert_array_equal(maps_a[key], maps_b[key])


@pytest.mark.slow
def test_shards_merge_into_the_single_run(tmp_path):
    data = _photos(tmp_path / "photos", per_class=4)
    make_atlas(_request(data, tmp_path / "single"))
    first = make_atlas(_request(data, tmp_path / "sharded", shard=(2, 3)))
    assert not first.written and first.waiting == (1, 3)
    make_atlas(_request(data, tmp_path / "sharded", shard=(1, 3)))
    last = make_atlas(_request(data, tmp_path / "sharded", shard=(3, 3)))
    assert last.written
    _same_atlas(tmp_path / "single", tmp_path / "sharded")
    (tmp_path / "sharded" / "atlas.json").unlink()
    result = hookviz_cli("atlas", "--merge", tmp_path / "sharded")
    assert result.exit_code == 0, result.output
    _same_atlas(tmp_path / "single", tmp_path / "sharded")


@pytest.mark.slow
def test_a_killed_run_resumes_without_counting_a_sample_twice(tmp_path, monkeypatch):
    import hookviz.atlas.collect as collect

    data = _photos(tmp_path / "photos", per_class=4)
    make_atlas(_request(data, tmp_path / "whole"))
    monkeypatch.setattr(collect, "SAVE_EVERY", -1.0)  # save after every batch

    def killed(done: int, total: int) -> None:
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        make_atlas(_request(data, tmp_path / "resumed"), on_batch=killed)
    assert not (tmp_path / "resumed" / "atlas.json").exists()
    make_atlas(_request(data, tmp_path / "resumed", skip_existing=True))
    _same_atlas(tmp_path / "whole", tmp_path / "resumed")
    counts = json.loads((tmp_path / "resumed" / "atlas.json").read_text())["layers"][0]["items"][0]["stats"]["classes"]
    assert sum(c["count"] for c in counts) == 8


def test_skip_existing_refuses_another_atlas_state(tmp_path):
    data = _photos(tmp_path / "photos", per_class=2)
    make_atlas(_request(data, tmp_path / "atlas"))
    result = hookviz_cli(
        "atlas",
        data,
        "--model",
        TINY_NET,
        "--weights",
        "none",
        "--layer",
        "features.0",
        "--out",
        tmp_path / "atlas",
        "--skip-existing",
    )
    assert result.exit_code == 2
    assert "other arguments" in result.output and "Traceback" not in result.output


def test_a_layer_without_a_grid_is_refused_in_one_line(tmp_path):
    data = _photos(tmp_path / "photos", per_class=1)
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", "fc", "--out", tmp_path / "atlas")
    assert result.exit_code == 2
    assert "--layer fc" in result.output and "convolutional layer" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "atlas" / "atlas.json").exists()


def test_an_unknown_layer_leaves_no_folder(tmp_path):
    data = _photos(tmp_path / "photos", per_class=1)
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", "nope", "--out", tmp_path / "atlas")
    assert result.exit_code == 2 and "--layer nope" in result.output
    assert not (tmp_path / "atlas").exists()


@pytest.mark.parametrize("device", ["", "tpu", "meta"])
def test_atlas_refuses_a_device_as_run_does_in_one_line(tmp_path, device):
    """atlas took --device to torch unchecked: '' and tpu ended in torch's RuntimeError (exit 1), and
    meta in "Cannot copy out of meta tensor" after marking --out as an output folder."""
    data = _photos(tmp_path / "photos", per_class=1)
    result = hookviz_cli(
        "atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", "features.0", "--out", tmp_path / "atlas",
        "--device", device,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    shown = device or "''"
    assert result.stderr.strip() == f"hookviz: error: --device {shown}: choose auto, cpu, cuda, cuda:N or mps"
    assert not (tmp_path / "atlas").exists()


def test_atlas_and_run_never_write_into_each_others_folder(tmp_path):
    """Each writes its own index.html: an atlas with the --out of a run replaced the run's gallery,
    and a run with an atlas's --out the atlas's page."""
    data = _photos(tmp_path / "photos", per_class=1)
    ran, mapped = tmp_path / "ran", tmp_path / "mapped"
    for folder, made in ((ran, "run.json"), (mapped, "atlas.json")):
        folder.mkdir()
        (folder / made).write_text('{"hookviz": "0.2.0"}')
        (folder / "index.html").write_text("its own page")
    atlas = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", "features.0", "--out", ran)
    run = hookviz_cli("run", data, "--model", TINY_NET, "--weights", "none", "--layer", "features.0", "--out", mapped)
    assert (atlas.exit_code, run.exit_code) == (2, 2), atlas.output + run.output
    assert atlas.stderr.strip() == (
        f"hookviz: error: --out {ran}: holds a hookviz run's results (run.json), whose gallery the atlas's "
        "index.html would replace; choose another --out"
    )
    assert run.stderr.strip() == (
        f"hookviz: error: --out {mapped}: holds an atlas (atlas.json), whose page the run's index.html would "
        "replace; choose another --out"
    )
    assert [sorted(p.name for p in folder.iterdir()) for folder in (ran, mapped)] == [
        ["index.html", "run.json"],
        ["atlas.json", "index.html"],
    ]


def test_an_atlas_refuses_a_folder_another_atlas_is_writing_now(tmp_path):
    """Two atlases with one --out side by side both wrote its state, pages and atlas.json at once."""
    from hookviz.store.outfolder import FolderLock

    data = _photos(tmp_path / "photos", per_class=1)
    (tmp_path / "atlas").mkdir()
    other = FolderLock(tmp_path / "atlas")
    assert other.acquire()  # as the other atlas holds it while it works
    try:
        result = hookviz_cli(
            "atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", "features.0", "--out", tmp_path / "atlas"
        )
    finally:
        other.release()
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().startswith(
        f"hookviz: error: --out {tmp_path / 'atlas'}: another hookviz run is writing into this folder now; wait for it"
    )
    assert sorted(p.name for p in (tmp_path / "atlas").iterdir()) == [".hookviz-run.lock"]


def test_a_shard_run_again_renders_again(tmp_path):
    data = _photos(tmp_path / "photos", per_class=1)
    for _ in range(2):
        make_atlas(_request(data, tmp_path / "atlas", shard=(1, 2)))
        assert make_atlas(_request(data, tmp_path / "atlas", shard=(2, 2))).written
        (tmp_path / "atlas" / "atlas.json").unlink()


def test_an_unreadable_photo_is_listed_and_the_others_mapped(tmp_path):
    data = _photos(tmp_path / "photos", per_class=2)
    (data / "sky" / "broken.png").write_bytes(b"not a png")
    result = hookviz_cli(
        "atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", "features.0", "--out", tmp_path / "atlas"
    )
    assert result.exit_code == 1, result.output
    document = json.loads((tmp_path / "atlas" / "atlas.json").read_text())
    assert document["samples"] == 4
    assert "atlas of 4 samples, 1 could not be read" in result.output  # the closing line counts as atlas.json does
    assert [failure["source"] for failure in document["failed"]] == [str(data / "sky" / "broken.png")]
    assert all("broken" not in example["source"] for item in document["layers"][0]["items"] for example in item["top"])


def test_a_shard_refuses_another_atlas_shards_before_its_work(tmp_path):
    data = _photos(tmp_path / "photos", per_class=1)
    make_atlas(_request(data, tmp_path / "atlas", shard=(1, 2)))
    result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", "features.0", "--top", 5,
                         "--shard", "2/2", "--out", tmp_path / "atlas")  # fmt: skip
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "--layer features.0 --layer features.3" in lines[0] and "state-1-of-2.npz" in lines[0]
    assert not (tmp_path / "atlas" / ".atlas-state" / "state-2-of-2.npz").exists()


def _one_line(result, exit_code: int = 2) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == exit_code and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_shards_run_with_other_options_are_refused_by_the_last_shard_and_by_merge(tmp_path):
    """Shards that disagree cannot merge exactly: the last shard refused none (it rendered with its
    own --visualize, or refused --top as "another atlas" without saying which option), and
    ``--merge`` said no more; now both name the option, the state files and what to do."""
    data = _photos(tmp_path / "photos", per_class=1)
    out = tmp_path / "atlas"
    make_atlas(_request(data, out, shard=(1, 2)))  # --top 3, --visualize 0

    def shard(folder: Path, *args: object):
        return hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYERS[0], "--layer", LAYERS[1],
                           "--batch-size", 2, "--shard", "2/2", "--out", folder, *args)  # fmt: skip

    line = _one_line(shard(out, "--top", 5))
    assert line.startswith("hookviz: error: --top: state-1-of-2.npz in ") and "was run with --top 3" in line
    assert "this shard (state-2-of-2.npz) with --top 5" in line and "run this shard again with --top 3" in line
    line = _one_line(shard(out, "--top", 3, "--visualize", 1, "--visualize-steps", 2))
    assert "--visualize: state-1-of-2.npz" in line and "was run with --visualize 0" in line and "--skip-existing" in line
    assert not (out / "atlas.json").exists()
    alone = shard(tmp_path / "other", "--top", 5)
    assert alone.exit_code == 0 and "the atlas is written when shard 1 end" in alone.output, alone.output
    other = tmp_path / "other" / ".atlas-state" / "state-2-of-2.npz"
    (out / ".atlas-state" / "state-2-of-2.npz").write_bytes(other.read_bytes())  # shard 2 run with --top 5 elsewhere
    line = _one_line(hookviz_cli("atlas", "--merge", out))
    assert "the shards were run with different --top: --top 3 (state-1-of-2.npz); --top 5 (state-2-of-2.npz)" in line
    assert "run the shards that differ again with the same options" in line and not (out / "atlas.json").exists()
    alike = shard(out, "--top", 3)  # run again with shard 1's options: the atlas
    assert alike.exit_code == 0 and (out / "atlas.json").is_file(), alike.output
    assert "--visualize: " in _one_line(shard(out, "--top", 3, "--skip-existing", "--visualize", 1, "--visualize-steps", 2))
    merged = hookviz_cli("atlas", "--merge", out, "--quiet")  # the refused shard's state was left as it was
    assert merged.exit_code == 0, merged.output


def test_a_slurm_array_with_shard_auto_over_a_from_list_maps_the_listed_samples(tmp_path):
    """``--from-list FILE`` and ``--shard auto`` in a Slurm array, as ``hookviz run`` takes them: each
    task its shard, the last one writes the atlas of the samples listed, each shown by its file name."""
    data = _photos(tmp_path / "photos", per_class=2)
    listed = [data / "apples" / "0.png", data / "sky" / "0.png", data / "sky" / "1.png"]
    (tmp_path / "list.txt").write_text("".join(f"{path}\n" for path in listed))
    for task in (1, 2):
        env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "1"}
        result = hookviz_cli("atlas", "--from-list", tmp_path / "list.txt", "--model", TINY_NET, "--weights", "none",
                             "--layer", "features.0", "--top", 3, "--shard", "auto", "--out", tmp_path / "atlas", env=env)  # fmt: skip
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "atlas" / ".atlas-state").glob("state-*")) == [
        "state-1-of-2.npz",
        "state-2-of-2.npz",
    ]
    document = json.loads((tmp_path / "atlas" / "atlas.json").read_text())
    assert document["samples"] == 3
    examples = [example for item in document["layers"][0]["items"] for example in item["top"]]
    assert {example["source"] for example in examples} == {str(path) for path in listed}
    assert {(example["source"], example["shown"]) for example in examples} == {(str(p), p.name) for p in listed}


@pytest.mark.slow  # encodes two videos, three clip atlases and a merge
def test_clip_shards_agree_on_frames_and_merge_with_them(tmp_path):
    """A clip's ``--frames`` and ``--clips`` make the samples: a shard run with other ``--frames`` is
    refused (it was not compared), and ``--merge`` takes them from the shards (it planned the
    model's default and refused the shards' samples as gone)."""
    from tests.video_clips import encode

    (tmp_path / "clips").mkdir()
    for i in range(2):
        encode(tmp_path / "clips" / f"walk{i}.mp4", frames=8)

    def atlas(*args: object):
        return hookviz_cli("atlas", tmp_path / "clips", "--model", "tests.video_clips:video_net", "--weights", "none",
                           "--layer", "features.2", "--top", 2, "--clips", 2, "--out", tmp_path / "atlas", *args)  # fmt: skip

    assert atlas("--frames", 4, "--shard", "1/2").exit_code == 0
    assert "--frames: state-1-of-2.npz" in _one_line(atlas("--frames", 3, "--shard", "2/2"))
    assert atlas("--frames", 4, "--shard", "2/2").exit_code == 0
    written = (tmp_path / "atlas" / "atlas.json").read_text()
    (tmp_path / "atlas" / "atlas.json").unlink()
    result = hookviz_cli("atlas", "--merge", tmp_path / "atlas", "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "atlas" / "atlas.json").read_text()) == json.loads(written)


def test_torchrun_processes_each_take_their_shard_and_the_last_writes_the_atlas(tmp_path):
    """Under torchrun (``RANK``/``WORLD_SIZE``, no ``--shard`` typed) each process takes its own
    slice, as ``hookviz run`` does, and the last to finish writes the atlas of all the samples."""
    data = _photos(tmp_path / "photos", per_class=1)
    said = []
    for rank in (1, 0):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"}
        result = hookviz_cli("atlas", data, "--model", TINY_NET, "--weights", "none", "--layer", LAYERS[0], "--top", 2,
                             "--out", tmp_path / "atlas", env=env)  # fmt: skip
        assert result.exit_code == 0, result.output
        said.append(result.output)
    assert "1 samples done; the atlas is written when shard 1 end" in said[0] and "atlas of 2 samples" in said[1]
    states = sorted(p.name for p in (tmp_path / "atlas" / ".atlas-state").glob("state-*"))
    assert states == ["state-1-of-2.npz", "state-2-of-2.npz"]
    examples = {
        e["source"]
        for item in json.loads((tmp_path / "atlas" / "atlas.json").read_text())["layers"][0]["items"]
        for e in item["top"]
    }
    assert examples == {str(path) for path in data.rglob("*.png")}


def test_every_page_shows_its_channels_examples_histogram_and_classes_and_every_link_resolves(tmp_path):
    """The pages a person reads: the index has a row per channel, sortable by a value in each cell,
    linking its channel's page; each page shows its K crops (each a file there), the histogram of its
    maximum and its classes; no link or picture points at nothing."""
    import re

    data = _photos(tmp_path / "photos", per_class=2)
    make_atlas(_request(data, tmp_path / "atlas"))
    out = tmp_path / "atlas"
    document = json.loads((out / "atlas.json").read_text())
    index = (out / "index.html").read_text()
    for layer in document["layers"]:
        for item in layer["items"]:
            assert f'<a href="{item["page"]}">{item["index"]}</a>' in index
            page = out / item["page"]
            text = page.read_text()
            crops = re.findall(r'<img class=(?:map|raw) src="([^"]+)"', text)
            assert len(crops) == 2 * len(item["top"]) == 2 * 3  # each crop bare and with the map over it
            assert "<svg" in text and ">apples<" in text and ">sky<" in text
            for link in crops + re.findall(r'<a href="([^"#]+)"', text):
                assert (page.parent / link).resolve().is_file(), (page, link)
    assert index.count("<tr><td data-v=") == sum(layer["channels"] for layer in document["layers"])
    for link in re.findall(r'(?:src|href)="([^"#]+)"', index):
        assert (out / link).is_file(), link
