"""A prediction explained by its channels (``hookviz.concepts.glocal``): the shares held to a
hand computation, the atlas's examples read per its contract, and the picture drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image

from hookviz.concepts.glocal import draw_top_channels, top_channels
from hookviz.errors import UsageError


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(6, 7, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(7, 4),
    ).eval()


def _atlas(folder, layer="3", channels=7, top=3):
    """An atlas folder as ``hookviz atlas`` writes it (ATLAS_CONTRACT), with coloured crops."""
    items = []
    for c in range(channels):
        tops = []
        for k in range(top):
            crop = f"crops/{layer}/{c}/{k}.png"
            (folder / crop).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((20, 20, 3), 30 * k + 10 * c, dtype=np.uint8)).save(folder / crop)
            tops.append(
                {"source": f"photos/p{c}{k}.png", "score": 10.0 - k, "position": [1, 1], "box": [0, 0, 8, 8], "crop": crop}
            )
        items.append(
            {"index": c, "stats": {}, "top": tops, "page": f"channels/{layer}/{c}.html", "label": {"concept": f"thing{c}"}}
        )
    document = {"schema": "hookviz/atlas/1", "layers": [{"name": layer, "channels": channels, "grid": [8, 8], "items": items}]}
    (folder / "atlas.json").write_text(json.dumps(document))
    return folder


def test_shares_are_each_channels_term_of_the_logit_over_the_logit_by_hand(tmp_path):
    model = _net()
    image = torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(2))
    found = top_channels(model, "3", image, "predicted", 3, atlas=_atlas(tmp_path), examples=2)
    with torch.no_grad():
        pooled = model[:5](image[None]).flatten(1)[0]
        logits = model(image[None])[0]
    target = int(logits.argmax())
    terms = (pooled * model[6].weight[target]).detach().numpy()  # the channels' terms of the logit
    order = np.argsort(-terms)[:3]
    assert [c.channel for c in found.channels] == order.tolist()
    assert np.allclose([c.share for c in found.channels], terms[order] / float(logits[target]), atol=1e-6)
    assert found.accounted == pytest.approx(
        (float(logits[target]) - model[6].bias[target].item()) / float(logits[target]), abs=1e-6
    )
    assert found.score == pytest.approx(float(logits[target]), abs=1e-6) and found.target == target
    first = found.channels[0]
    assert [e.source for e in first.examples] == [f"photos/p{first.channel}0.png", f"photos/p{first.channel}1.png"]
    assert first.label == f"thing{first.channel}" and first.activation.shape == (8, 8)
    record = found.record()
    assert record["channels"][0]["share"] == first.share and len(record["channels"][0]["examples"]) == 2
    json.dumps(record)  # report.json can hold it


def test_an_atlas_without_the_layer_or_without_atlas_json_is_refused_in_one_line(tmp_path):
    image = torch.randn(3, 8, 8)
    with pytest.raises(UsageError, match="no readable atlas.json"):
        top_channels(_net(), "3", image, atlas=tmp_path)
    with pytest.raises(UsageError, match="holds no layer 1 \\(it holds 3\\)"):
        top_channels(_net(), "1", image, atlas=_atlas(tmp_path))
    with pytest.raises(UsageError, match="top_channels"):
        top_channels(_net(), "3", image, count=0)


@pytest.mark.slow  # matplotlib drawing and PNG encoding (~2 s)
def test_the_picture_shows_a_row_per_channel_with_its_examples(tmp_path):
    from hookviz.render.figures import png_bytes

    image = torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(2))
    found = top_channels(_net(), "3", image, 1, 2, atlas=_atlas(tmp_path), examples=3)
    photo = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    figure = draw_top_channels(found, photo)
    picture = np.asarray(Image.open(__import__("io").BytesIO(png_bytes(figure))))
    assert picture.shape[0] > 200 and picture.std() > 10
    images = [ax for ax in figure.axes if ax.images]
    assert len(images) == 2 * (1 + 3)  # per channel: its map over the photo, and three crops


@pytest.mark.slow  # a run through the command (~10 s with its first imports)
def test_hookviz_run_top_channels_writes_the_picture_and_shares_report_json_checks_and_run_json_names_the_atlas(photo, tmp_path):
    """``hookviz run --top-channels 3 --atlas DIR``: each layer's record lists the channels whose
    shares are the logit's terms by hand (the tiny net's second ReLU feeds a pooled linear head)."""
    import jsonschema

    from hookviz.inputs.images import Preprocessing, load_image, prepare

    from .cli_helpers import hookviz_run
    from .conftest import ROOT, tiny_net

    atlas = tmp_path / "atlas"
    atlas.mkdir()
    _atlas(atlas, layer="act:1", channels=6, top=2)
    out = tmp_path / "out"
    result = hookviz_run(
        photo, "--resize", "32", "--crop", "32", "--top-channels", "3", "--atlas", atlas, "--pictures", "cam",
        layer="act:1", out=out, catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "photo" / "report.json").read_text())
    jsonschema.Draft202012Validator(json.loads((ROOT / "hookviz/schemas/report.schema.json").read_text())).validate(report)
    found = report["layers"][0]["top_channels"]
    model = tiny_net().eval()
    x = prepare(load_image(photo), Preprocessing(resize=32, size=32)).tensor[None]
    with torch.no_grad():
        pooled = model.act(model.act(model.features(x)) * 1.5).mean((2, 3))[0]
        logits = model(x)[0]
    target = int(logits.argmax())
    terms = (pooled * model.fc.weight[target]).detach().numpy() / float(logits[target])
    assert [c["channel"] for c in found["channels"]][:2] == np.argsort(-terms)[:2].tolist()  # the third ties at 0 (dead)
    assert np.allclose([c["share"] for c in found["channels"]], np.sort(terms)[::-1][:3], atol=1e-5)
    assert found["target"] == target and found["score"] == pytest.approx(float(logits[target]), abs=1e-5)
    assert [len(c["examples"]) for c in found["channels"]] == [2, 2, 2] and found["atlas"] == str(atlas)
    picture = report["layers"][0]["pictures"]["top_channels"]
    assert picture and (out / "photo" / picture).is_file()
    assert json.loads((out / "run.json").read_text())["atlas"] == str(atlas)


def test_a_run_without_top_channels_writes_no_such_key(photo, tmp_path):
    from .cli_helpers import hookviz_run

    result = hookviz_run(photo, "--resize", "32", "--crop", "32", "--pictures", "cam", layer="act:1", out=tmp_path / "o")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "o" / "photo" / "report.json").read_text())
    assert "top_channels" not in report["layers"][0] and "top_channels" not in report["layers"][0]["pictures"]
    assert "atlas" not in json.loads((tmp_path / "o" / "run.json").read_text())


def test_an_atlas_folder_without_atlas_json_is_refused_before_the_run(photo, tmp_path):
    from .cli_helpers import hookviz_run

    result = hookviz_run(photo, "--top-channels", "2", "--atlas", tmp_path, layer="act:1", out=tmp_path / "o")
    assert result.exit_code == 2 and "holds no atlas.json" in result.output and "Traceback" not in result.output


def test_an_atlas_without_top_channels_is_refused_not_ignored(photo, tmp_path):
    """--atlas alone showed nothing and said nothing: only --top-channels N draws its examples."""
    from .cli_helpers import hookviz_run

    atlas = tmp_path / "atlas"
    atlas.mkdir()
    (atlas / "atlas.json").write_text("{}")
    result = hookviz_run(photo, "--atlas", atlas, layer="act:1", out=tmp_path / "o")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"hookviz: error: --atlas {atlas}: its examples are shown beside --top-channels N's channels; add --top-channels N"
    )
    assert not (tmp_path / "o").exists()
