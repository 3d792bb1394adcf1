"""The quality loop in a real browser (Debian's chromium, headless, through Selenium): a reviewer signs in with a
review token, starts the review queue with Enter and labels twenty records with the keyboard alone — the focused
button (Enter), Tab to the next one, an access key to skip — then reads the agreement page, whose counts must be
exactly the verdicts given. Screenshots go to test-output/explorer/ (review-queue, review-record, agreement)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.ragtrace_collector.explorer.test_browser import follow, screenshot
from tests.support.browser import headless_chromium, wait_shown
from tests.support.explorer_stack import Fed
from tests.support.review_stack import READ, REVIEW, bearer, review_collector

N = 22
REVIEWS = 20


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    # every record in the random sample: the queue offers all of them, in hash order
    with review_collector(tmp_path_factory.mktemp("review-browser"), N, sample_rate=1.0) as fed:
        yield fed


@pytest.fixture(scope="module")
def reviewer(stack: Fed) -> Iterator[Any]:
    """A browser signed in with the review token through the login form."""
    from selenium.webdriver.common.by import By

    with headless_chromium(1400, 1000) as driver:
        driver.get(stack.base + "/explorer/review")
        assert "/explorer/login" in driver.current_url
        driver.find_element(By.NAME, "token").send_keys(REVIEW)
        follow(driver, driver.find_element(By.CSS_SELECTOR, "form.login button"))
        assert "/explorer/review" in driver.current_url, driver.current_url
        yield driver


def focused_id(driver: Any) -> str:
    return str(driver.switch_to.active_element.get_attribute("id"))


def wait_for_record(driver: Any, previous: str | None, timeout: float = 20.0) -> str:
    """The trace id of the record page the browser shows once it left ``previous``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        url = driver.current_url
        if "/explorer/records/" in url:
            current = url.split("/explorer/records/")[1].split("?")[0]
            if current != previous and driver.find_elements("id", "verdict-faithful"):
                return current
        elif "done=1" in url:
            return ""
        time.sleep(0.05)
    raise AssertionError(f"still at {driver.current_url}")


def test_twenty_records_labelled_by_keyboard_then_agreement(stack: Fed, reviewer: Any):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    b = reviewer
    text = wait_shown(b, "main", "Review queue", f"{N} records to review", "Start reviewing")
    assert "in the random sample" in text
    screenshot(b, "review-queue")
    assert focused_id(b) == "start"  # the queue page opens with its start link focused: Enter begins
    b.switch_to.active_element.send_keys(Keys.ENTER)
    current = wait_for_record(b, None)
    # the first record: the reviewer names themself once (remembered for the next forms)
    assert focused_id(b) == "verdict-faithful"
    b.find_element(By.NAME, "reviewer").send_keys("ann")
    b.find_element(By.ID, "verdict-faithful").send_keys("")  # focus back on the first button
    screenshot(b, "review-record")

    verdicts: dict[str, tuple[bool, bool]] = {}  # trace id -> (human says bad, judge says bad)
    skipped = None
    step = 0
    while len(verdicts) < REVIEWS:
        assert current, "the queue ran out before twenty reviews"
        step += 1
        assert focused_id(b) == "verdict-faithful", f"step {step}: focus on {focused_id(b)!r}"
        chip = b.find_element(By.CSS_SELECTOR, '.chip[data-metric="faithfulness"]')
        judge_bad = "bad" in str(chip.get_attribute("class")).split()
        if step == 3 and skipped is None:  # skip one with its access key (Alt+S)
            ActionChains(b).key_down(Keys.ALT).send_keys("s").key_up(Keys.ALT).perform()
            skipped = current
        else:
            human_bad = judge_bad if step % 4 else not judge_bad  # the reviewer disagrees with every fourth call
            if human_bad:  # Tab moves to "unfaithful"; Enter presses it
                b.switch_to.active_element.send_keys(Keys.TAB)
                assert focused_id(b) == "verdict-unfaithful"
            b.switch_to.active_element.send_keys(Keys.ENTER)
            verdicts[current] = (human_bad, judge_bad)
        current = wait_for_record(b, current)

    stored = {}
    for trace_id in [*verdicts, skipped]:
        record = httpx.get(stack.base + f"/api/v1/records/{trace_id}", headers=bearer(READ), timeout=10).json()
        stored[trace_id] = [(r["reviewer"], r["verdict"]) for r in record["reviews"]]
    assert stored[skipped] == []  # skipped: nothing stored
    for trace_id, (human_bad, _) in verdicts.items():
        assert stored[trace_id] == [("ann", "unfaithful" if human_bad else "faithful")], trace_id

    # the agreement: exactly the verdicts given, against the judge's calls the chips showed
    tally = {
        "tp": sum(h and j for h, j in verdicts.values()),
        "fn": sum(h and not j for h, j in verdicts.values()),
        "fp": sum(j and not h for h, j in verdicts.values()),
        "tn": sum(not h and not j for h, j in verdicts.values()),
    }
    report = httpx.get(stack.base + "/api/v1/agreement", headers=bearer(READ), timeout=10).json()
    row = next(r for r in report["agreement"] if r["metric"] == "faithfulness" and r["population"] == "sample")
    assert row["n"] == REVIEWS and {k: row["confusion"][k] for k in tally} == tally
    b.find_element(By.ID, "nav-agreement").click()
    shown = wait_shown(b, "main", "Judge vs reviewers", "Random sample", "Cohen's kappa", "best threshold")
    assert f"n = {REVIEWS}" in shown
    cells = b.find_elements(By.CSS_SELECTOR, '.population[data-population="sample"] table.confusion td')
    assert [int(c.text) for c in cells] == [tally["tp"], tally["fn"], tally["fp"], tally["tn"]]
    screenshot(b, "agreement")
    # the queue now holds the two records left: the skipped one and the one never reached
    b.get(stack.base + "/explorer/review")
    wait_shown(b, "#queue-count", f"{N - REVIEWS} records to review", f"{REVIEWS} reviewed already")
