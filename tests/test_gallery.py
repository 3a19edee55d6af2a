"""The gallery of a run, rendered in a real headless browser."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.chromium import chromium
from hookviz.options import LayerOptions, ModelOptions, RunOptions, TargetOptions
from hookviz.runs.runner import run

from .explorer_helpers import browser, explorer_pictures, explorer_rows, explorer_text


@pytest.fixture(scope="module")
def gallery_run(tmp_path_factory, lite0):
    from .conftest import SAMPLES

    out = tmp_path_factory.mktemp("gallery")
    broken = out.parent / "broken.png"
    broken.write_text("not a picture")
    summary = run(
        [SAMPLES / "cat.png", SAMPLES / "coffee.png", broken],
        ModelOptions("efficientnet_lite0"),
        layers=LayerOptions(("_blocks.-1", "_fc")),
        target=TargetOptions(topk=2),
        options=RunOptions(out=out / "run"),
    )
    return out / "run", summary


@pytest.mark.slow  # a run of several images with pictures: about 4-6 s of CPU
def test_gallery_lists_every_image_layer_picture_and_failure(gallery_run):
    out, summary = gallery_run
    page = (out / "index.html").read_text(encoding="utf-8")
    pictures = explorer_pictures(out)
    assert [row["name"] for row in explorer_rows(out)] == ["cat", "coffee", "broken"]
    for name in ("cat", "coffee"):
        for picture in (
            "_blocks.15.summary.png",
            "_blocks.15.channels.png",
            "_blocks.15.cam.png",
            "_blocks.15.cam_topk.png",
            "_fc.summary.png",
            "input.jpg",
        ):
            assert f"{name}/{picture}" in pictures
    assert "espresso" in explorer_text(out) and "broken.png" in page and "not an image format" in page
    for text in (page, (out / "explorer-data.js").read_text()):
        assert "http://" not in text and "https://" not in text  # self-contained


def _loaded_images(page: Path, profile: Path, screenshot: Path, routes: tuple[str, ...] = ("#/",)) -> list:
    """``[src, complete, naturalWidth]`` of every image the explorer at ``page`` shows in headless
    Chromium: its list (``routes``) and, for each sample route, every picture of every layer, switched in place."""
    driver = chromium(profile, height=3000, wait=5)
    images: dict = {}
    try:
        for route in routes:
            driver.get(page.as_uri() + route)
            if route.startswith("#/sample/"):
                driver.find_element("css selector", ".sample")
                for layer in range(len(driver.find_elements("css selector", ".tabs.layers button"))):
                    driver.find_elements("css selector", ".tabs.layers button")[layer].click()
                    for kind in range(len(driver.find_elements("css selector", ".tabs.kinds button"))):
                        driver.find_elements("css selector", ".tabs.kinds button")[kind].click()
                        _collect(driver, images)
            _collect(driver, images)
        driver.save_screenshot(str(screenshot))
        return [[src, *state] for src, state in images.items()]
    finally:
        driver.quit()


def _collect(driver, images: dict) -> None:
    import time

    script = "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]);"
    deadline = time.time() + 30
    while True:
        found = driver.execute_script(script)
        if all(complete for _, complete, _ in found) or time.time() > deadline:
            break
        time.sleep(0.1)
    images.update({src: (complete, width) for src, complete, width in found})


@pytest.mark.slow  # over 1.4 s of CPU, measured
@browser
def test_gallery_renders_in_headless_chromium_without_broken_images(gallery_run, tmp_path):
    out, _ = gallery_run
    routes = ("#/", "#/sample/cat", "#/sample/coffee")
    images = _loaded_images(out / "index.html", tmp_path / "profile", tmp_path / "gallery.png", routes)
    assert len(images) == 2 * (1 + 4 + 1)  # photo, four pictures of _blocks.15, one of _fc
    broken = [src for src, complete, width in images if not complete or width == 0]
    assert broken == []


@pytest.mark.slow
@browser
def test_a_compared_run_shows_its_diff_pictures_in_headless_chromium(gallery_run, tmp_path):
    from hookviz.compare.diffing import diff_runs

    out, _ = gallery_run
    new = tmp_path / "new"
    shutil.copytree(out, new)
    diff = diff_runs(out, new)
    assert diff.findings == () and (new / "coffee" / "_blocks.15.diff.png").exists()
    routes = ("#/", "#/sample/cat", "#/sample/coffee")
    images = _loaded_images(new / "index.html", tmp_path / "profile", tmp_path / "gallery.png", routes)
    assert len(images) == 2 * (1 + 4 + 1 + 2) + 2 * (4 + 1)  # a diff picture of each layer, and the baseline's pictures
    assert [src for src, complete, width in images if not complete or width == 0] == []
    assert sum(src.endswith(".diff.png") for src, _, _ in images) == 4
    assert sum(src.startswith("../") for src, _, _ in images) == 2 * (4 + 1)  # before, beside after
