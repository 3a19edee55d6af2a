"""The explorer (a run folder's index.html) in real headless Chromium, on generated run folders:
filters and sort from the address, the routes, the keyboard, no request outside the folder, a
page that is not blank, a list that draws only what is on screen, escaped names, an atlas's channels."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest

from bench.explorer_scale import generate
from hookviz.runs.explorer import ExplorerRun, write_explorer
from hookviz.runs.sample_table import SampleRow, imagefolder_classes

from .explorer_helpers import (
    browser,
    explorer_data,
    explorer_rows,
    explorer_samples,
    listed,
    listing,
    loaded_images,
    open_explorer,
    requested,
    showing,
)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    generate(out, 300, pictures=True)
    return out


def test_samples_csv_holds_the_explorers_columns_one_row_per_sample(generated):
    rows = explorer_rows(generated)
    assert len(rows) == 300 and rows[0]["name"] == "sample-000000"
    assert {
        "true_class",
        "predicted",
        "confidence",
        "correct",
        "dead",
        "layer3:gradcam:deletion_auc",
        "layer4:gradcam:sanity",
    } <= set(rows[0])
    assert all((row["correct"] == "true") == (row["predicted"] == row["true_class"]) for row in rows)


def test_an_imagefolder_layout_gives_true_classes_and_a_flat_folder_none():
    layout = ["data/tabby/1.png", "data/tabby/2.png", "data/espresso/3.png"]
    assert imagefolder_classes(layout) == {
        "data/tabby/1.png": "tabby",
        "data/tabby/2.png": "tabby",
        "data/espresso/3.png": "espresso",
    }
    assert imagefolder_classes(["photos/a.png", "photos/b.png"]) == {}
    assert imagefolder_classes(["x/tabby/1.png", "y/espresso/2.png"]) == {}  # not one root


def test_the_page_names_a_sample_below_its_data_and_an_absolute_path_outside_it_by_its_file_name():
    from hookviz.runs.sample_table import paths_in_data

    assert paths_in_data(["/home/them/photos/tabby/1.png", "/home/them/photos/cup.png", None]) == ["tabby/1.png", "cup.png", ""]
    assert paths_in_data(["/home/them/photos/tabby/1.png", "/home/them/photos/espresso/2.png"]) == [
        "tabby/1.png",
        "espresso/2.png",
    ]
    assert paths_in_data(["/home/them/1.png", "given/2.png"]) == ["1.png", "given/2.png"]  # no folder holds both


@browser
@pytest.mark.slow  # headless Chromium
def test_filters_and_sort_in_the_address_list_what_they_say(driver, generated):
    rows = {row["name"]: row for row in explorer_rows(generated)}
    wanted = rows["sample-000007"]["predicted"]
    assert open_explorer(driver, generated / "index.html", f"#/?predicted={quote(wanted)}&sort=-confidence")
    expected = sorted((n for n, r in rows.items() if r["predicted"] == wanted), key=lambda n: -float(rows[n]["confidence"]))
    assert listed(driver) == expected and expected
    assert driver.find_element("id", "shown").get_attribute("data-count") == str(len(expected))
    # a range and right/wrong, set from the page's own controls
    driver.execute_script("location.hash = '#/?correct=false&confidence=0.5..0.9&sort=name'")
    count = sum(r["correct"] == "false" and 0.5 <= float(r["confidence"]) <= 0.9 for r in rows.values())
    assert int(driver.find_element("id", "shown").get_attribute("data-count")) == count
    shown = listed(driver)
    assert shown == sorted(shown) and all(rows[n]["correct"] == "false" for n in shown)
    select = driver.find_element("css selector", "select[data-filter=correct]")
    assert select.get_attribute("value") == "false"
    from selenium.webdriver.support.ui import Select

    Select(select).select_by_value("true")
    assert "correct=true" in driver.execute_script("return location.hash")
    assert all(rows[n]["correct"] == "true" for n in listed(driver))


@browser
@pytest.mark.slow
def test_figures_verdicts_and_health_filter_and_the_confusion_table_counts_what_is_listed(driver, generated):
    """A map's faithfulness range and randomisation verdict, a health check and notes filter the list,
    a figure sorts it; the confusion table counts the listed samples, and its cell lists them."""
    from urllib.parse import parse_qs

    rows = {row["name"]: row for row in explorer_rows(generated)}
    figure, verdict = "layer3:gradcam:deletion_auc", "layer4:gradcam:sanity"
    route = f"#/?{quote(figure)}=0.2..0.6&{quote(verdict)}=passes&dead=0&notes=0&sort=-{quote(figure)}"
    assert open_explorer(driver, generated / "index.html", route)
    kept = [n for n, r in rows.items() if 0.2 <= float(r[figure]) <= 0.6 and r[verdict] == "passes" and r["dead"] == "0"]
    kept = sorted((n for n in kept if rows[n]["notes"] == "0"), key=lambda n: -float(rows[n][figure]))
    assert kept and driver.find_element("id", "shown").get_attribute("data-count") == str(len(kept))
    assert listed(driver) == kept[: len(listed(driver))]
    cell = driver.find_element("css selector", "table.confusion td.diag a")
    wanted = {k: v[0] for k, v in parse_qs(cell.get_attribute("href").split("?", 1)[1]).items()}
    klass = wanted["true_class"]
    assert wanted["predicted"] == klass
    both = [n for n in kept if rows[n]["true_class"] == rows[n]["predicted"] == klass]
    assert int(cell.text) == len(both)
    cell.click()  # the cell lists its samples, the other filters kept (drawn once the address changed)
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 5).until(lambda d: "predicted=" in d.execute_script("return location.hash"))
    driver.execute_script("window.hookvizExplorer.route()")
    assert driver.find_element("id", "shown").get_attribute("data-count") == str(len(both))
    assert sorted(listed(driver)) == sorted(both)


@browser
@pytest.mark.slow
def test_a_sample_route_steps_with_the_keyboard_in_the_lists_order(driver, generated):
    from selenium.webdriver.common.keys import Keys

    rows = explorer_rows(generated)
    order = [r["name"] for r in sorted(rows, key=lambda r: -float(r["confidence"]))]
    assert open_explorer(driver, generated / "index.html", f"#/sample/{order[3]}?sort=-confidence")
    body = driver.find_element("tag name", "body")
    assert showing(driver, order[3]) == order[3]
    body.send_keys(Keys.ARROW_RIGHT)
    assert showing(driver, order[4]) == order[4]
    body.send_keys(Keys.ARROW_LEFT)
    assert showing(driver, order[3]) == order[3]  # each key's route drawn before the next key (a loaded machine is slow)
    body.send_keys(Keys.ARROW_LEFT)
    assert showing(driver, order[2]) == order[2]
    # the layers switch in place, the picture follows
    assert driver.find_element("id", "picture").get_attribute("src").endswith(f"{order[2]}/layer3.summary.png")
    body.send_keys(Keys.ARROW_DOWN)
    body.send_keys("2")
    assert driver.find_element("id", "picture").get_attribute("src").endswith(f"{order[2]}/layer4.cam.png")
    body.send_keys(Keys.ESCAPE)
    assert listing(driver, "#/?sort=-confidence")[:1] == [order[0]]


@browser
@pytest.mark.slow
def test_the_page_asks_for_nothing_outside_its_folder_and_is_not_blank(driver, generated, tmp_path):
    from PIL import Image

    driver.get_log("performance")  # what came before
    assert open_explorer(driver, generated / "index.html", "#/?sort=name")
    driver.execute_script("location.hash = '#/sample/sample-000001'")
    driver.find_element("css selector", ".sample")
    driver.save_screenshot(str(tmp_path / "sample.png"))
    requests = [json.loads(entry["message"])["message"] for entry in driver.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in requests if m["method"] == "Network.requestWillBeSent"]
    folder = generated.as_uri() + "/"
    assert urls and all(url.startswith(folder) for url in urls), [u for u in urls if not u.startswith(folder)]
    assert any(url.endswith("explorer-samples-0.js") for url in urls)
    open_explorer(driver, generated / "index.html", "#/")
    driver.save_screenshot(str(tmp_path / "list.png"))
    for name in ("list.png", "sample.png"):
        with Image.open(tmp_path / name) as shot:
            colours = shot.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50  # text, thumbnails, controls: not a blank page
        assert max(count for count, _ in colours) < 0.95 * shot.width * shot.height


@browser
@pytest.mark.slow
def test_a_zipped_run_folder_opens_where_it_is_unzipped(driver, generated, tmp_path):
    """Issue 40 item 1: a run folder sent as a zip works from wherever it is unpacked: its list, a
    sample's pictures, every request inside the unpacked folder (none to where the run was made)."""
    import shutil

    out = tmp_path / "unzipped"
    shutil.unpack_archive(shutil.make_archive(str(tmp_path / "run"), "zip", generated), out)
    assert open_explorer(driver, out / "index.html", "#/?sort=-name")
    assert listed(driver)[:2] == ["sample-000299", "sample-000298"]
    driver.execute_script("location.hash = '#/sample/sample-000298?sort=-name'")
    assert showing(driver, "sample-000298") == "sample-000298"
    images = loaded_images(driver)
    assert images and [src for src, width in images if not width] == []
    assert "sample-000298/layer3.summary.png" in [src for src, _ in images]
    # its numbers beside its pictures: the prediction's list, the objective, its row's figures (issue 40 item 3)
    row = next(r for r in explorer_rows(generated) if r["name"] == "sample-000298")
    numbers = driver.find_element("css selector", ".numbers")
    assert [li.text for li in numbers.find_elements("css selector", ".top5 li")] == [
        f"{row['predicted']} ({float(row['confidence']):.3f})"
    ]
    assert "objective: logit" in numbers.text
    figure = numbers.find_element("xpath", ".//th[text()='layer3:gradcam:deletion_auc']/following-sibling::td")
    assert float(figure.text) == pytest.approx(float(row["layer3:gradcam:deletion_auc"]), rel=1e-3)
    urls = requested(driver)
    assert urls and [url for url in urls if not url.startswith(out.as_uri() + "/")] == []


@browser
@pytest.mark.slow
def test_ten_thousand_samples_draw_only_the_rows_on_screen(driver, tmp_path):
    generate(tmp_path, 10_000, pictures=False)
    assert open_explorer(driver, tmp_path / "index.html")
    assert driver.find_element("id", "shown").get_attribute("data-count") == "10000"
    drawn = len(listed(driver))
    assert 5 < drawn < 40
    driver.execute_script(
        "document.getElementById('list').scrollTop = 84 * 5000;"
        "document.getElementById('list').dispatchEvent(new Event('scroll'));"
    )
    assert "sample-005000" in listed(driver) and len(listed(driver)) < 40


FAILURES = ("CUDA out of memory", "cannot read the image: truncated file")


def _compared_run(out: Path) -> None:
    """A compared run of 60 generated samples: some failed (two messages), some not done, the
    others with a change from the baseline (its size, a changed target, drift findings)."""
    import random

    rng = random.Random(40)
    found = ExplorerRun()
    for i in range(60):
        status = "failed" if i % 7 == 3 else ("not_done" if i % 11 == 5 else "done")
        done = status == "done"
        values = {
            "name": f"s{i:02d}",
            "image": f"s{i:02d}.png",
            "status": status,
            "task": "classify",
            "predicted": "tabby" if done else "",
            "confidence": rng.random() if done else None,
            "drift": rng.random() if done else None,
            "target_changed": rng.random() < 0.3 if done else None,
            "drift_findings": rng.randrange(3) if done else None,
            "notes": 0,
            "failure": FAILURES[i % 2] if status == "failed" else "",
        }
        found.table.rows.append(SampleRow(values, {}))
        found.details.append(None)
        found.thumbs.append("")
    write_explorer(out, found, {"title": "compared", "layers": [], "compared": True}, None, "<h1>compared</h1>")


def _set_range(driver, key: str, low: str, high: str) -> None:
    """Type ``low`` and ``high`` into the page's range boxes of ``key`` (each applies as it loses focus)."""
    from selenium.webdriver.common.keys import Keys

    for side, text in (("min", low), ("max", high)):
        box = driver.find_element("css selector", f"input[data-filter='{key}:{side}']")
        box.clear()
        box.send_keys(text, Keys.TAB)


def _view(driver) -> list[str]:
    """Every sample the list holds (drawn on screen or not), in its order."""
    return driver.execute_script("const s = window.hookvizExplorer.state; return Array.from(s.view, i => s.cols.name.data[i]);")


def _count_is(driver, expected: list[str]) -> bool:
    """Whether the list says it holds ``expected``'s samples, within 5 s (its route is drawn after the change)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, 5, poll_frequency=0.02).until(
            lambda d: d.find_element("id", "shown").get_attribute("data-count") == str(len(expected))
        )
    except TimeoutException:
        return False
    return True


@browser
@pytest.mark.slow
def test_the_failures_and_drift_filters_set_in_the_page_list_what_samples_csv_says(driver, tmp_path):
    """Issue 40 item 2: failures and the drift against the baseline, set with the page's own controls."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    _compared_run(tmp_path)
    rows = {row["name"]: row for row in explorer_rows(tmp_path)}
    assert open_explorer(driver, tmp_path / "index.html", "#/")
    Select(driver.find_element("css selector", "select[data-filter=status]")).select_by_value("failed")
    failed = [n for n, r in rows.items() if r["status"] == "failed"]
    assert failed and _count_is(driver, failed) and _view(driver) == failed
    box = driver.find_element("css selector", "input[data-filter=failure]")
    box.send_keys("MEMORY", Keys.TAB)
    oom = [n for n in failed if "memory" in rows[n]["failure"].lower()]
    assert 0 < len(oom) < len(failed) and _count_is(driver, oom) and _view(driver) == oom
    assert "status=failed" in driver.execute_script("return location.hash")
    # the drift: a range of the largest relative change, a changed target, drift findings
    driver.find_element("css selector", "a.clear").click()
    assert _count_is(driver, list(rows))  # the clear list drawn before the next control reads the address
    _set_range(driver, "drift", "0.25", "0.8")
    Select(driver.find_element("css selector", "select[data-filter=target_changed]")).select_by_value("false")
    Select(driver.find_element("css selector", "select[data-filter=drift_findings]")).select_by_value("1..")
    drifted = [
        n
        for n, r in rows.items()
        if r["drift"] and 0.25 <= float(r["drift"]) <= 0.8 and r["target_changed"] == "false" and int(r["drift_findings"]) >= 1
    ]
    assert drifted and _count_is(driver, drifted) and _view(driver) == drifted
    assert all(not rows[n]["failure"] for n in drifted)
    # two controls changed at once (a user's own browser test): the second keeps the first
    driver.find_element("css selector", "a.clear").click()
    assert _count_is(driver, list(rows))
    driver.execute_script(
        "for (const [key, value] of [['target_changed', 'true'], ['drift_findings', '0']]) {"
        "  const box = document.querySelector(`[data-filter=${key}]`); box.value = value;"
        "  box.dispatchEvent(new Event('change')); }"
    )
    changed = [n for n, r in rows.items() if r["target_changed"] == "true" and r["drift_findings"] == "0"]
    assert changed and _count_is(driver, changed) and _view(driver) == changed


def _hostile_run(out: Path) -> str:
    name = "<img src=x onerror=window.__pwned=1>"
    found = ExplorerRun()
    for folder, klass in ((name, "<script>window.__pwned=2</script>"), ("plain", "tabby")):
        values = {
            "name": folder,
            "image": f"{folder}.png",
            "status": "done",
            "task": "classify",
            "true_class": klass,
            "predicted": klass,
            "target": klass,
            "confidence": 0.5,
            "correct": True,
            "notes": 1,
        }
        found.table.rows.append(SampleRow(values, {}))
        found.details.append(
            {
                "image": f"{folder}.png",
                "heading": f"target: {klass}",
                "items": [f"{klass} (0.500)"],
                "notes": ['"><svg onload=window.__pwned=3>'],
                "objective": "logit",
                "photos": [],
                "clip": None,
                "layers": [
                    {
                        "name": "<b>l</b>",
                        "type": "",
                        "note": "",
                        "pictures": [],
                        "channels": [[3, 0.5, "<img src=x onerror=window.__pwned=5>"]],
                    }
                ],
            }
        )
        found.thumbs.append("")
    write_explorer(out, found, {"title": "</title><script>window.__pwned=4</script>", "layers": []}, None, "<h1>hostile</h1>")
    return name


@browser
@pytest.mark.slow
def test_names_from_users_files_are_text_and_cannot_run_script(driver, tmp_path):
    name = _hostile_run(tmp_path)
    assert open_explorer(driver, tmp_path / "index.html", "#/?true_class=" + quote("<script>window.__pwned=2</script>"))
    assert listed(driver) == [name]
    assert driver.find_element("css selector", "#list [data-sample] b").text == name
    driver.execute_script("location.hash = arguments[0]", "#/sample/" + quote(name, safe=""))
    assert driver.find_element("css selector", ".sample").get_attribute("data-sample") == name
    assert '"><svg onload=window.__pwned=3>' in driver.find_element("css selector", ".notes").text
    assert "<img src=x onerror=window.__pwned=5>" in driver.find_element("css selector", ".topchannels").text
    assert driver.execute_script("return window.__pwned") is None
    assert driver.execute_script("return document.querySelectorAll('#app script, #app svg, #app img[src=x]').length") == 0
    # the same run in a notebook's frame (hookviz.show_run)
    import hookviz

    (tmp_path / "notebook.html").write_text("<!DOCTYPE html><body>" + hookviz.show_run(tmp_path)._repr_html_() + "</body>")
    driver.get((tmp_path / "notebook.html").as_uri())
    driver.switch_to.frame(driver.find_element("css selector", "iframe.hookviz-explorer"))
    try:
        driver.execute_script("location.hash = arguments[0]; window.hookvizExplorer.route();", "#/sample/" + quote(name, safe=""))
        assert driver.find_element("css selector", ".sample").get_attribute("data-sample") == name
        assert driver.execute_script("return window.__pwned") is None
        assert driver.execute_script("return document.querySelectorAll('#app script, #app svg, #app img[src=x]').length") == 0
    finally:
        driver.switch_to.default_content()
    assert driver.execute_script("return window.__pwned") is None


def _rows_under(out: Path, data: Path, images: list[str]) -> None:
    """A run folder's explorer listing ``images`` (paths below ``data``, absolute, as a run records them)."""
    found = ExplorerRun()
    for image in images:
        values = {"name": Path(image).stem, "image": str(data / image), "status": "done", "task": "classify"}
        found.table.rows.append(SampleRow(values, {}))
        found.details.append(None)
        found.thumbs.append("")
    write_explorer(out, found, {"title": "paths", "layers": []}, None, "<h1>paths</h1>")


@browser
@pytest.mark.slow
def test_the_name_filter_finds_a_name_or_a_path_in_the_data_not_the_folders_above_it(driver, tmp_path):
    """``q`` searches each sample's name and its path as it lies in the data (``tabby/walk.png``):
    not the folders above the data, which every sample shares (a run given ``/tmp/pytest-.../holiday``
    listed every sample for ``q=holiday``, or ``q=tmp``)."""
    _rows_under(tmp_path, tmp_path / "holiday", ["tabby/walk.png", "tabby/jump.png", "espresso/cup.png"])
    for query, expected in (("holiday", []), ("tmp", []), ("tabby", ["jump", "walk"]), ("cup", ["cup"]), ("SO/c", ["cup"])):
        assert open_explorer(driver, tmp_path / "index.html", "#/?q=" + quote(query))
        assert sorted(listed(driver)) == expected, query
    row = driver.find_element("css selector", "#list [data-sample=cup]")
    assert row.get_attribute("title") == "espresso/cup.png" and "cup espresso/cup.png" in row.text  # where it lies, shown


def _atlas(out: Path) -> None:
    """A small atlas folder written by hand after ATLAS_CONTRACT.md (what ``hookviz atlas`` writes)."""
    from PIL import Image

    folder = out / "atlas"
    items = []
    for index in range(3):
        top = []
        for k in range(2):
            crop = f"crops/layer3/{index}/{k}.png"
            (folder / crop).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (32, 32), (80 * index, 100 * k, 200)).save(folder / crop)
            top.append(
                {"source": f"photos/{index}-{k}.jpg", "score": 3.0 - k, "position": [1, 2], "box": [0, 0, 32, 32], "crop": crop}
            )
        items.append(
            {
                "index": index,
                "stats": {
                    "mean": 0.1 * index,
                    "dead": 0.05,
                    "max_quantiles": {"0.5": 1.0, "0.9": 2.0, "0.99": 3.0},
                    "classes": [{"class": "tabby", "mean_max": 2.5, "count": 4}],
                },
                "top": top,
                "label": {"concept": f"stripes {index}", "score": 0.8, "runner_up": "fur", "runner_up_score": 0.4},
                "page": f"channels/layer3/{index}.html",
            }
        )
    atlas = {
        "schema": "hookviz/atlas/1",
        "model": "generated",
        "weights": "none",
        "rank": "max",
        "top": 2,
        "samples": 6,
        "relevance": None,
        "layers": [{"name": "layer3", "channels": 3, "grid": [7, 7], "items": items}],
    }
    (folder / "atlas.json").write_text(json.dumps(atlas))


@browser
@pytest.mark.slow
def test_an_atlas_channel_has_its_own_address(driver, tmp_path):
    from hookviz.runs.gallery import read_atlas

    _atlas(tmp_path)
    found = ExplorerRun()
    atlas = read_atlas(tmp_path)
    assert atlas is not None and atlas["folder"] == "atlas"
    write_explorer(tmp_path, found, {"title": "atlas", "layers": ["layer3"]}, atlas, "<h1>atlas</h1>")
    assert open_explorer(driver, tmp_path / "index.html", "#/channel/layer3/1")
    page = driver.find_element("css selector", ".channel")
    assert page.get_attribute("data-channel") == "layer3/1" and "stripes 1" in page.text
    crops = driver.execute_script(
        "const imgs = Array.from(document.querySelectorAll('.crops img'));"
        "return imgs.map(i => [i.getAttribute('src'), i.complete && i.naturalWidth]);"
    )
    assert [src for src, _ in crops] == ["atlas/crops/layer3/1/0.png", "atlas/crops/layer3/1/1.png"]
    assert all(width == 32 for _, width in crops)
    driver.find_element("tag name", "body").send_keys("j")
    assert showing(driver, "layer3/2", "channel") == "layer3/2"  # drawn after the key


def _photos(folder: Path, names: list[str]) -> None:
    from PIL import Image

    for k, name in enumerate(names):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 32), (40 * k, 90, 160)).save(folder / name)


@pytest.mark.slow  # a run, with its rendering workers
def test_labels_csv_gives_each_sample_its_true_class(tmp_path):
    from .cli_helpers import hookviz_run

    _photos(tmp_path / "in", ["one.png", "two.png", "three.png"])
    labels = tmp_path / "labels.csv"
    labels.write_text("image,label\none.png,0\ntwo,<b>1</b>\n")
    result = hookviz_run(tmp_path / "in", "--labels", labels, "--pictures", "summary", layer="features.3", out=tmp_path / "out")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in explorer_rows(tmp_path / "out")}
    assert [rows[n]["true_class"] for n in ("one", "two", "three")] == ["0", "<b>1</b>", ""]
    assert rows["one"]["correct"] == ("true" if rows["one"]["predicted"] == "0" else "false") and rows["three"]["correct"] == ""
    images = {i["output"]: i for i in json.loads((tmp_path / "out" / "run.json").read_text())["images"]}
    assert images["one"]["label"] == "0" and "label" not in images["three"]


@pytest.mark.slow  # a run, with its rendering workers
def test_an_imagefolder_run_takes_its_class_folders_as_true_classes(tmp_path):
    from .cli_helpers import hookviz_run

    _photos(tmp_path / "data", ["tabby/a.png", "espresso/b.png"])
    result = hookviz_run(tmp_path / "data", "--pictures", "summary", layer="features.3", out=tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert {row["name"]: row["true_class"] for row in explorer_rows(tmp_path / "out")} == {"a": "tabby", "b": "espresso"}
    # the page names each photo as it lies in the data, as its list shows it: a run folder copied to a
    # colleague or published does not show (or leak) the folders above the data (/home/them/...)
    data, details = explorer_data(tmp_path / "out"), explorer_samples(tmp_path / "out")
    images = next(column["data"] for column in data["columns"] if column["name"] == "image")
    assert sorted(images) == ["espresso/b.png", "tabby/a.png"]
    assert {name: d["image"] for name, d in details.items()} == {"a": "tabby/a.png", "b": "espresso/b.png"}
    page = "".join(p.read_text() for p in (tmp_path / "out").glob("*.js")) + (tmp_path / "out" / "index.html").read_text()
    assert str(tmp_path / "data") not in page.replace("\\\\", "\\")


@pytest.mark.parametrize("text", [None, "image,label\nonly-a-name\n"])
def test_a_labels_file_that_cannot_be_read_is_refused_in_one_line(tmp_path, text):
    from .cli_helpers import hookviz_run

    _photos(tmp_path / "in", ["one.png"])
    labels = tmp_path / "labels.csv"
    if text is not None:
        labels.write_text(text)
    result = hookviz_run(tmp_path / "in", "--labels", labels, layer="features.3", out=tmp_path / "out")
    assert result.exit_code == 2 and "--labels" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out" / "run.json").exists()


def test_a_labels_file_giving_one_image_two_classes_is_refused_in_one_line(tmp_path):
    """The last row won silently: samples.csv called the image right or wrong by a class the file also denied."""
    from .cli_helpers import hookviz_run

    _photos(tmp_path / "in", ["one.png"])
    labels = tmp_path / "labels.csv"
    labels.write_text("image,label\none.png,tabby\ntwo.png,espresso\none.png,espresso\none.png,espresso\n")
    result = hookviz_run(tmp_path / "in", "--labels", labels, layer="features.3", out=tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"hookviz: error: --labels {labels}: rows 1 and 3 give one.png two classes (tabby, espresso); keep one"
    )
    assert not (tmp_path / "out").exists()


def test_samples_parquet_holds_the_same_table_typed(generated):
    pq = pytest.importorskip("pyarrow.parquet")

    table = pq.read_table(generated / "samples.parquet")
    rows = explorer_rows(generated)
    assert table.column_names == list(rows[0]) and table.num_rows == len(rows)
    types = {
        name: str(table.schema.field(name).type) for name in ("name", "confidence", "correct", "dead", "layer3:gradcam:sanity")
    }
    assert types == {
        "name": "string",
        "confidence": "double",
        "correct": "bool",
        "dead": "int64",
        "layer3:gradcam:sanity": "string",
    }
    assert table.column("confidence").to_pylist() == [float(row["confidence"]) for row in rows]
    assert table.column("correct").to_pylist() == [row["correct"] == "true" for row in rows]


PARQUET_CHECK = """
import io, sys
from hookviz.runs.sample_table import SampleRow, SampleTable, write_parquet
table = SampleTable([
    SampleRow({"name": "cät", "confidence": 0.5, "correct": True, "dead": 3}, {"input:lrp:road": 0.25}),
    SampleRow({"name": None, "confidence": None, "correct": False, "dead": None}, {}),
    SampleRow({"name": "", "confidence": 7, "correct": None, "dead": 0}, {"input:lrp:road": None}),
])
stream = io.BytesIO()
write_parquet(table, stream)
print("pandas" in sys.modules)
import pyarrow as pa, pyarrow.parquet as pq
kinds = {"str": pa.string(), "float": pa.float64(), "int": pa.int64(), "bool": pa.bool_()}
columns = table.columns()
built = pa.Table.from_arrays([pa.array(table.column(n), type=kinds[k]) for n, k in columns], names=[n for n, _ in columns])
print(pq.read_table(io.BytesIO(stream.getvalue())).equals(built), flush=True)
import os
os._exit(0)  # as the hookviz command ends: arrow's thread pool can abort a normal exit (apache/arrow#34314)
"""


def test_samples_parquet_is_written_without_importing_pandas_and_holds_what_pa_array_would():
    pytest.importorskip("pyarrow")
    from tests.conftest import python_output

    # pa.array imports pandas (0.4 s of CPU, ~45 MB at the end of a run) to ask whether a list is a pandas object
    assert python_output(PARQUET_CHECK).split() == ["False", "True"]


def test_show_run_refuses_a_folder_without_an_explorer_in_one_line_and_escapes_the_page(tmp_path):
    import hookviz
    from hookviz.errors import UsageError

    with pytest.raises(UsageError, match="holds no run's explorer") as caught:
        hookviz.show_run(tmp_path)
    assert "\n" not in str(caught.value)
    name = _hostile_run(tmp_path)
    markup = hookviz.show_run(tmp_path, base="runs/x")._repr_html_()
    assert markup.startswith('<iframe class="hookviz-explorer"') and markup.count("<") == 2 and markup.endswith("</iframe>")
    assert "<script>window.__pwned" not in markup and "&lt;script&gt;" in markup
    import html as html_module

    document = html_module.unescape(markup[markup.index('srcdoc="') + 8 : -len('"></iframe>')])
    assert 'window.HOOKVIZ_BASE="runs/x/";' in document and "explorer-data.js" not in document.split("<script>", 2)[1][:40]
    assert document.count("</script>") == 4  # the base, the table, the one details file, the page's script: no name ends one
    assert json.dumps(name)[1:-1] in document
