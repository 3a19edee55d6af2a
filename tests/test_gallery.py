"""The gallery of a run, rendered in a real headless browser."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hookviz.options import LayerOptions, ModelOptions, RunOptions, TargetOptions
from hookviz.runs.runner import run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


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
    assert page.count("<tr><td") == 2
    for name in ("cat", "coffee"):
        for picture in (
            "_blocks.15.summary.png",
            "_blocks.15.channels.png",
            "_blocks.15.cam.png",
            "_blocks.15.cam_topk.png",
            "_fc.summary.png",
            "input.jpg",
        ):
            assert f'href="{name}/{picture}"' in page
    assert "espresso" in page and "broken.png" in page and "not an image format" in page
    assert "http://" not in page and "https://" not in page  # self-contained


def _loaded_images(page: Path, profile: Path, screenshot: Path) -> list:
    """``[src, complete, naturalWidth]`` of every image of ``page`` in headless Chromium."""
    import time

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,6000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(page.as_uri())
        script = (
            "const images = Array.from(document.images);"
            "images.forEach(i => i.loading = 'eager');"
            "return images.map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]);"
        )
        deadline = time.time() + 30
        while True:
            images = driver.execute_script(script)
            if all(complete for _, complete, _ in images) or time.time() > deadline:
                break
            time.sleep(0.2)
        driver.save_screenshot(str(screenshot))
        return images
    finally:
        driver.quit()


@pytest.mark.slow  # over 1.4 s of CPU, measured
@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
def test_gallery_renders_in_headless_chromium_without_broken_images(gallery_run, tmp_path):
    out, _ = gallery_run
    images = _loaded_images(out / "index.html", tmp_path / "profile", tmp_path / "gallery.png")
    assert len(images) == 2 * (1 + 4 + 1)  # photo, four pictures of _blocks.15, one of _fc
    broken = [src for src, complete, width in images if not complete or width == 0]
    assert broken == []


@pytest.mark.slow
@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")
def test_a_compared_run_shows_its_diff_pictures_in_headless_chromium(gallery_run, tmp_path):
    from hookviz.compare.diffing import diff_runs

    out, _ = gallery_run
    new = tmp_path / "new"
    shutil.copytree(out, new)
    diff = diff_runs(out, new)
    assert diff.findings == () and (new / "coffee" / "_blocks.15.diff.png").exists()
    images = _loaded_images(new / "index.html", tmp_path / "profile", tmp_path / "gallery.png")
    assert len(images) == 2 * (1 + 4 + 1 + 2)  # and a diff picture of each layer
    assert [src for src, complete, width in images if not complete or width == 0] == []
    assert sum(src.endswith(".diff.png") for src, _, _ in images) == 4
