"""The record page's claims by verdict: supported, contradicted, not found (and unsupported where a judge's ``no``
does not say which), rendered from a results store without a running collector."""

from __future__ import annotations

import html as html_text
import re
from pathlib import Path

from ragtrace_collector.config import ExplorerConfig
from ragtrace_collector.explorer.app import Explorer
from ragtrace_collector.explorer.thresholds import Thresholds
from ragtrace_collector.scoring.options import ScoringOptions
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.claim_verdicts import (
    CONTRADICTED,
    CONTRADICTED_REASON,
    NOT_FOUND,
    NOT_FOUND_REASON,
    RECORD,
    SUPPORTED,
    scored,
)


def page(tmp_path: Path, results: list, judge: str = "local") -> tuple[dict, str]:
    """The record's detail view (what the API returns) and its page's HTML."""
    path = tmp_path / "results.sqlite"
    store = ResultsStore(path)
    store.add(RECORD, results, judge)
    store.close()
    explorer = Explorer(str(path), ExplorerConfig(), thresholds=Thresholds())
    try:
        view = explorer._detail(RECORD.trace_id or "")
        assert view is not None
        return view.to_json(), explorer.env.get_template("record.html").render(r=view)
    finally:
        explorer.shutdown()


def claim_items(html: str) -> list[tuple[str, str, str]]:
    """Each entry of the claims list as (data-kind, badge word, text of the entry without tags)."""
    found = re.findall(
        r'<li class="claim-item [^"]*" id="claim-\d+" data-verdict="\w+" data-kind="(\w+)">(.*?)</li>', html, re.S
    )
    out = []
    for kind, body in found:
        badge = re.search(r'<span class="verdict-badge">(.*?)</span>', body)
        assert badge is not None
        out.append((kind, badge.group(1), html_text.unescape(" ".join(re.sub(r"<[^>]+>", " ", body).split()))))
    return out


def test_the_record_page_names_each_verdict(tmp_path: Path) -> None:
    view, html = page(tmp_path, scored())
    assert [(c["statement"], c["verdict"], c["kind"]) for c in view["claims"]] == [
        (SUPPORTED, "yes", "supported"),
        (CONTRADICTED, "no", "contradicted"),
        (NOT_FOUND, "idk", "not_found"),
    ]
    items = claim_items(html)
    assert [(kind, word) for kind, word, _ in items] == [
        ("supported", "supported"),
        ("contradicted", "contradicted"),
        ("not_found", "not found"),
    ]
    # each with the judge's reason as it gave it
    assert "reason: " + CONTRADICTED_REASON in items[1][2] and "reason: " + NOT_FOUND_REASON in items[2][2]
    assert items[1][2].endswith("contradicted by context #2")  # the context holding its evidence, linked
    assert items[0][2].endswith("supported by context #1")
    # the claims marked in the answer by the same classes the stylesheet colours
    for kind in ("supported", "contradicted", "not_found"):
        assert re.search(rf'<a href="#claim-\d" class="claim verdict-\w+ kind-{kind}"', html), kind
    legend = re.search(r'<p class="legend" id="legend">(.*?)</p>', html, re.S)
    assert legend is not None
    assert re.findall(r">([^<]+)</span>", legend.group(1)) == ["supported", "contradicted", "not found"]
    for word in ("undecided", ">unsupported<"):
        assert word not in html


def test_a_no_that_does_not_say_contradicted_is_unsupported_and_the_legend_says_so(tmp_path: Path) -> None:
    view, html = page(tmp_path, scored(llm_style=True), judge="openai/gpt-4o")
    assert [c["kind"] for c in view["claims"]] == ["supported", "unsupported", "unsupported"]
    assert [word for _, word, _ in claim_items(html)] == ["supported", "unsupported", "unsupported"]
    legend = re.search(r'<p class="legend" id="legend">(.*?)</p>', html, re.S)
    assert legend is not None
    assert re.findall(r">([^<]+)</span>", legend.group(1)) == ["supported", "contradicted", "not found", "unsupported"]


def test_not_found_counted_as_supported_says_both(tmp_path: Path) -> None:
    results = scored(options=ScoringOptions(idk_counts_as_supported=True))
    view, html = page(tmp_path, results)
    not_found = view["claims"][2]
    assert (not_found["kind"], not_found["supported"]) == ("not_found", True)
    kind, word, text = claim_items(html)[2]
    assert (kind, word) == ("not_found", "not found") and "(counted as supported)" in text


def test_the_stylesheet_colours_every_kind() -> None:
    css = (Path(__file__).parents[3] / "collector/ragtrace_collector/explorer/static/explorer.css").read_text()
    for kind in ("supported", "contradicted", "not_found", "unsupported"):
        assert f".claim.kind-{kind} " in css and f"li.kind-{kind}" in css, kind
