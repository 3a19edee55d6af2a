"""What a run's explorer (index.html and its data files) holds, read back for tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.chromium import CHROMEDRIVER, CHROMIUM, chromium as headless_chromium


def explorer_samples(out: Path) -> dict[str, dict | None]:
    """Each listed sample's details (``explorer-samples-K.js``), by folder name, in the list's order."""
    names = [row["name"] for row in explorer_rows(out)]
    details: list = []
    for k in range(len(list(out.glob("explorer-samples-*.js")))):
        text = (out / f"explorer-samples-{k}.js").read_text(encoding="ascii")
        details += json.loads(text[text.index("]=") + 2 :].rstrip().rstrip(";"))
    return dict(zip(names, details, strict=True))


def explorer_data(out: Path) -> dict:
    """``explorer-data.js``: the run and the sample table as the page reads them."""
    text = (out / "explorer-data.js").read_text(encoding="ascii")
    return json.loads(text[text.index("=") + 1 :].rstrip().rstrip(";"))


def explorer_rows(out: Path) -> list[dict]:
    """``samples.csv``'s rows, in the list's order."""
    with open(out / "samples.csv", encoding="utf-8", newline="") as stream:
        return list(csv.DictReader(stream))


def explorer_pictures(out: Path) -> dict[str, str]:
    """Every picture the explorer shows, ``FOLDER/FILE`` -> what it is (its caption)."""
    found = {}
    for name, details in explorer_samples(out).items():
        if details is None:
            continue
        if details["clip"]:
            found[f"{name}/{details['clip']}"] = "animation"
        found.update({f"{name}/{file}": alt for file, alt in details["photos"]})
        for layer in details["layers"]:
            found.update({f"{name}/{file}": label for label, file in layer["pictures"]})
        for _, file in (details.get("change") or {}).get("layers", []):
            found[f"{name}/{file}"] = "change"
    return found


def explorer_text(out: Path) -> str:
    """The page and its data, as text (the heading, the table, every sample's details)."""
    parts = [(out / "index.html").read_text(encoding="utf-8"), (out / "samples.csv").read_text(encoding="utf-8")]
    parts += [json.dumps(d, ensure_ascii=False) for d in explorer_samples(out).values()]
    return "\n".join(parts)


# ---------------------------------------------------------------- in headless Chromium

#: Skips a test where Debian's chromium and chromium-driver are not installed.
browser = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver")


def chromium(profile: Path):
    """A headless Chromium (selenium) that logs its requests; the caller quits it."""
    return headless_chromium(profile, log_requests=True, wait=5)  # a sample's details load after its route


def open_explorer(driver, page: Path, route: str = "#/") -> bool:
    """Open ``page`` (a run's index.html) at ``route``; whether the explorer started."""
    driver.get("about:blank")
    driver.get_log("performance")  # what came before
    driver.get(page.as_uri() + route)
    return driver.execute_script("return window.hookvizExplorer && window.hookvizExplorer.state.readyMs") is not None


def showing(driver, expected: str, what: str = "sample") -> str | None:
    """The sample (or ``what="channel"``) the page shows, once it is ``expected`` (a key's or a
    link's route is drawn after its event): 5 s at most."""
    import time

    script = f"const s = document.querySelector('.{what}'); return s && s.getAttribute('data-{what}');"
    deadline, found = time.time() + 5, None
    while time.time() < deadline:
        found = driver.execute_script(script)
        if found == expected:
            break
        time.sleep(0.02)
    return found


def listing(driver, route: str) -> list[str]:
    """``listed`` once the page's address is ``route`` and its list is drawn (a key's or a link's
    route is drawn after its event): 5 s at most, ``[]`` when it is not."""
    import time

    deadline = time.time() + 5
    while time.time() < deadline:
        found = listed(driver) if driver.execute_script("return location.hash") == route else []
        if found:
            return found
        time.sleep(0.02)
    return []


def listed(driver) -> list[str]:
    """The ``data-sample`` of each row drawn in the list, top to bottom."""
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#list [data-sample]')).map(a => [a.getAttribute('data-sample'), a.offsetTop]);"
    )
    return [name for name, _ in sorted(rows, key=lambda row: row[1])]


def requested(driver) -> list[str]:
    """Every URL the page asked for since ``open_explorer``."""
    messages = [json.loads(entry["message"])["message"] for entry in driver.get_log("performance")]
    return [m["params"]["request"]["url"] for m in messages if m["method"] == "Network.requestWillBeSent"]


def loaded_images(driver) -> list[list]:
    """``[src, naturalWidth]`` of every image on the page, once each has loaded or failed (10 s at most)."""
    import time

    script = "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth]);"
    deadline = time.time() + 10
    found = driver.execute_script(script)
    while not all(complete for _, complete, _ in found) and time.time() < deadline:
        time.sleep(0.05)
        found = driver.execute_script(script)
    return [[src, width] for src, _, width in found]
