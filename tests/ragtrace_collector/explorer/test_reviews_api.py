"""Reviews, feedback, the review queue and agreement over real loopback HTTP, against a real collector fed by the
example app: who may write, what bad input gets, and what the pages show of it (escaped)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.support.explorer_stack import TOKEN, Fed
from tests.support.review_stack import INGEST, READ, REVIEW, bearer, review_collector

N = 8
UNKNOWN = "0" * 31 + "1"  # well-formed, never sent
HOSTILE = "<script>alert('pwned')</script><img src=x onerror=alert(1)> looks wrong"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    with review_collector(tmp_path_factory.mktemp("reviews-api"), N, sample_rate=0.5) as fed:
        yield fed


def post(fed: Fed, path: str, body: object = None, token: str | None = REVIEW, **kwargs: object) -> httpx.Response:
    headers = {**(bearer(token) if token else {}), **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.post(fed.base + path, json=body, headers=headers, timeout=10, **kwargs)  # type: ignore[arg-type]


def trace(fed: Fed, i: int) -> str:
    return fed.traces[f"r{i}"]


def test_a_review_needs_a_review_token(stack: Fed):
    path = f"/api/v1/records/{trace(stack, 1)}/reviews"
    body = {"metric": "faithfulness", "verdict": "faithful", "reviewer": "ann"}
    missing = post(stack, path, body, token=None)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert post(stack, path, body, token="wrong-token-0123456789").status_code == 401
    for token in (READ, INGEST):  # a read-only or an ingest token
        refused = post(stack, path, body, token=token)
        assert refused.status_code == 403 and "may not review" in refused.json()["error"]
    assert post(stack, path, body, token=REVIEW).status_code == 201
    assert post(stack, path, {**body, "reviewer": "root"}, token=TOKEN).status_code == 201  # bearer: every scope


def test_a_duplicate_review_replaces_the_reviewers_verdict(stack: Fed):
    path = f"/api/v1/records/{trace(stack, 2)}/reviews"
    first = post(stack, path, {"metric": "faithfulness", "verdict": "faithful", "reviewer": "bob"})
    assert first.status_code == 201 and first.json()["created"] is True
    again = post(stack, path, {"metric": "faithfulness", "verdict": "unfaithful", "reviewer": "bob"})
    assert again.status_code == 200 and again.json()["replaced"] is True
    record = httpx.get(stack.base + f"/api/v1/records/{trace(stack, 2)}", headers=bearer(READ), timeout=10).json()
    assert [(r["reviewer"], r["verdict"], r["unfaithful"]) for r in record["reviews"]] == [("bob", "unfaithful", True)]


def test_claim_level_verdicts(stack: Fed):
    claims = [{"statement": "Helium was found in 1868.", "verdict": "supported"}, {"statement": "x", "verdict": "no"}]
    answer = post(
        stack,
        f"/api/v1/records/{trace(stack, 3)}/reviews",
        {"metric": "faithfulness", "verdict": claims, "reviewer": "cy"},
    )
    assert answer.status_code == 201, answer.text
    stored = answer.json()["review"]
    assert stored["verdict"] is None and stored["unfaithful"] is True
    assert [c["verdict"] for c in stored["claims"]] == ["supported", "contradicted"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"metric": "faithfulness", "verdict": "maybe", "reviewer": "ann"}, "verdict must be one of"),
        ({"metric": "faithfulness", "reviewer": "ann"}, "give a verdict"),
        ({"verdict": "faithful", "reviewer": "ann"}, "metric must be"),
        ({"metric": "faithfulness", "verdict": "faithful", "reviewer": " "}, "reviewer must name"),
        ({"metric": "faithfulness", "verdict": [{"statement": "s", "verdict": "sure"}], "reviewer": "a"}, "claims[0]"),
        (["not", "an", "object"], "JSON object"),
    ],
)
def test_a_bad_review_gets_400_saying_why(stack: Fed, body: object, message: str):
    answer = post(stack, f"/api/v1/records/{trace(stack, 4)}/reviews", body)
    assert answer.status_code == 400 and message in answer.json()["error"], answer.text


def test_unknown_records_oversized_and_malformed_bodies(stack: Fed):
    body = {"metric": "faithfulness", "verdict": "faithful", "reviewer": "ann"}
    assert post(stack, f"/api/v1/records/{UNKNOWN}/reviews", body).status_code == 404
    assert post(stack, "/api/v1/records/not-a-trace/reviews", body).status_code == 404
    huge = {**body, "comment": "x" * 70_000}  # past review.max_body_bytes (64 KiB here)
    assert post(stack, f"/api/v1/records/{trace(stack, 4)}/reviews", huge).status_code == 413
    raw = httpx.post(
        stack.base + f"/api/v1/records/{trace(stack, 4)}/reviews",
        content=b"{not json",
        headers=bearer(REVIEW),
        timeout=10,
    )
    assert raw.status_code == 400 and "JSON" in raw.json()["error"]
    surrogate = b'{"metric": "faithfulness", "verdict": "faithful", "reviewer": "ann", "comment": "x \\ud800 y"}'
    lone = httpx.post(
        stack.base + f"/api/v1/records/{trace(stack, 4)}/reviews", content=surrogate, headers=bearer(REVIEW), timeout=10
    )
    assert lone.status_code == 400 and "Unicode" in lone.json()["error"], (lone.status_code, lone.text[:200])
    feedback = b'{"value": 1, "comment": "\\udfff"}'
    lone = httpx.post(
        stack.base + f"/api/v1/records/{trace(stack, 4)}/feedback", content=feedback, headers=bearer(INGEST), timeout=10
    )
    assert lone.status_code == 400 and "Unicode" in lone.json()["error"], (lone.status_code, lone.text[:200])
    nested = b"[" * 30_000 + b"]" * 30_000  # within the body bound, nested past the JSON parser's depth: was a 500
    for path, token in (
        (f"/api/v1/records/{trace(stack, 4)}/reviews", REVIEW),
        (f"/api/v1/records/{trace(stack, 4)}/feedback", INGEST),
    ):
        deep = httpx.post(stack.base + path, content=nested, headers=bearer(token), timeout=10)
        assert deep.status_code == 400 and "JSON" in deep.json()["error"], (path, deep.status_code, deep.text[:200])

    def chunks() -> Iterator[bytes]:  # no Content-Length: the bound holds while reading
        yield b'{"metric": "faithfulness", "comment": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}'

    streamed = httpx.post(
        stack.base + f"/api/v1/records/{trace(stack, 4)}/reviews", content=chunks(), headers=bearer(REVIEW), timeout=10
    )
    assert streamed.status_code == 413


def test_hostile_comments_are_bounded_and_shown_as_text(stack: Fed):
    comment = HOSTILE + " " + "z" * 5000
    answer = post(
        stack,
        f"/api/v1/records/{trace(stack, 5)}/reviews",
        {"metric": "faithfulness", "verdict": "unfaithful", "reviewer": "<b>eve</b>", "comment": comment},
    )
    assert answer.status_code == 201
    stored = answer.json()["review"]
    assert len(stored["comment"]) == 4000 and stored["comment"].endswith("…")  # cut, and marked
    page = httpx.get(stack.base + f"/explorer/records/{trace(stack, 5)}", headers=bearer(READ), timeout=10)
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "<img src=x" not in page.text and "<b>eve" not in page.text
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page.text and "&lt;b&gt;eve" in page.text
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_feedback_api(stack: Fed):
    path = f"/api/v1/records/{trace(stack, 6)}/feedback"
    assert post(stack, path, {"value": True}, token=None).status_code == 401
    assert post(stack, path, {"value": True}, token=READ).status_code == 403
    stored = post(stack, path, {"value": 0.25, "name": "thumbs", "comment": "meh"}, token=INGEST)
    assert stored.status_code == 201 and stored.json()["record"] == "stored"
    assert post(stack, path, {"value": False}, token=REVIEW).status_code == 201  # a reviewer may send it too
    for bad in ({"value": 1.5}, {"value": "yes"}, {"value": None}, {}, {"value": True, "name": ""}, [1]):
        answer = post(stack, path, bad, token=INGEST)
        assert answer.status_code == 400 and "error" in answer.json(), (bad, answer.text)
    assert post(stack, "/api/v1/records/xyz/feedback", {"value": True}, token=INGEST).status_code == 400
    assert post(stack, f"/api/v1/records/{'a' * 33}/feedback", {"value": True}, token=INGEST).status_code == 400
    early = post(stack, f"/api/v1/records/{UNKNOWN}/feedback", {"value": 1}, token=INGEST)  # before its trace
    assert early.status_code == 202 and early.json()["record"] == "not stored yet"
    keyed = {"headers": {"Idempotency-Key": "req-42"}}
    assert post(stack, path, {"value": True}, token=INGEST, **keyed).status_code == 201
    again = post(stack, path, {"value": True}, token=INGEST, **keyed)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    too_big = post(stack, path, {"value": True, "comment": "c" * 70_000}, token=INGEST)
    assert too_big.status_code == 413
    record = httpx.get(stack.base + f"/api/v1/records/{trace(stack, 6)}", headers=bearer(READ), timeout=10).json()
    assert sorted(f["value"] for f in record["feedback"]) == [0.0, 0.25, 1.0]  # the repeated key stored once
    assert record["feedback_mean"] == pytest.approx(1.25 / 3)
    assert "ragtrace_feedback_total{" in httpx.get(stack.base + "/metrics", timeout=10).text


def test_the_record_shows_each_results_provenance(stack: Fed):
    record = httpx.get(stack.base + f"/api/v1/records/{trace(stack, 0)}", headers=bearer(READ), timeout=10).json()
    faithfulness = next(m for m in record["metrics"] if m["metric"] == "faithfulness")
    assert faithfulness["provenance"]["judge"] == "local" and faithfulness["provenance"]["ragtrace_version"]
    page = httpx.get(stack.base + f"/explorer/records/{trace(stack, 0)}", headers=bearer(READ), timeout=10).text
    assert "judge_hash" in page and "metric_version" in page


@contextmanager
def session(fed: Fed, token: str) -> Iterator[httpx.Client]:
    """A browser-like client signed in with ``token`` (its session cookie kept)."""
    with httpx.Client(base_url=fed.base, timeout=10) as client:
        signed = client.post("/explorer/login", data={"token": token, "next": "/explorer/"})
        assert signed.status_code == 303
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found is not None, "no review form on the page"
    return found.group(1)


def test_the_review_form_is_csrf_safe(stack: Fed):
    record = trace(stack, 7)
    with session(stack, REVIEW) as browser:
        page = browser.get(f"/explorer/records/{record}?review=faithfulness")
        token = csrf_of(page.text)
        form = {"csrf": token, "metric": "faithfulness", "verdict": "unfaithful", "reviewer": "dee", "reason": ""}
        # a cross-site form post: the browser sends the other site's Origin (and no cookie, SameSite=Strict)
        assert (
            browser.post(
                f"/explorer/records/{record}/review", data=form, headers={"Origin": "http://evil.example"}
            ).status_code
            == 403
        )
        assert browser.post(f"/explorer/records/{record}/review", data={**form, "csrf": ""}).status_code == 403
        assert browser.post(f"/explorer/records/{record}/review", data={**form, "csrf": "0" * 64}).status_code == 403
        with session(stack, REVIEW) as other:  # another sign-in's token does not fit this one
            assert other.post(f"/explorer/records/{record}/review", data=form).status_code == 403
        done = browser.post(f"/explorer/records/{record}/review", data=form)
        assert done.status_code == 303 and done.headers["Location"].startswith("/explorer/")
        assert "dee" in browser.get(f"/explorer/records/{record}").text
    with session(stack, READ) as reader:  # a read-only sign-in sees no form and may not post one
        assert 'name="csrf"' not in reader.get(f"/explorer/records/{record}").text
        assert reader.post(f"/explorer/records/{record}/review", data=form).status_code == 403


def test_queue_and_agreement(stack: Fed):
    # Its own reviews, so it holds whichever of the tests above ran on this stack first, or none (xdist may split the
    # module across workers, each with a stack of its own). Each agrees with theirs: a tie labels nothing.
    for i, verdict in ((1, "faithful"), (2, "unfaithful"), (3, "unfaithful"), (5, "unfaithful"), (7, "unfaithful")):
        review = {"metric": "faithfulness", "verdict": verdict, "reviewer": "quinn"}
        assert post(stack, f"/api/v1/records/{trace(stack, i)}/reviews", review).status_code in (200, 201)
    queue = httpx.get(stack.base + "/api/v1/review/queue", headers=bearer(READ), timeout=10).json()
    assert queue["metric"] == "faithfulness" and queue["pending"] == len(queue["items"])
    reviewed = {r["trace_id"] for r in queue["items"]}
    assert not reviewed & {trace(stack, i) for i in (1, 2, 3, 5, 7)}  # reviewed records leave the queue
    assert {i["reason"] for i in queue["items"]} <= {"sample", "feedback", "low_score"}
    assert queue["reviewed"] >= 1
    agreement = httpx.get(stack.base + "/api/v1/agreement", headers=bearer(READ), timeout=10).json()
    row = next(r for r in agreement["agreement"] if r["population"] == "all" and r["metric"] == "faithfulness")
    assert row["judge"] == "local" and row["n"] == agreement["labelled"] >= 5
    assert row["confusion"]["n"] == row["n"]
    metrics = httpx.get(stack.base + "/metrics", timeout=10).text
    assert (
        f'ragtrace_judge_agreement{{judge="local",metric="faithfulness",population="all",statistic="reviewed"}} {float(row["n"])}'
        in metrics
    )
    assert httpx.get(stack.base + "/api/v1/agreement", timeout=10).status_code == 401
    assert httpx.get(stack.base + "/explorer/review", headers=bearer(INGEST), timeout=10).status_code == 403
