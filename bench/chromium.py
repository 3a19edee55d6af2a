"""Headless Chromium driven by selenium: the one set-up of the explorer's browser tests
(tests/explorer_helpers.py, tests/test_gallery.py) and of bench/explorer_scale.py.

Debian's chromium and chromium-driver (``/usr/bin/chromium``, ``/usr/bin/chromedriver``); the
caller quits the driver it gets.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["CHROMIUM", "CHROMEDRIVER", "FLAGS", "chromium"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
#: No first-run pages, no background requests (a test checks that the page asks for nothing
#: outside its folder), no sandbox (a container's root).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium(profile: Path | None = None, *, height: int = 1000, log_requests: bool = False, wait: float = 0.0):
    """A headless Chromium 1400 pixels wide and ``height`` high.

    Args:
        profile: its user data folder (``None``: a fresh one of Chromium's own).
        log_requests: keep the performance log, whose ``Network.requestWillBeSent`` lists each request.
        wait: the seconds ``find_element`` waits for an element to appear (selenium's implicit wait).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM or "/usr/bin/chromium"
    for flag in (*FLAGS, f"--window-size=1400,{height}"):
        options.add_argument(flag)
    if profile is not None:
        options.add_argument(f"--user-data-dir={profile}")
    if log_requests:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    found = webdriver.Chrome(service=Service(CHROMEDRIVER or "/usr/bin/chromedriver"), options=options)
    found.implicitly_wait(wait)
    return found
