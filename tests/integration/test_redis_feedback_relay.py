"""End-user feedback and reviewers' verdicts shared between hosts through Redis (``review/feedback_relay.py``),
against a real redis-server.

The relay's contract, store to store: what one host's intake stores reaches the others once, its own coming back
is stored once, what others took is not sent on, an outage keeps the outbox on disk until Redis is back, hostile
stream entries are skipped and counted, a restart resumes where it left off, a deleted stream is read anew. A review
made on any host's explorer reaches the others too, and a reviewer's latest verdict is the one every host keeps.
Then as a team runs it: a receiver and a worker, separate ``ragtrace-collector serve`` processes with their own
data directories, the app's SDK feedback sent to the receiver and shown on the worker's record page, the record
the worker scored shown, with that feedback, on the receiver's explorer (``scoring/results_replica.py``), and a
review posted on the worker's explorer shown on the receiver's.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

import ragtrace
from ragtrace_collector.examples.rag_app.app import RagApp
from ragtrace_collector.review.feedback import FeedbackIntake
from ragtrace_collector.review.feedback_relay import MALFORMED, RECEIVED, SENT, FeedbackRelay, stream_key
from ragtrace_collector.review.labels import ClaimVerdict, Feedback, LabelStore, Review
from tests.support.collector_process import collector_config, serve, until
from tests.support.explorer_stack import q
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

TRACE = "ab" * 16


def url(server: RedisServer) -> str:
    return f"{server.url}?prefix=fb{uuid.uuid4().hex[:8]}"


class Host:
    """One host's label store, the intake writing to it (relayed, as the service wires it) and its relay."""

    def __init__(self, tmp: Path, name: str, redis_url: str, clock=time.monotonic) -> None:
        self.registry = CollectorRegistry()
        self.store = LabelStore(tmp / name / "results.sqlite")
        self.intake = FeedbackIntake(self.store, self.registry, relay=True)
        self.relay = FeedbackRelay(self.store, redis_url, self.registry, clock=clock)

    def feedback(self, trace_id: str = TRACE) -> list[Feedback]:
        return self.store.feedback_of(trace_id)

    def metric(self, direction: str, name: str = "ragtrace_feedback_relayed_total") -> float:
        return self.registry.get_sample_value(name, {"direction": direction}) or 0.0

    def review(self, review: Review) -> bool:
        """A review made on this host's explorer (which relays what it stores, scaled out)."""
        return self.store.add_review(review, relay=True)

    def verdicts(self, trace_id: str = TRACE) -> dict[str, tuple]:
        return {
            r.reviewer: (r.verdict, r.claims, r.reference, r.comment, r.reviewed_at)
            for r in self.store.reviews_of(trace_id)
        }


REVIEWS = "ragtrace_reviews_relayed_total"


def review(reviewer: str = "ana", verdict: str | None = "unfaithful", at: float = 0.0, **kw) -> Review:
    return Review(TRACE, "faithfulness", reviewer, verdict, reviewed_at=at, **kw)  # type: ignore[arg-type]


def rounds(*hosts: Host, times: int = 2) -> None:
    for _ in range(times):
        for host in hosts:
            host.relay.run_once()


def item(n: int, trace_id: str = TRACE, **kw) -> Feedback:
    return Feedback(trace_id, 1.0 if n % 2 else 0.0, source="sdk", feedback_id=f"{n:016x}", received_at=1e9 + n, **kw)


def test_feedback_taken_on_one_host_is_stored_once_on_every_other(tmp_path, redis_server):
    u = url(redis_server)
    a, b, c = (Host(tmp_path, name, u) for name in "abc")
    a.intake.add([item(1), item(2, comment="too slow")])
    b.intake.add([Feedback(TRACE, 0.5, name="thumbs")])  # an API post without an Idempotency-Key: given an id
    for host in (a, b, c):
        host.relay.run_once()
    for host in (a, b, c):
        host.relay.run_once()  # each host's own items come back: stored once
    for host in (a, b, c):
        got = sorted((f.feedback_id, f.value, f.name, f.comment) for f in host.feedback())
        assert len(got) == 3 and len({g[0] for g in got}) == 3, got
        assert ("0000000000000001", 1.0, "user_feedback", None) in got
        assert ("0000000000000002", 0.0, "user_feedback", "too slow") in got
        assert host.store.outbox_size() == 0
    assert (a.relay.counts[SENT], b.relay.counts[SENT], c.relay.counts[SENT]) == (2, 1, 0)  # nothing sent on
    assert (a.relay.counts[RECEIVED], b.relay.counts[RECEIVED], c.relay.counts[RECEIVED]) == (1, 2, 3)
    assert c.metric(RECEIVED) == 3 and a.metric(SENT) == 2
    # what came from elsewhere is not counted again in ragtrace_feedback_total: the intake where it arrived counts it
    total_c = sum(
        sample.value
        for family in c.registry.collect()
        if family.name == "ragtrace_feedback"
        for sample in family.samples
        if sample.name == "ragtrace_feedback_total"
    )
    assert total_c == 0
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert raw.xlen(stream_key(u)) == 3


def test_an_outage_keeps_the_outbox_on_disk_until_redis_is_back(tmp_path):
    with RedisServer() as server:
        u = url(server)
        a, b = Host(tmp_path, "a", u), Host(tmp_path, "b", u)
        server.stop()
        a.intake.add([item(1), item(2)])
        assert a.relay.run_once() == (0, 0)
        assert a.store.outbox_size() == 2
        assert a.registry.get_sample_value("ragtrace_feedback_relay_outbox") == 2  # what an operator sees
        a.relay.shutdown(1.0)
        a.store.close()
        # the process ends during the outage; the one started on its data directory sends what it held
        a2 = Host(tmp_path, "a", u)
        assert a2.store.outbox_size() == 2
        server.start()
        assert a2.relay.run_once() == (2, 0)
        assert b.relay.run_once() == (0, 2)
        assert sorted(f.feedback_id for f in b.feedback()) == ["0000000000000001", "0000000000000002"]


def test_hostile_entries_are_skipped_and_counted(tmp_path, redis_server):
    u = url(redis_server)
    b = Host(tmp_path, "b", u)
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    key = stream_key(u)
    good = item(7).to_dict()
    hostile = [
        {"x": "no f field"},
        {"f": "not json {"},
        {"f": json.dumps(["a", "list"])},
        {"f": json.dumps({**good, "value": 7})},  # outside [0, 1]
        {"f": json.dumps({**good, "value": "nan"})},
        {"f": json.dumps({**good, "trace_id": "../../etc/passwd"})},
        {"f": json.dumps({**good, "feedback_id": ""})},
        {"f": json.dumps({**good, "source": "root"})},
        {"f": json.dumps({**good, "received_at": "yesterday"})},
        {"f": json.dumps({**good, "comment": "z" * 100_000})},  # longer than any entry a relay writes
        {"f": "[" * 5000 + "]" * 5000},  # nested past the parser's depth
        {"f": json.dumps({**good, "comment": "x \ud800 y"})},  # a lone surrogate: SQLite refuses it
    ]
    for fields in hostile:
        raw.xadd(key, fields)
    raw.xadd(key, {"f": json.dumps({**good, "comment": "<script>" + "y" * 5000, "name": " n " * 100})})
    raw.xadd(key, {"f": json.dumps(good)})  # the same item again: stored once
    assert b.relay.run_once() == (0, 1)
    assert b.relay.counts[MALFORMED] == len(hostile) and b.metric(MALFORMED) == len(hostile)
    (stored,) = b.feedback()
    assert stored.comment is not None and len(stored.comment) == 4000 and stored.comment.startswith("<script>")
    assert len(stored.name) <= 64


def test_a_restart_resumes_where_it_left_off_and_a_deleted_stream_is_read_anew(tmp_path, redis_server):
    u = url(redis_server)
    now = [0.0]
    a, b = Host(tmp_path, "a", u), Host(tmp_path, "b", u, clock=lambda: now[0])
    a.intake.add([item(1)])
    a.relay.run_once()
    assert b.relay.run_once() == (0, 1)
    b.relay.shutdown(1.0)
    b2 = Host(tmp_path, "b", u, clock=lambda: now[0])  # the same store, a new process
    assert b2.relay.run_once() == (0, 0)  # not read again
    a.intake.add([item(2)])
    a.relay.run_once()
    assert b2.relay.run_once() == (0, 1)
    # the stream is deleted (an operator's FLUSHDB) and written anew: its ids start below b2's position
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    raw.delete(stream_key(u))
    raw.xadd(stream_key(u), {"f": json.dumps(item(3).to_dict())}, id="1-1")
    now[0] += 60  # the idle check for a reset runs every 30 s
    b2.relay.run_once()
    assert b2.relay.run_once() == (0, 1)
    assert sorted(f.feedback_id for f in b2.feedback())[-1] == "0000000000000003"


def test_a_review_made_on_one_host_is_on_every_other_and_the_latest_verdict_wins(tmp_path, redis_server):
    u = url(redis_server)
    a, b, c = (Host(tmp_path, name, u) for name in "abc")
    claims = (ClaimVerdict("It opens at 9.", "contradicted"), ClaimVerdict("It is in Leeds.", "supported"))
    assert a.review(review(claims=claims, reference="It opens at 10.", comment="wrong opening hours"))
    b.review(review("ben", "faithful"))
    rounds(a, b, c)
    first = a.verdicts()
    assert first["ana"][:4] == ("unfaithful", claims, "It opens at 10.", "wrong opening hours")
    assert first["ben"][0] == "faithful"
    for host in (a, b, c):
        assert host.verdicts() == first  # the same verdicts, claims and times everywhere, each stored once
        assert host.store.outbox_size() == 0
    assert (a.relay.review_counts[SENT], b.relay.review_counts[SENT], c.relay.review_counts[SENT]) == (1, 1, 0)
    assert c.relay.review_counts[RECEIVED] == 2 and c.metric(RECEIVED, REVIEWS) == 2
    assert a.metric(SENT, REVIEWS) == 1 and a.metric(SENT) == 0  # reviews are not counted as feedback

    # ana changes her mind on host c: her latest verdict replaces the earlier one on every host
    time.sleep(0.01)
    c.review(review(verdict="faithful"))
    rounds(a, b, c)
    for host in (a, b, c):
        assert host.verdicts()["ana"][:2] == ("faithful", ()), host.verdicts()
    # the earlier verdict arriving late (an entry sent again) changes nothing
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    old = Review(TRACE, "faithfulness", "ana", "unfaithful", claims, reviewed_at=first["ana"][4])
    raw.xadd(stream_key(u), {"r": json.dumps(old.to_dict())})
    rounds(a, b, c, times=1)
    assert all(host.verdicts()["ana"][0] == "faithful" for host in (a, b, c))


def test_hostile_review_entries_are_skipped_and_counted(tmp_path, redis_server):
    u = url(redis_server)
    b = Host(tmp_path, "b", u)
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    key = stream_key(u)
    good = review(at=1e9, claims=(ClaimVerdict("It opens at 9.", "contradicted"),)).to_dict()
    hostile = [
        {"r": "not json {"},
        {"r": json.dumps(["a", "list"])},
        {"r": json.dumps({**good, "metric": ""})},
        {"r": json.dumps({**good, "verdict": "maybe"})},
        {"r": json.dumps({**good, "verdict": None, "claims": []})},  # neither a verdict nor claims
        {"r": json.dumps({**good, "claims": "all wrong"})},
        {"r": json.dumps({**good, "claims": [{"statement": "x", "verdict": "perhaps"}]})},
        {"r": json.dumps({**good, "claims": [{"statement": "x", "verdict": "no"}] * 201})},
        {"r": json.dumps({**good, "reviewer": " "})},
        {"r": json.dumps({**good, "trace_id": ""})},
        {"r": json.dumps({**good, "trace_id": "t" * 300})},
        {"r": json.dumps({**good, "reviewed_at": "yesterday"})},
        {"r": json.dumps({**good, "reviewed_at": True})},
        {"r": json.dumps({**good, "reviewed_at": float("inf")})},
        {"r": json.dumps({**good, "reference": "z" * 3_000_000})},  # longer than any entry a relay writes
        {"r": "[" * 100_000 + "]" * 100_000},  # nested past the parser's depth
        {"r": json.dumps({**good, "reviewer": "\udfff"})},  # a lone surrogate: SQLite refuses it
    ]
    for fields in hostile:
        raw.xadd(key, fields)
    raw.xadd(key, {"r": json.dumps({**good, "comment": "<script>" + "y" * 5000, "reviewer": "r" * 500})})
    assert b.relay.run_once() == (0, 1)
    assert b.relay.review_counts[MALFORMED] == len(hostile) and b.metric(MALFORMED, REVIEWS) == len(hostile)
    assert b.relay.counts[MALFORMED] == 0  # a review entry is no malformed feedback
    ((reviewer, (verdict, claims, _, comment, at)),) = b.verdicts().items()
    assert verdict == "unfaithful" and claims == (ClaimVerdict("It opens at 9.", "contradicted"),) and at == 1e9
    assert len(reviewer) == 128 and comment is not None and len(comment) == 4000 and comment.startswith("<script>")


def test_an_outage_keeps_reviews_in_the_outbox_until_redis_is_back(tmp_path):
    with RedisServer() as server:
        u = url(server)
        a, b = Host(tmp_path, "a", u), Host(tmp_path, "b", u)
        server.stop()
        a.review(review())
        assert a.relay.run_once() == (0, 0)
        assert a.store.outbox_size() == 1
        assert a.registry.get_sample_value("ragtrace_feedback_relay_outbox") == 1
        a.relay.shutdown(1.0)
        a.store.close()
        a2 = Host(tmp_path, "a", u)  # the process ended during the outage
        server.start()
        assert a2.relay.run_once() == (1, 0)
        assert b.relay.run_once() == (0, 1)
        assert b.verdicts()["ana"][0] == "unfaithful"


def test_the_relay_thread_sends_and_stops_in_time(tmp_path, redis_server):
    u = url(redis_server)
    a, b = Host(tmp_path, "a", u), Host(tmp_path, "b", u)
    a.relay.interval = b.relay.interval = 0.05
    a.relay.start()
    b.relay.start()
    try:
        a.intake.add([item(1)])
        until(lambda: len(b.feedback()) == 1, 10, "the item on host b")
        a.intake.add([item(2)])
    finally:
        started = time.monotonic()
        a.relay.shutdown(5.0)
        assert time.monotonic() - started < 5.0
        b.relay.shutdown(5.0)
    assert a.store.outbox_size() == 0  # the last round sent what was added just before the stop


def test_sdk_feedback_and_the_scored_record_show_on_both_hosts(tmp_path, redis_server):
    u = url(redis_server)
    common = {"queue": {"url": u}, "sampling": {"rate": 1.0}, "scoring": {"metrics": ["faithfulness"]}}
    receiver_dir, worker_dir = tmp_path / "receiver", tmp_path / "worker"
    receiver_dir.mkdir()
    worker_dir.mkdir()
    receiver_cfg = collector_config(receiver_dir, role="receiver", **common)
    receiver_cfg["assembly"] = {"grace_seconds": 0.3, "sweep_interval_seconds": 0.05}
    worker_cfg = collector_config(worker_dir, role="worker", **common)
    with serve(receiver_dir, receiver_cfg) as receiver, serve(worker_dir, worker_cfg) as worker:
        until(lambda: receiver.readyz(receiver.metrics) == 200, 60, "the receiver", receiver)
        until(lambda: worker.readyz(worker.metrics) == 200, 60, "the worker", worker)
        provider = TracerProvider(resource=Resource.create({"service.name": "shop-assistant"}))
        handle = ragtrace.init(
            endpoint=receiver.otlp,
            protocol="http/protobuf",
            tracer_provider=provider,
            set_global=False,
            schedule_delay_ms=50,
        )
        try:
            answer = RagApp(token_delay=0.0).answer(q(0)["question"], reference=q(0)["reference"])
            ragtrace.feedback(False, trace_id=answer.trace_id, comment="wrong opening hours")
            assert handle.force_flush(10.0)
        finally:
            handle.shutdown()

        def record() -> dict:
            reply = httpx.get(f"{worker.metrics}/api/v1/records/{answer.trace_id}", timeout=10)
            return reply.json() if reply.status_code == 200 else {}

        until(lambda: bool(record().get("feedback")), 60, "the feedback on the worker's record", worker)
        (shown,) = record()["feedback"]
        assert shown["value"] == 0.0 and shown["comment"] == "wrong opening hours" and shown["source"] == "sdk"
        assert not (receiver_dir / "data").samefile(worker_dir / "data")
        metrics = httpx.get(f"{receiver.metrics}/metrics", timeout=10).text
        assert 'ragtrace_feedback_relayed_total{direction="sent"} 1.0' in metrics

        # the receiver's explorer (the one alerts link to) shows the record the worker scored, feedback and all
        def on_receiver() -> dict:
            reply = httpx.get(f"{receiver.metrics}/api/v1/records/{answer.trace_id}", timeout=10)
            return reply.json() if reply.status_code == 200 else {}

        until(lambda: bool(on_receiver().get("metrics")), 60, "the scored record on the receiver", receiver)
        shown_there = on_receiver()
        assert [m["metric"] for m in shown_there["metrics"]] == ["faithfulness"]
        assert shown_there["metrics"][0]["score"] == record()["metrics"][0]["score"]
        assert shown_there["feedback"][0]["comment"] == "wrong opening hours"
        listed = httpx.get(f"{receiver.metrics}/api/v1/records", timeout=10).json()
        assert answer.trace_id in {r["trace_id"] for r in listed["records"]}

        # a reviewer's verdict posted on the worker's explorer shows on the receiver's, and counts in its agreement
        posted = httpx.post(
            f"{worker.metrics}/api/v1/records/{answer.trace_id}/reviews",
            json={"metric": "faithfulness", "verdict": "unfaithful", "reviewer": "ana", "comment": "hours are wrong"},
            timeout=10,
        )
        assert posted.status_code == 201, posted.text
        until(lambda: bool(on_receiver().get("reviews")), 60, "the review on the receiver's record", receiver)
        (seen,) = on_receiver()["reviews"]
        assert seen["reviewer"] == "ana" and seen["verdict"] == "unfaithful" and seen["comment"] == "hours are wrong"


def test_a_key_of_another_type_is_logged_once_a_minute_not_every_round(tmp_path, redis_server, caplog):
    u = url(redis_server)
    now = [0.0]
    a = Host(tmp_path, "a", u, clock=lambda: now[0])
    redis.Redis.from_url(redis_server.url).set(stream_key(u), "not a stream")  # WRONGTYPE for XADD and XREAD
    a.intake.add([item(1)])
    with caplog.at_level("ERROR", logger="ragtrace_collector.internal.redis"):
        for _ in range(3):
            a.relay.round_logged()
            now[0] += 1
        assert len([r for r in caplog.records if "feedback relay): a round failed" in r.message]) == 1
        now[0] += 60
        a.relay.round_logged()
        assert len([r for r in caplog.records if "feedback relay): a round failed" in r.message]) == 2
    assert a.store.outbox_size() == 1  # kept for when the key is a stream again
