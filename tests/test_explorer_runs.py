"""The explorer in headless Chromium on runs the CLI made: clips, a model of several inputs, a run
in shards opened as one, and a ``hookviz diff`` folder. Each drives a filter, a route and the
keyboard, checks that every picture it shows loads and that the page asks for nothing outside
the run's folder (a diff's baseline beside it, which the page shows before the run's own)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .cli_helpers import hookviz_cli, hookviz_run
from .explorer_helpers import browser, explorer_rows, listed, listing, loaded_images, open_explorer, requested, showing

pytestmark = [browser, pytest.mark.slow]  # runs of the CLI, then headless Chromium: seconds of CPU each


@pytest.fixture(autouse=True)
def drawn_here(monkeypatch):
    """The runs' pictures drawn in this process: a pool of fresh interpreters would cost more than the runs."""
    from hookviz.runs import workers

    monkeypatch.setattr(workers, "render_pool", lambda processes, draws=False: workers.RenderPool(0, draws))


def _go(driver, route: str) -> None:
    """Go to ``route`` and draw it now (``hashchange`` comes later, and draws it again)."""
    driver.execute_script("location.hash = arguments[0]; window.hookvizExplorer.route();", route)


def _within(driver, *folders: Path) -> list[str]:
    """The URLs the page asked for, each checked to lie in one of ``folders``."""
    urls = requested(driver)
    prefixes = tuple(folder.as_uri() + "/" for folder in folders)
    assert urls and [url for url in urls if not url.startswith(prefixes)] == []
    return urls


def _shown(driver) -> list:
    images = loaded_images(driver)
    assert images and [src for src, width in images if not width] == []  # none broken
    return [src for src, _ in images]


def _photos(folder: Path, names: list[str], size=(40, 32)) -> Path:
    rng = np.random.default_rng(0)
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(folder / name)
    return folder


def test_a_run_of_clips_lists_each_clip_with_its_animation(driver, tmp_path):
    from .video_clips import encode

    pytest.importorskip("av")
    (tmp_path / "in").mkdir()
    for name in ("walk", "jump", "run"):
        encode(tmp_path / "in" / f"{name}.mp4", frames=6)
    out = tmp_path / "out"
    result = hookviz_run(
        tmp_path / "in", "--frames", "3", "--resize", "16", "--crop", "16", "--pictures", "cam",
        model="tests.video_clips:video_net", weights=None, out=out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert open_explorer(driver, out / "index.html", "#/?q=alk")  # the name filter
    assert listed(driver) == ["walk"]
    _go(driver, "#/?sort=-name")
    assert listed(driver) == ["walk", "run", "jump"]
    thumbs = _shown(driver)
    assert thumbs == [f"{name}/features.animation.webp" for name in ("walk", "run", "jump")]  # each row's clip, animated
    driver.find_element("css selector", "#list [data-sample=run]").click()
    assert showing(driver, "run") == "run" and driver.execute_script("return location.hash") == "#/sample/run?sort=-name"
    assert driver.find_element("css selector", "img.clip").get_attribute("src").endswith("run/features.animation.webp")
    body = driver.find_element("tag name", "body")
    body.send_keys("j")  # the next one listed
    assert showing(driver, "jump") == "jump" and not driver.find_elements("id", "next")
    body.send_keys("k")
    assert showing(driver, "run") == "run"
    body.send_keys("k")
    assert showing(driver, "walk") == "walk" and not driver.find_elements("id", "prev")
    assert "walk/features.cam.png" in _shown(driver)
    _within(driver, out)


def test_a_model_of_several_inputs_shows_each_input_of_a_sample(driver, tmp_path):
    from hookviz.tasks.segment import Segment

    rgb = _photos(tmp_path / "rgb", ["a/001.png", "a/002.png", "b/003.png"])
    rng = np.random.default_rng(1)
    for key in ("a/001", "a/002", "b/003"):
        (tmp_path / "depth" / key).parent.mkdir(parents=True, exist_ok=True)
        np.save(tmp_path / "depth" / f"{key}.npy", rng.random((32, 40)).astype(np.float32))
    out = tmp_path / "out"
    result = hookviz_run(
        rgb, "--input", f"depth={tmp_path / 'depth'}", "--aligned", "depth", "--task", Segment.name, "--resize", 32,
        "--pictures", "cam", model="tests.multi_models:build_rgbd", weights=None, layer="fusion", out=out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert {row["name"]: row["true_class"] for row in explorer_rows(out)} == {"001": "a", "002": "a", "003": "b"}
    assert open_explorer(driver, out / "index.html", "#/?true_class=a")  # the class folders are the true classes
    assert listed(driver) == ["001", "002"]
    _go(driver, "#/sample/002?true_class=a")
    assert showing(driver, "002") == "002"
    shown = _shown(driver)
    assert {"002/input.jpg", "002/input.depth.jpg", "002/fusion.cam.png"} <= set(shown)  # the depth beside the photo
    alts = driver.execute_script("return Array.from(document.querySelectorAll('.photos img')).map(i => i.alt)")
    assert "input.depth.jpg" in alts
    driver.find_element("tag name", "body").send_keys("\ue012")  # the left arrow
    assert showing(driver, "001") == "001" and not driver.find_elements("id", "prev")
    _within(driver, out)


def test_the_shards_of_a_run_open_as_one_run(driver, tmp_path):
    photos = _photos(tmp_path / "in", [f"p{k}.png" for k in range(4)])
    out = tmp_path / "out"
    for shard in ("1/2", "2/2"):
        result = hookviz_run(photos, "--shard", shard, "--pictures", "cam", layer="features.3", out=out)
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.glob("run-*.json")) == ["run-1-of-2.json", "run-2-of-2.json"]
    rows = explorer_rows(out)
    assert sorted(row["name"] for row in rows) == ["p0", "p1", "p2", "p3"]  # both shards, each sample once
    wanted = rows[0]["predicted"]
    expected = sorted((r for r in rows if r["predicted"] == wanted), key=lambda r: -float(r["confidence"]))
    assert open_explorer(driver, out / "index.html", "#/?predicted=" + wanted + "&sort=-confidence")
    assert listed(driver) == [r["name"] for r in expected]
    assert driver.find_element("id", "shown").get_attribute("data-count") == str(len(expected))
    classes = "return document.querySelectorAll('.counts table.classes tr').length"
    assert driver.execute_script(classes) == 2  # the headings and the one class predicted
    _go(driver, "#/?predicted=no-such-class")
    assert driver.find_element("id", "shown").get_attribute("data-count") == "0"
    assert driver.execute_script(classes) == 0  # no table of bare headings
    _go(driver, "#/?sort=name")
    assert listed(driver) == ["p0", "p1", "p2", "p3"]
    driver.find_element("css selector", "#list [data-sample=p1]").click()
    body = driver.find_element("tag name", "body")
    for name in ("p2", "p3"):  # the next one, whichever shard wrote it
        body.send_keys("j")
        assert showing(driver, name) == name
        assert f"{name}/features.3.cam.png" in _shown(driver)
    _within(driver, out)


def test_a_diff_folder_shows_before_and_after_side_by_side(driver, tmp_path):
    photos = _photos(tmp_path / "in", ["cat.png", "dog.png"])
    base, new = tmp_path / "base", tmp_path / "new"
    for out, target in ((base, "0"), (new, "1")):
        result = hookviz_run(photos, "--target", target, "--pictures", "cam", layer="features.3", out=out)
        assert result.exit_code == 0, result.output
    result = hookviz_cli("diff", base, new)
    assert result.exit_code in (0, 1), result.output  # 1: drift found, as it is
    assert open_explorer(driver, new / "index.html", "#/?target_changed=true")
    assert sorted(listed(driver)) == ["cat", "dog"]  # the target changed for both
    assert driver.find_element("css selector", "select[data-filter=target_changed]").get_attribute("value") == "true"
    _go(driver, "#/sample/dog?target_changed=true")
    assert showing(driver, "dog") == "dog"
    captions = driver.execute_script(
        "return Array.from(document.querySelectorAll('.shown-picture figcaption')).map(f => f.textContent)"
    )
    assert captions[:2] == ["before (baseline)", "after"]
    sources = _shown(driver)
    assert "../base/dog/features.3.cam.png" in sources and "dog/features.3.cam.png" in sources
    assert "target 0 \u2192 1" in driver.find_element("css selector", ".numbers").text
    driver.find_element("tag name", "body").send_keys("\ue00c")  # Escape: back to the list, its filter kept
    assert listing(driver, "#/?target_changed=true")  # drawn after the key
    _within(driver, new, base)


def test_a_samples_top_channels_link_their_pages_of_the_runs_atlas(driver, tmp_path):
    """``hookviz atlas --out DIR``, then ``hookviz run --top-channels 2 --atlas DIR``: the sample's
    page links each channel its prediction rested on to ``#/channel/LAYER/INDEX``, which shows
    that channel of the atlas: its figures and its crops."""
    import json

    from .cli_helpers import TINY_NET

    photos = _photos(tmp_path / "in", ["a/p0.png", "a/p1.png", "b/p2.png", "b/p3.png"], size=(32, 32))
    atlas, out = tmp_path / "atlas", tmp_path / "out"
    made = hookviz_cli("atlas", photos, "--model", TINY_NET, "--weights", "none", "--layer", "act:1", "--top", 2, "--out", atlas)
    assert made.exit_code == 0, made.output
    result = hookviz_run(photos, "--top-channels", 2, "--atlas", atlas, "--pictures", "cam", layer="act:1", out=out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "p2" / "report.json").read_text())
    wanted = [c["channel"] for c in report["layers"][0]["top_channels"]["channels"]]
    assert len(wanted) == 2
    assert open_explorer(driver, out / "index.html", "#/sample/p2")
    assert showing(driver, "p2") == "p2"
    links = driver.find_elements("css selector", ".topchannels a[data-channel]")
    assert [a.get_attribute("href").rsplit("#", 1)[1] for a in links] == [f"/channel/act%3A1/{c}" for c in wanted]
    links[0].click()
    assert showing(driver, f"act:1/{wanted[0]}", "channel") == f"act:1/{wanted[0]}"
    layer = json.loads((atlas / "atlas.json").read_text())["layers"][0]
    item = layer["items"][wanted[0]]
    crops = loaded_images(driver)
    assert [src for src, _ in crops] == ["../atlas/" + t["overlay"] for t in item["top"]] and all(width for _, width in crops)
    # each crop captioned with its path as it lies in the data (a/p0.png), not where the data lies (/tmp/...)
    captions = [f.text for f in driver.find_elements("css selector", ".crops figcaption")]
    shown = [str(Path(t["source"]).relative_to(photos).as_posix()) for t in item["top"]]
    assert [c.split(" \u00b7 ")[0] for c in captions] == shown and str(tmp_path) not in " ".join(captions)
    assert [t["shown"] for t in item["top"]] == shown  # atlas.json's, which the atlas's own pages show too
    assert [f.get_attribute("title") for f in driver.find_elements("css selector", ".crops figure")] == shown
    assert str(tmp_path) not in (out / "explorer-atlas.js").read_text()  # nor in the page's data (a published run)
    page = (atlas / item["page"]).read_text()
    assert all(f">{name}</span>" in page for name in shown)
    mean = driver.find_element("xpath", "//table[@class='figures']//th[text()='mean']/following-sibling::td").text
    assert float(mean) == pytest.approx(item["stats"]["mean"], rel=1e-3)
    driver.find_element("tag name", "body").send_keys("j")
    following = layer["items"][wanted[0] + 1]["index"] if wanted[0] + 1 < len(layer["items"]) else wanted[0]
    assert showing(driver, f"act:1/{following}", "channel") == f"act:1/{following}"
    _within(driver, out, atlas)


def test_a_runs_notebook_display_is_its_explorer_inline(driver, tmp_path, monkeypatch):
    """``hookviz.run(...)`` as a cell's last line: one ``<iframe srcdoc>`` holding the same
    explorer with its data inline, its pictures from the run folder, relative to the notebook."""
    from html.parser import HTMLParser

    import hookviz
    from hookviz.options import LayerOptions, ModelOptions, PictureOptions, RunOptions

    from .cli_helpers import TINY_NET

    photos = _photos(tmp_path / "in", ["one.png", "two.png", "three.png"])
    monkeypatch.chdir(tmp_path)  # the kernel's working folder: the notebook's
    summary = hookviz.run(
        sorted(photos.glob("*.png")),
        ModelOptions(TINY_NET, "none"),
        layers=LayerOptions(("features.3",)),
        pictures=PictureOptions(pictures=("cam",)),
        options=RunOptions(out=tmp_path / "out"),
    )
    markup = summary._repr_html_()

    class Tags(HTMLParser):
        tags: list = []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)

    Tags().feed(markup)
    assert Tags.tags == ["iframe"]  # the page and its data are the frame's text, not the notebook's
    (tmp_path / "notebook.html").write_text(f"<!DOCTYPE html><html><body><h1>a notebook</h1>{markup}</body></html>")
    driver.get("about:blank")
    driver.get_log("performance")
    driver.get((tmp_path / "notebook.html").as_uri())
    driver.switch_to.frame(driver.find_element("css selector", "iframe.hookviz-explorer"))
    try:
        assert driver.execute_script("return window.hookvizExplorer.state.readyMs") is not None
        _go(driver, "#/?q=tw")
        assert listed(driver) == ["two"]
        _go(driver, "#/?sort=-name")
        assert listed(driver) == ["two", "three", "one"]
        assert _shown(driver) == ["out/two/input.jpg", "out/three/input.jpg", "out/one/input.jpg"]
        driver.find_element("css selector", "#list [data-sample=two]").click()
        assert showing(driver, "two") == "two"
        assert "out/two/features.3.cam.png" in _shown(driver)
        driver.find_element("tag name", "body").send_keys("j")
        assert showing(driver, "three") == "three"
    finally:
        driver.switch_to.default_content()
    urls = _within(driver, tmp_path)
    assert not [url for url in urls if "explorer-" in url]  # the data came inline
    assert all(url.startswith((tmp_path / "out").as_uri()) for url in urls if not url.endswith("notebook.html"))


def test_a_vision_language_run_lists_each_photo_with_its_answer_and_shows_each_token(driver, tmp_path):
    """A tiny LLaVA's run: a row per photo (its prompt, its answer as what it predicted, the tokens
    explained), a photo it cannot read listed last as failed; a photo's page shows the strip, then a
    tab per token whose picture and caption carry the token and its probability (report.json's)."""
    import json

    import hookviz

    from .vlm_models import save_llava

    pytest.importorskip("transformers")
    save_llava(tmp_path / "llava")
    photos = _photos(tmp_path / "in", ["two.png"])
    (photos / "bad.png").write_bytes(b"not a photo")
    out = tmp_path / "out"
    result = hookviz_run(
        photos, "--prompt", "describe the photo .", "--answer", "a black cat", "--tokens", "0,2",
        model=f"hf:{tmp_path / 'llava'}", weights=None, out=out,
    )  # fmt: skip
    assert result.exit_code == 1 and "bad.png: not an image format PIL can read" in result.stderr, result.output
    report = json.loads((out / "two" / "report.json").read_text())
    rows = {row["name"]: row for row in explorer_rows(out)}
    assert [rows[n]["status"] for n in ("two", "bad")] == ["done", "failed"]
    assert (rows["two"]["prompt"], rows["two"]["predicted"], rows["two"]["target"]) == (
        "describe the photo .", "a black cat", "a · cat"
    )  # fmt: skip
    jsonschema = pytest.importorskip("jsonschema")
    schema = Path(hookviz.__file__).parent / "schemas"
    jsonschema.validate(json.loads((out / "run.json").read_text()), json.loads((schema / "run.schema.json").read_text()))
    jsonschema.validate(report, json.loads((schema / "vlm_report.schema.json").read_text()))
    assert open_explorer(driver, out / "index.html", "#/")
    assert listed(driver) == ["two", "bad"]  # the failure last
    row = driver.find_element("css selector", "#list [data-sample=two]").text
    assert "prompt describe the photo ." in row and "answered a black cat" in row and "explained a · cat" in row
    assert _shown(driver) == ["two/input.jpg"]  # the photo as the model saw it
    _go(driver, "#/sample/two")
    assert showing(driver, "two") == "two"
    assert _shown(driver) == ["two/input.jpg", "two/tokens.png"]  # the strip first
    cat = report["targets"][1]
    tab = f"'cat' p={cat['probability']:.3f}"
    driver.find_element("css selector", f'.tabs.kinds button[data-kind="{tab}"]').click()
    assert driver.find_element("css selector", ".shown-picture figcaption").text == f"tokens · {tab}"
    assert "two/token2.png" in _shown(driver)
    assert "answer: a black cat" in driver.find_element("css selector", ".numbers").text
    _within(driver, out)
