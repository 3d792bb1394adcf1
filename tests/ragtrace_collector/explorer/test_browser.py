"""The records explorer in a real browser: Debian's chromium, headless, driven by Selenium through Debian's
chromedriver (nothing downloaded), against a real collector fed by the example app (see conftest).

What a person sees is asserted: the sign-in, the list and its filters, worst-first order, an unsupported
claim marked in the answer, a skipped metric's reason, a conversation's turns, text from traffic shown as
text. Screenshots go to test-output/explorer/. Without chromium these tests skip (``make test-deps``
installs it); under CI they fail instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import headless_chromium
from tests.support.explorer_stack import TOKEN, Fed
from tests.support.paths import REPO

SHOTS = REPO / "test-output" / "explorer"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium(1400, 1000) as driver:
        yield driver


@pytest.fixture(scope="module")
def signed_in(browser: Any, fed: Fed) -> Any:
    """The browser after signing in through the login form, as a person would."""
    from selenium.webdriver.common.by import By

    browser.get(fed.base + "/explorer/")
    assert "/explorer/login" in browser.current_url  # the token is configured: nothing shows without it
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    follow(browser, browser.find_element(By.CSS_SELECTOR, "form.login button"))
    assert browser.current_url.rstrip("/").endswith("/explorer"), browser.current_url
    return browser


def screenshot(browser: Any, name: str) -> Path:
    """A full-page PNG in test-output/explorer/."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, max(1000, min(int(height) + 40, 6000)))
    path = SHOTS / f"{name}.png"
    assert browser.save_screenshot(str(path)) and path.stat().st_size > 10_000
    browser.set_window_size(1400, 1000)
    return path


GREEN, RED, AMBER = "230, 244, 234", "252, 232, 230", "254, 243, 214"  # good, bad, not-found backgrounds


def background(element: Any) -> str:
    """An element's computed background colour as ``r, g, b`` (chromium says rgba(...))."""
    value = element.value_of_css_property("background-color")
    return ", ".join(value[value.index("(") + 1 : value.index(")")].split(", ")[:3])


def follow(browser: Any, element: Any) -> None:
    """Click something that loads a page, and wait for the new page to finish loading.

    The old page is marked in its window object; the new page has a fresh one. Asking a document in transition
    anything can fail ("Node ... does not belong to the document"), so such errors mean "not yet"."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_script("window.__ragtraceLeaving = true")
    element.click()
    WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,)).until(
        lambda b: b.execute_script(
            "return window.__ragtraceLeaving === undefined && document.readyState === 'complete'"
        )
    )


def rows(browser: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, "table#records tr.record")


def count_text(browser: Any) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, "count").text


def service_of(row: Any) -> str:
    from selenium.webdriver.common.by import By

    return row.find_elements(By.TAG_NAME, "td")[1].text.splitlines()[0]


def test_the_list_shows_the_records_newest_first_with_coloured_chips(signed_in: Any, fed: Fed):
    from selenium.webdriver.common.by import By

    b = signed_in
    b.get(fed.base + "/explorer/")
    assert count_text(b).startswith("8 records · 1–4")
    newest_first = list(reversed(fed.traces.values()))
    assert [r.get_attribute("data-trace-id") for r in rows(b)] == newest_first[:4]
    healthy = rows(b)[3]  # shop-5: a healthy answer
    assert len(healthy.find_elements(By.CSS_SELECTOR, ".chip")) == 6
    faith = healthy.find_element(By.CSS_SELECTOR, ".chip[data-metric=faithfulness]")
    assert "good" in faith.get_attribute("class").split() and faith.text.endswith("1.00")
    assert background(faith) == GREEN  # above 0.7, the alerts' threshold
    screenshot(b, "records-list")
    follow(b, b.find_element(By.ID, "next"))
    assert count_text(b).startswith("8 records · 5–8")
    assert [r.get_attribute("data-trace-id") for r in rows(b)] == newest_first[4:]
    degraded = rows(b)[0].find_element(By.CSS_SELECTOR, ".chip[data-metric=faithfulness]")  # shop-4
    assert "bad" in degraded.get_attribute("class").split() and background(degraded) == RED


def test_filters_narrow_the_list(signed_in: Any, fed: Fed):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    b = signed_in
    b.get(fed.base + "/explorer/")
    Select(b.find_element(By.NAME, "service")).select_by_visible_text("docs-bot")
    follow(b, b.find_element(By.ID, "apply"))
    assert count_text(b).startswith("3 records")
    assert {service_of(r) for r in rows(b)} == {"docs-bot"}

    b.find_element(By.NAME, "user").send_keys("alice")  # the user filter too: docs-bot has no alice
    follow(b, b.find_element(By.ID, "apply"))
    assert count_text(b).startswith("0 records") and b.find_element(By.ID, "empty").is_displayed()

    b.get(fed.base + "/explorer/")
    Select(b.find_element(By.NAME, "metric")).select_by_visible_text("faithfulness")
    b.find_element(By.NAME, "max_score").send_keys("0.6")
    Select(b.find_element(By.NAME, "sort")).select_by_value("worst")
    follow(b, b.find_element(By.ID, "apply"))
    assert count_text(b).startswith("2 records")
    shown = {r.get_attribute("data-trace-id") for r in rows(b)}
    assert shown == {fed.traces["shop-2"], fed.traces["shop-4"]}
    for row in rows(b):
        chip = row.find_element(By.CSS_SELECTOR, ".chip[data-metric=faithfulness]")
        assert "bad" in chip.get_attribute("class").split()
        assert background(chip) == RED  # under 0.7

    b.get(fed.base + "/explorer/")
    Select(b.find_element(By.NAME, "outcome")).select_by_visible_text("skipped")
    follow(b, b.find_element(By.ID, "apply"))
    assert count_text(b).startswith("1 record ")
    (row,) = rows(b)
    skipped = row.find_element(By.CSS_SELECTOR, ".chip[data-metric=context_recall]")
    assert skipped.text.endswith("skipped") and "reference" in skipped.get_attribute("title")


def test_a_record_marks_its_unsupported_claim(signed_in: Any, fed: Fed):
    from selenium.webdriver.common.by import By

    b = signed_in
    b.get(fed.base + "/explorer/?sort=worst&metric=faithfulness")
    follow(b, rows(b)[0].find_element(By.CSS_SELECTOR, "td.question a"))  # the worst record, by its link
    assert b.find_element(By.ID, "trace-id").text in (fed.traces["shop-2"], fed.traces["shop-4"])

    marked = b.find_elements(By.CSS_SELECTOR, "#answer a.claim:not(.kind-supported)")
    assert marked, b.find_element(By.ID, "answer").get_attribute("outerHTML")
    invented = next(m for m in marked if "Niels Bohr" in m.text)
    # the invented claim is not in the contexts: "not found" where the judge says so, else "unsupported"
    kind = invented.get_attribute("data-kind")
    assert kind in ("not_found", "unsupported"), kind
    assert background(invented) == (AMBER if kind == "not_found" else RED)
    assert invented.find_element(By.TAG_NAME, "sup").text  # its footnote number
    invented.click()  # to its entry in the claims list: verdict, evidence, reason
    entry = b.find_element(By.CSS_SELECTOR, invented.get_attribute("hash"))
    assert entry.find_element(By.CLASS_NAME, "verdict-badge").text == kind.replace("_", " ").upper()
    assert "Niels Bohr" in entry.find_element(By.TAG_NAME, "q").text
    assert entry.find_element(By.CLASS_NAME, "evidence").text.startswith("evidence:")
    assert "not in the contexts" in entry.find_element(By.CLASS_NAME, "reason").text
    legend = b.find_element(By.ID, "legend").text
    assert legend.startswith("supported contradicted not found"), legend
    supported = b.find_elements(By.CSS_SELECTOR, "#answer a.claim.kind-supported")
    assert supported and background(supported[0]) == GREEN

    contexts = b.find_elements(By.CSS_SELECTOR, "#contexts li.context")
    assert [c.get_attribute("id") for c in contexts] == ["context-1", "context-2", "context-3"]
    assert all("retrieval score" in c.text for c in contexts)
    assert b.find_elements(By.CSS_SELECTOR, "#contexts .badge.useful, #contexts .badge.not-useful")
    faith = b.find_element(By.CSS_SELECTOR, "#metrics tr[data-metric=faithfulness]")
    assert "bad" in faith.get_attribute("class").split() and "min 0.70" in faith.text
    latency = b.find_element(By.ID, "latency").text
    assert "time to first token" in latency and "ragtrace/extractive-v1" in latency
    link = b.find_element(By.LINK_TEXT, "Jaeger")
    assert link.get_attribute("href").endswith("/trace/" + b.find_element(By.ID, "trace-id").text)
    screenshot(b, "record-unsupported-claim")


def test_a_skipped_metric_shows_its_reason(signed_in: Any, fed: Fed):
    from selenium.webdriver.common.by import By

    b = signed_in
    b.get(fed.base + f"/explorer/records/{fed.traces['shop-3']}")
    row = b.find_element(By.CSS_SELECTOR, "#metrics tr[data-metric=context_recall]")
    cells = row.find_elements(By.TAG_NAME, "td")
    assert cells[1].text == "skipped" and cells[2].text == "–"
    assert "missing input: reference" in cells[4].text


def test_a_session_shows_its_turns_with_scores(signed_in: Any, fed: Fed):
    from selenium.webdriver.common.by import By

    b = signed_in
    b.get(fed.base + f"/explorer/records/{fed.traces['shop-2']}")
    follow(b, b.find_element(By.ID, "session-link"))
    assert b.find_element(By.ID, "session-id").text == "sess-1"
    turns = b.find_elements(By.CSS_SELECTOR, "#turns li.turn")
    assert [t.get_attribute("data-trace-id") for t in turns] == [fed.traces[n] for n in ("shop-1", "shop-2", "shop-3")]
    for turn, name in zip(turns, ("shop-1", "shop-2", "shop-3")):
        assert fed.turns[name].question in turn.text
        assert len(turn.find_elements(By.CSS_SELECTOR, ".chip")) == 6
    bad = turns[1].find_element(By.CSS_SELECTOR, ".chip[data-metric=faithfulness]")
    assert "bad" in bad.get_attribute("class").split()
    screenshot(b, "session")


def test_text_from_traffic_is_shown_never_run(signed_in: Any, fed: Fed):
    from selenium.webdriver.common.by import By

    b = signed_in
    b.get(fed.base + f"/explorer/records/{fed.traces['hostile']}")
    assert b.find_element(By.CSS_SELECTOR, "#question p.text").text == fed.turns["hostile"].question
    assert "pwned" not in b.title
    assert not b.find_elements(By.ID, "injected")  # the <img> stayed text
    assert b.execute_script("return document.scripts.length") == 0
