"""Scored records streamed by workers and kept by the receivers that show them (``exporter/results_stream.py``,
``scoring/results_replica.py``), against a real redis-server: what a worker scored reaches a receiver's store once,
is confirmed in the worker's store (so the next start does not send it again), waits out an outage in the worker's
buffer, and hostile stream entries are skipped and counted. The end-to-end run (a receiver and a worker as separate
processes, the record on the receiver's explorer) is in ``test_redis_feedback_relay.py``.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis
from prometheus_client import CollectorRegistry

from ragtrace_collector.exporter.results_stream import EXPORTER, ResultsStream
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import JudgeUsage, MetricResult
from ragtrace_collector.scoring.results_replica import MALFORMED, STORED, ResultsReplica, entry_of, stream_key
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


def url(server: RedisServer) -> str:
    return f"{server.url}?prefix=rs{uuid.uuid4().hex[:8]}"


def record(i: int) -> RagRecord:
    return RagRecord(
        trace_id=f"{i:032x}",
        user_input=f"question {i}",
        response=f"answer {i}",
        retrieved_contexts=[f"context {i}"],
        service="shop",
        pipeline="support",
        start_time_unix_nano=time.time_ns(),
    )


def results(i: int) -> list[MetricResult]:
    claims = [{"statement": f"answer {i}", "verdict": "no", "reason": "contradicted by context #1: 'x'"}]
    return [
        MetricResult(
            "faithfulness",
            "scored",
            score=0.5,
            details={"claims": claims},
            usage=JudgeUsage(calls=1, prompt_tokens=10),
            provenance={"judge": "local", "metric_version": "1"},
        ),
        MetricResult("answer_relevancy", "skipped", reason="no question"),
    ]


class Worker:
    def __init__(self, tmp, name: str, u: str) -> None:
        self.store = ResultsStore(tmp / name / "results.sqlite")
        self.registry = CollectorRegistry()
        marks = self.store

        def confirm(keys: list[tuple[str, str]]) -> None:
            marks.mark_exported(EXPORTER, keys)

        self.stream = ResultsStream(u, self.registry, confirm)

    def score(self, i: int) -> None:
        self.store.add(record(i), results(i), "local")
        self.stream.emit(record(i), results(i), "local")


def test_a_workers_records_reach_the_receivers_store_once_and_are_confirmed(tmp_path, redis_server):
    u = url(redis_server)
    w1, w2 = Worker(tmp_path, "w1", u), Worker(tmp_path, "w2", u)
    receiver = ResultsStore(tmp_path / "r" / "results.sqlite")
    replica = ResultsReplica(receiver, u, CollectorRegistry())
    for i in range(3):
        w1.score(i)
    w2.score(3)
    assert w1.stream.send_once() == 3 and w2.stream.send_once() == 1
    assert replica.run_once() == (0, 4)
    assert replica.run_once() == (0, 0)
    for i in range(4):
        stored = {r.metric: r for r in receiver.get(f"{i:032x}")}
        assert stored["faithfulness"].score == 0.5 and stored["answer_relevancy"].status == "skipped"
        assert stored["faithfulness"].details["claims"][0]["verdict"] == "no"
        assert stored["faithfulness"].provenance == {"judge": "local", "metric_version": "1"}
        assert receiver.record(f"{i:032x}") is not None  # the record page's record
    # what Redis took is confirmed in the worker's store: the next start does not send it again
    assert w1.store.exported(EXPORTER) == {
        (f"{i:032x}", m) for i in range(3) for m in ("faithfulness", "answer_relevancy")
    }
    # a worker keeps only its own records
    assert w1.store.record(f"{3:032x}") is None


def test_an_outage_keeps_the_records_queued_until_redis_is_back(tmp_path):
    with RedisServer() as server:
        u = url(server)
        w = Worker(tmp_path, "w", u)
        receiver = ResultsStore(tmp_path / "r" / "results.sqlite")
        server.stop()
        w.score(1)
        w.score(2)
        assert w.stream.send_once() == 0
        assert w.store.exported(EXPORTER) == set()
        server.start()
        w.stream._breaker.recovered()  # the retry interval, without the wait
        assert w.stream.send_once() == 2
        assert ResultsReplica(receiver, u).run_once() == (0, 2)


def test_the_thread_sends_and_flushes(tmp_path, redis_server):
    u = url(redis_server)
    w = Worker(tmp_path, "w", u)
    w.stream.start()
    try:
        w.score(1)
        assert w.stream.force_flush(10)
    finally:
        w.stream.shutdown(5)
    assert w.stream.counts["sent"] == 1


def test_hostile_entries_are_skipped_and_counted(tmp_path, redis_server):
    u = url(redis_server)
    receiver = ResultsStore(tmp_path / "r" / "results.sqlite")
    replica = ResultsReplica(receiver, u, CollectorRegistry())
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    good = entry_of(record(9), results(9), "local")
    row = results(9)[0].to_dict()
    hostile = [
        {"x": "y"},
        {**good, "r": "{not json"},
        {**good, "r": json.dumps({"retrieved_contexts": 7})},
        {**good, "m": "[]"},
        {**good, "m": json.dumps([{**row, "status": "hacked"}])},
        {**good, "m": json.dumps([{**row, "score": "0.5"}])},
        {**good, "m": json.dumps([{**row, "usage": {"calls": "many"}}])},
        {**good, "m": json.dumps([{**row, "status": "scored", "score": None}])},  # a scored result needs a score
        {**good, "j": ""},
        {**good, "m": "[" * 100_000 + "]" * 100_000},  # nested past the parser's depth
        {**good, "m": json.dumps([{**row, "reason": "x \ud800"}])},  # lone surrogates: SQLite refuses them
        {**good, "r": good["r"].replace('"answer 9"', '"answer \\udfff 9"')},
    ]
    for fields in hostile:
        raw.xadd(stream_key(u), fields)
    raw.xadd(stream_key(u), good)
    raw.xadd(stream_key(u), good)  # twice: stored once
    assert replica.run_once() == (0, 1)
    assert replica.counts == {STORED: 1, MALFORMED: len(hostile)}
    assert {r.metric for r in receiver.get(f"{9:032x}")} == {"faithfulness", "answer_relevancy"}


def test_a_restart_resumes_where_it_left_off(tmp_path, redis_server):
    u = url(redis_server)
    w = Worker(tmp_path, "w", u)
    path = tmp_path / "r" / "results.sqlite"
    w.score(1)
    w.stream.send_once()
    assert ResultsReplica(ResultsStore(path), u).run_once() == (0, 1)
    w.score(2)
    w.stream.send_once()
    again = ResultsReplica(ResultsStore(path), u)
    assert again.run_once() == (0, 1) and again.counts[STORED] == 1
