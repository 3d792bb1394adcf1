"""Debian's chromium, headless, driven by Selenium through Debian's chromedriver: nothing is downloaded
(an explicit driver path, so Selenium Manager never runs).

    with headless_chromium() as driver:           # skips without chromium/chromedriver/selenium (fails under CI)
        driver.get(url)
        text = wait_shown(driver, "main", "Paris", ("μ 0.66", "μ 0.67"))   # every item shown (a tuple: any of)
        screenshot(driver, REPO / "test-output" / "x.png")

``wait_shown`` waits for what a person would read, not for the page load: the text of every element
matching a CSS selector must hold each item; on timeout it fails with what is missing and what is shown.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.binaries import require_in_ci

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

Shown = str | tuple[str, ...]  # a text, or alternatives of which one must be shown


@contextmanager
def headless_chromium(width: int = 1600, height: int = 1000, flags: Sequence[str] = ()) -> Iterator[Any]:
    """A Selenium driver of headless chromium with its own throwaway profile (and any more ``flags``)."""
    chromium = require_in_ci("chromium", "chromium")
    chromedriver = require_in_ci("chromedriver", "chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    with tempfile.TemporaryDirectory(prefix="ragtrace-chromium-") as profile:
        for flag in (*CHROMIUM_FLAGS, *flags, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
        driver.implicitly_wait(0)
        try:
            yield driver
        finally:
            driver.quit()


def _missing(text: str, items: tuple[Shown, ...]) -> list[Shown]:
    return [i for i in items if not any(t in text for t in ((i,) if isinstance(i, str) else i))]


def wait_shown(driver: Any, css: str, *items: Shown, timeout: float = 60.0) -> str:
    """The visible text of the elements matching ``css`` once it holds every item (a tuple: one of them)."""
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    last = ""

    def probe(_: Any) -> str | None:
        nonlocal last
        try:  # a re-rendering page detaches elements between finding and reading them: look again
            last = "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, css))
        except WebDriverException:
            return None
        return last if last and not _missing(last, items) else None

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25).until(probe)
    except TimeoutException:
        raise AssertionError(
            f"{css!r} never showed {_missing(last, items)} in {timeout}s; it shows:\n{last[:3000]}"
        ) from None


def screenshot(driver: Any, path: Path) -> Path:
    """A PNG of the window (what a person sees), at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 10_000, path
    return path
