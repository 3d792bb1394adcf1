"""Every explorer page and JSON API answer, byte for byte, against a snapshot (``view_snapshots.json``).

The JSON API is public (keys, nesting, value types, order) and the pages are what reviewers read: a change to the
view models must leave both as they were. A results store and label store are seeded with records covering every
view (claims matched to the answer and to contexts, errors, skipped metrics, reviews, feedback, a session, a record
without a trace id, one stored before records were kept whole, an empty store), and served over real loopback.

The store stamps records with the time they are stored, so the test pins those stamps in the SQLite file it owns;
what stays volatile (the served port, the per-process anti-forgery token, when agreement was computed) is replaced
by a placeholder before comparing. ``RAGTRACE_UPDATE_SNAPSHOTS=1`` rewrites the snapshot (review the diff).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import ExplorerConfig, ReviewConfig
from ragtrace_collector.explorer.app import Explorer
from ragtrace_collector.explorer.thresholds import Threshold, Thresholds
from ragtrace_collector.explorer.view_models import Backlog
from ragtrace_collector.exporter.prometheus import MetricsEndpoint
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.review.labels import ClaimVerdict, Feedback, LabelStore, Review
from ragtrace_collector.scoring.results_store import ResultsStore

SNAPSHOT = Path(__file__).with_name("view_snapshots.json")
UPDATE = os.environ.get("RAGTRACE_UPDATE_SNAPSHOTS") == "1"
ORIGIN = "http://explorer.test"
T0 = 1735790645.0  # 2025-01-02T04:04:05Z

S1 = "The Aldren kettle has an automatic shut-off."
S2 = "The warranty lasts five years."
S3 = "It comes with 5 lifetime filters."
S4 = "The kettle boils quickly."  # the judge's rephrasing: not verbatim in the answer

THRESHOLDS = Thresholds(
    {
        ("faithfulness", None): Threshold(0.7, True),
        ("faithfulness", "strict"): Threshold(0.9, True),
        ("hallucination", None): Threshold(0.3, False),
        ("context_precision", None): Threshold(0.5, True),
    }
)
LINKS = {"Jaeger": "http://jaeger.invalid/trace/{trace_id}", "Tempo": "https://tempo.invalid/explore?t={trace_id}"}


def tid(c: str) -> str:
    return c * 32


def claim(statement: str, verdict: str | None, reason: str | None = None, evidence: str | None = None, p=None) -> dict:
    out: dict = {"statement": statement, "verdict": verdict}
    if reason:
        out["reason"] = reason
    if evidence:
        out["evidence"] = evidence
    if p is not None:
        out["confidence"] = p
    return out


CLAIMS = [
    claim(
        S1,
        "yes",
        "supported by context #1: '…automatic shut-off…' (P=0.93)",
        "The kettle has an  automatic shut-off.",
        0.93,
    ),
    claim(S2, "no", "contradicted by context #2: '…two years…' (P=0.04)", "the motor is covered for TWO years.", 0.04),
    claim(S3, "idk", "not found in the contexts (P=0.12): numbers not in the contexts: 5"),
    claim(S4, None),
]


def scored(metric: str, score: float, **kw) -> MetricResult:
    return MetricResult(metric=metric, status="scored", score=score, **kw)


def records() -> list[tuple[RagRecord, list[MetricResult], str]]:
    """(record, results, judge) in the order they are stored."""
    claims_record = RagRecord(
        trace_id=tid("a"),
        service="shop-assistant",
        pipeline="support",
        user_input="What does the <Aldren> kettle come with?",
        response=f"{S1} {S2} {S3} Enjoy <b>tea</b> & more.",
        reference="An automatic shut-off and a two-year warranty.",
        retrieved_contexts=[
            {
                "id": "doc-1#0",
                "content": "The kettle has an automatic shut-off. It is <safe>.",
                "score": 0.91,
                "metadata": {"source": "manual.pdf", "page": 3},
            },
            {"id": "doc-2#4", "content": "The motor is covered for two years.", "score": 0.72},
            {"content": "Descale the kettle monthly.", "score": None},
        ],
        model="gpt-4o-mini",
        provider="openai",
        input_tokens=812,
        output_tokens=64,
        ttft_seconds=0.21,
        tpot_seconds=0.012,
        request_duration_seconds=1.734,
        retrieval_duration_seconds=0.05,
        streamed=True,
        session_id="sess-1",
        user_id="alice",
        tags=["beta", "kettles"],
        start_time_unix_nano=int(T0 * 1e9),
    )
    provenance = {
        "judge_model": "local-nli",
        "metric_version": "3",
        "prompt_hash": "9f2c",
        "ragtrace_version": "0.9.0",
        "empty": "",
        "unknown": None,
    }
    claims_results = [
        scored(
            "faithfulness",
            0.25,
            reason="1 of 4 claims supported",
            details={"claims": CLAIMS, "idk_counts_as_supported": False},
            provenance=provenance,
        ),
        scored("hallucination", 0.5, higher_is_better=False, details={"claims": CLAIMS[:2], "unsupported": [S2]}),
        scored("context_precision", 0.5, details={"relevant": [1, 0], "against": "reference"}),
        MetricResult("context_recall", "skipped", reason="no reference"),
        MetricResult("answer_relevancy", "error", reason="judge timed out after 30 s", retryable=True),
        scored("coherence", 4.0, label="good", reason="reads well"),
    ]
    failed = RagRecord(
        trace_id=tid("b"),
        service="docs-bot",
        user_input="Why is my order late?",
        session_id="sess-1",
        user_id="alice",
        error="TimeoutError: the LLM did not answer",
        start_time_unix_nano=int((T0 + 120) * 1e9),
    )
    failed_results = [
        MetricResult("faithfulness", "skipped", reason="no answer"),
        MetricResult("answer_relevancy", "error", reason="no answer to score"),
    ]
    llm_style = RagRecord(
        trace_id=tid("c"),
        service="shop-assistant",
        pipeline="strict",
        user_input="Is the kettle dishwasher safe?",
        response="The kettle is dishwasher safe. It has a shut-off.",
        retrieved_contexts=["Hand-wash only.", "It has a shut-off."],
        user_id="carol",
        streamed=False,
    )
    llm_claims = [
        claim("It has a shut-off.", "yes", "stated", "It has a shut-off."),
        claim("The kettle is dishwasher safe.", "no", "the contexts do not say this"),
        claim("Free shipping.", "idk"),
    ]
    llm_results = [
        scored(
            "hallucination",
            0.34,
            higher_is_better=False,
            details={"claims": llm_claims, "idk_counts_as_supported": True},
        ),
        scored("faithfulness", 0.67),
    ]
    row = RagRecord(id="row-7", pipeline="support", user_input="How long is the warranty?", response="Two years.")
    row_results = [scored("faithfulness", 0.8), scored("answer_relevancy", 0.6)]
    migrated = RagRecord(
        trace_id=tid("d"), service="docs-bot", user_input="Where is the manual?", response="On the website."
    )
    out = [
        (claims_record, claims_results, "local"),
        (failed, failed_results, "local"),
        (llm_style, llm_results, "openai/gpt-4o"),
        (row, row_results, "local"),
        (migrated, [scored("faithfulness", 0.4)], "local"),
    ]
    for i, (c, score) in enumerate(zip(["e", "f", "1", "2", "3", "4"], (0.95, 0.3, 0.85, 0.65, 0.1, 0.75))):
        plain = RagRecord(
            trace_id=tid(c),
            service="docs-bot" if i % 2 else "shop-assistant",
            pipeline="support",
            user_input=f"Question {i}?",
            response=f"Answer {i}.",
            session_id="sess-2" if i < 3 else None,
            user_id="bob",
            start_time_unix_nano=int((T0 + 600 + 60 * i) * 1e9),
        )
        out.append(
            (
                plain,
                [scored("faithfulness", score), scored("hallucination", 1 - score, higher_is_better=False)],
                "local" if i % 3 else "openai/gpt-4o",
            )
        )
    return out


REVIEWS = [
    Review(
        tid("a"),
        "faithfulness",
        "ann",
        "unfaithful",
        comment="<b>wrong</b> warranty",
        reference="Two years.",
        reviewed_at=T0 + 7200,
    ),
    Review(
        tid("a"),
        "faithfulness",
        "bob",
        claims=(ClaimVerdict(S1, "supported"), ClaimVerdict(S2, "contradicted")),
        reviewed_at=T0 + 7300,
    ),
    Review(tid("a"), "hallucination", "ann", "faithful", reviewed_at=T0 + 7400),
    Review(tid("e"), "faithfulness", "ann", "faithful", reviewed_at=T0 + 7500),
    Review(tid("f"), "faithfulness", "cy", "faithful", reviewed_at=T0 + 7600),
    Review("row-7", "faithfulness", "cy", "faithful", reviewed_at=T0 + 7700),
]
FEEDBACK = [
    Feedback(tid("a"), 0.0, "thumbs", comment="nope <i>", source="api", feedback_id="api:1", received_at=T0 + 100),
    Feedback(tid("a"), 1.0, source="sdk", feedback_id="span-1", service="shop-assistant", received_at=T0 + 200),
    Feedback(tid("1"), 0.0, received_at=T0 + 300),
    Feedback(tid("3"), 1.0, received_at=T0 + 400),
]


def seed(path: Path) -> None:
    """Store :func:`records`, pin their stored-at stamps, make one look migrated; add the reviews and feedback."""
    store = ResultsStore(path)
    stored = records()
    for record, results, judge in stored:
        store.add(record, results, judge)
    store.close()
    db = sqlite3.connect(path)
    with db:
        for i, (record, _, _) in enumerate(stored):
            at = T0 + 3600 + 10 * i
            db.execute("UPDATE results SET scored_at = ? WHERE record_key = ?", (at, record.key))
            db.execute(
                "UPDATE records SET scored_at = ?, occurred_at = COALESCE(started_at, ?) WHERE record_key = ?",
                (at, at, record.key),
            )
        db.execute("UPDATE records SET record = '{}' WHERE record_key = ?", (tid("d"),))  # stored before v2
    db.close()
    labels = LabelStore(path)
    for review in REVIEWS:
        labels.add_review(review)
    labels.add_feedback(FEEDBACK)
    labels.close()


@dataclass
class Served:
    explorer: Explorer
    base: str


@asynccontextmanager
async def serve(path: Path, backlog: Callable[[], Backlog] | None) -> AsyncIterator[Served]:
    explorer = Explorer(
        str(path),
        ExplorerConfig(page_size=3, trace_links=LINKS),
        thresholds=THRESHOLDS,
        backlog=backlog,
        review=ReviewConfig(sample_rate=0.5, agreement_window_days=36500, agreement_cache_seconds=3600),
    )
    endpoint = MetricsEndpoint(CollectorRegistry(), "127.0.0.1", 0, routes=[explorer.add_routes])
    await endpoint.start()
    try:
        yield Served(explorer, f"http://127.0.0.1:{endpoint.port}")
    finally:
        await endpoint.shutdown()
        explorer.shutdown(5.0)


FULL_GETS = [
    "/explorer/",
    "/explorer/?sort=worst",
    "/explorer/?sort=worst&metric=faithfulness",
    "/explorer/?service=shop-assistant&limit=2&offset=2",
    "/explorer/?outcome=error&judge=local",
    "/explorer/?pipeline=rare-pipeline",
    "/explorer/?min_score=nope",
    "/explorer/?session=sess-2&min_score=0.2&max_score=0.9&since=2025-01-02T00:00:00Z&until=1900000000&trace_id=",
    *(f"/explorer/records/{k}" for k in (tid("a"), tid("b"), tid("c"), "row-7", tid("d"), tid("1"))),
    f"/explorer/records/{tid('a')}?review=hallucination&reason=sample",
    f"/explorer/records/{tid('a')}?review=nope&reason=nope",
    "/explorer/records/nothing-here",
    "/explorer/sessions/sess-1",
    "/explorer/sessions/sess-2",
    "/explorer/sessions/no-such-session",
    "/explorer/review",
    "/explorer/review?metric=faithfulness&reason=low_score",
    "/explorer/review?metric=hallucination&reason=sample",
    "/explorer/review?metric=faithfulness&reason=feedback&done=1",
    "/explorer/review?metric=no-such-metric",
    "/explorer/agreement",
    "/api/v1/records",
    "/api/v1/records?sort=worst&limit=2",
    "/api/v1/records?sort=worst&metric=hallucination&offset=3&limit=4",
    "/api/v1/records?outcome=skipped",
    "/api/v1/records?user=alice",
    "/api/v1/records?limit=0",
    "/api/v1/records?sort=sideways",
    *(f"/api/v1/records/{k}" for k in (tid("a"), tid("b"), tid("c"), "row-7", tid("d"), tid("1"))),
    "/api/v1/records/nothing-here",
    "/api/v1/sessions/sess-1",
    "/api/v1/sessions/sess-2",
    "/api/v1/sessions/no-such-session",
    "/api/v1/facets",
    "/api/v1/facets?limit=1&q=shop",
    "/api/v1/facets?limit=x",
    "/api/v1/review/queue",
    "/api/v1/review/queue?metric=faithfulness&reason=sample&limit=2",
    "/api/v1/review/queue?metric=hallucination",
    "/api/v1/review/queue?limit=x",
    "/api/v1/agreement",
]
EMPTY_GETS = [
    "/explorer/",
    "/explorer/review",
    "/explorer/agreement",
    "/explorer/sessions/sess-1",
    "/api/v1/records",
    "/api/v1/facets",
    "/api/v1/review/queue",
    "/api/v1/agreement",
    "/api/v1/records/" + tid("a"),
]
CSRF = re.compile(r'name="csrf" value="[0-9a-f]{64}"')


async def agreement_stamps(client: httpx.AsyncClient, base: str) -> dict[str, str]:
    """When agreement was computed, and its window's start: what the agreement answers hold of the clock."""
    data = (await client.get(base + "/api/v1/agreement")).json()
    stamps: dict[str, str] = {}
    for key in ("computed_at", "since"):
        stamps[json.dumps(data[key])] = f'"<{key}>"'
        stamps[data[f"{key}_iso"]] = f"<{key}_iso>"
    return stamps


def answer(response: httpx.Response, base: str, stamps: dict[str, str]) -> dict:
    body = response.content.decode("utf-8").replace(base, ORIGIN)
    for volatile, placeholder in stamps.items():
        body = body.replace(volatile, placeholder)
    body = CSRF.sub('name="csrf" value="<csrf>"', body)
    kept = {"status": response.status_code, "content_type": response.headers.get("Content-Type"), "body": body}
    if "Location" in response.headers:
        kept["location"] = response.headers["Location"]
    return kept


async def collect(tmp_path: Path) -> dict[str, dict]:
    path = tmp_path / "results.sqlite"
    seed(path)
    out: dict[str, dict] = {}
    waiting = Backlog(2, "judge unreachable: connection refused")
    async with serve(path, lambda: waiting) as full, httpx.AsyncClient(timeout=10) as client:
        stamps = await agreement_stamps(client, full.base)
        for target in FULL_GETS:
            out[f"GET {target}"] = answer(await client.get(full.base + target), full.base, stamps)
        # the review form (from the record page, with its anti-forgery token) and where it leads
        page = await client.get(f"{full.base}/explorer/records/{tid('1')}?review=faithfulness")
        token = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert token is not None
        form = {
            "csrf": token.group(1),
            "metric": "faithfulness",
            "verdict": "unfaithful",
            "reviewer": "dee",
            "claim-1": "supported",
            "reason": "feedback",
        }
        posted = await client.post(f"{full.base}/explorer/records/{tid('1')}/review", data=form)
        out[f"POST /explorer/records/{tid('1')}/review"] = answer(posted, full.base, stamps)
        for target in ("/api/v1/review/queue", "/explorer/review?metric=faithfulness"):
            out[f"GET {target} (after the review)"] = answer(await client.get(full.base + target), full.base, stamps)
    empty_path = tmp_path / "empty" / "results.sqlite"
    empty_path.parent.mkdir()
    async with serve(empty_path, None) as empty, httpx.AsyncClient(timeout=10) as client:
        stamps = await agreement_stamps(client, empty.base)
        for target in EMPTY_GETS:
            out[f"GET {target} (empty store)"] = answer(await client.get(empty.base + target), empty.base, stamps)
    return out


async def test_every_page_and_api_answer_matches_its_snapshot(tmp_path: Path) -> None:
    got = await collect(tmp_path)
    if UPDATE:
        SNAPSHOT.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert list(got) == list(expected), "the requests changed: rerun with RAGTRACE_UPDATE_SNAPSHOTS=1 and review"
    changed = [name for name in expected if got[name] != expected[name]]
    if changed:
        first = changed[0]
        diff = difflib.unified_diff(readable(expected[first]), readable(got[first]), "snapshot", "now", lineterm="")
        raise AssertionError(f"{len(changed)} answers changed: {changed}\n{first}:\n" + "\n".join(list(diff)[:80]))


def readable(kept: dict) -> list[str]:
    """An answer as lines to diff: a JSON body indented (its keys in their order), an HTML body as it is."""
    body = kept["body"]
    if "json" in (kept["content_type"] or ""):
        body = json.dumps(json.loads(body), indent=1, ensure_ascii=False)
    head = [f"{k}: {v}" for k, v in kept.items() if k != "body"]
    return head + body.splitlines()


async def test_the_snapshot_covers_every_view() -> None:
    """The seeded store reaches what each view can show (so the snapshot is not vacuous)."""
    snap = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    record = json.loads(snap[f"GET /api/v1/records/{tid('a')}"]["body"])
    assert [c["kind"] for c in record["claims"]] == ["supported", "contradicted", "not_found", "not_found"]
    assert [c["in_answer"] for c in record["claims"]] == [True, True, True, False]
    assert [c["useful"] for c in record["contexts"]] == [True, False, None]
    assert record["contexts"][0]["supports"] == [1] and record["contexts"][1]["evidence_for"] == [2]
    assert {m["status"] for m in record["metrics"]} == {"scored", "skipped", "error"}
    assert {m["side"] for m in record["metrics"]} == {"good", "bad", None}
    assert len(record["reviews"]) == 3 and len(record["feedback"]) == 2 and record["trace_links"]
    assert json.loads(snap[f"GET /api/v1/records/{tid('d')}"]["body"])["contexts_stored"] is False
    queue = json.loads(snap["GET /api/v1/review/queue"]["body"])
    assert all(queue["by_reason"].values()), queue["by_reason"]
    agreement = json.loads(snap["GET /api/v1/agreement"]["body"])
    assert agreement["agreement"] and agreement["labelled"]
    listed = json.loads(snap["GET /api/v1/records"]["body"])
    assert listed["next_offset"] == 3 and listed["waiting"] == 2
    assert snap["GET /explorer/?min_score=nope"]["status"] == 400
    assert snap[f"POST /explorer/records/{tid('1')}/review"]["status"] == 303
    assert 'class="answer"' in snap[f"GET /explorer/records/{tid('a')}"]["body"]
