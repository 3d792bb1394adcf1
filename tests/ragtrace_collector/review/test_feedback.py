"""End-user feedback into a real collector over loopback: the SDK's ``ragtrace.feedback`` spans (and OTLP requests
encoded as the exporters encode them) stored as labels by trace id, counted on ``/metrics``, never assembled."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import ragtrace
from ragtrace_collector.config import load_config
from ragtrace_collector.queue import open_queue
from ragtrace_collector.receiver.decode import extract_spans
from ragtrace_collector.review.feedback import MAX_NAMES, VALUE_BUCKETS, FeedbackIntake, value_bucket
from ragtrace_collector.review.labels import BadLabel, Feedback, LabelStore
from ragtrace_collector.service.app import CollectorApp
from tests.support import span_fixtures as F
from tests.support.feedback import feedback_request
from tests.support.sdk import reset_settings

PB = {"Content-Type": "application/x-protobuf"}


@ragtrace.retriever
def search(query):
    return [{"id": "d1", "content": "Refunds take 5 days."}]


@ragtrace.generator(model="openai/gpt-4o-mini")
def generate(question, contexts):
    return "Five days."


@ragtrace.pipeline(name="support")
def answer(question, thumbs=None):
    docs = search(question)
    generate(question, [d["content"] for d in docs])
    if thumbs is not None:
        ragtrace.feedback(thumbs, comment="clear answer")
    ragtrace.annotate(session_id="s1")
    return ragtrace.current_trace_id()


def make_config(tmp_path, **over):
    data: dict[str, Any] = {
        "role": "receiver",
        "data_dir": str(tmp_path),
        "listen": {"http_port": 0, "grpc_port": 0, "metrics_port": 0},
        "assembly": {"grace_seconds": 0.0, "sweep_interval_seconds": 0.05},
        "limits": {"max_loop_lag_seconds": None},
    }
    for key, value in over.items():
        data.setdefault(key, {}).update(value) if isinstance(value, dict) else data.__setitem__(key, value)
    return load_config(overrides=data, environ={})


async def post(app, body: bytes) -> tuple[int, ExportTraceServiceResponse]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{app.http_port}/v1/traces", data=body, headers=PB) as r,
    ):
        reply = ExportTraceServiceResponse()
        if r.status == 200:
            reply.ParseFromString(await r.read())
        return r.status, reply


async def scrape(app) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{app.metrics_port}/metrics") as r:
        text = await r.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("ragtrace_feedback")
    }


def feedback_total(app, **labels: str) -> float:
    return app.registry.get_sample_value("ragtrace_feedback_total", labels) or 0.0


async def until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def queued_trace_ids(app) -> list[str]:
    """The trace ids of the records the stopped collector queued (each a RAG record)."""
    queue = open_queue(app.config.queue_url, 10)
    try:
        return [leased.record.trace_id for leased in queue.lease(1000, 10)]
    finally:
        queue.close()


@pytest.fixture
def sdk_to(restore_sdk) -> Iterator[Any]:
    """``ragtrace.init`` exporting to a collector's OTLP/HTTP port; the handles are shut down afterwards."""
    handles = []

    def connect(app, service: str = "fb-app"):
        handle = ragtrace.init(
            service_name=service,
            endpoint=f"http://127.0.0.1:{app.http_port}",
            set_global=False,
            schedule_delay_ms=20,
            max_queue_size=8192,
        )
        handles.append(handle)
        return handle

    yield connect
    for handle in handles:
        handle.shutdown(2.0)


@pytest.fixture
def restore_sdk() -> Iterator[None]:
    yield
    reset_settings()


async def flushed(handle) -> None:
    assert await asyncio.to_thread(handle.force_flush, 10.0)


# --- the SDK into a collector ---------------------------------------------------------------------------------------
async def test_feedback_on_a_trace_already_assembled_and_in_the_request(tmp_path, sdk_to):
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    try:
        handle = sdk_to(app)
        later = await asyncio.to_thread(answer, "refunds?")  # feedback given later, with the saved id
        now = await asyncio.to_thread(answer, "refunds again?", 0.25)  # feedback given in the request
        await flushed(handle)
        await until(lambda: app.queue.depth() == 2)  # both records assembled and queued
        await asyncio.to_thread(ragtrace.feedback, True, trace_id=later, name="thumbs")
        await flushed(handle)
        await until(lambda: len(app.labels.feedback_of(later)) == 1)
        (thumbs,) = app.labels.feedback_of(later)
        assert (thumbs.value, thumbs.name, thumbs.source, thumbs.service) == (1.0, "thumbs", "sdk", "fb-app")
        assert thumbs.feedback_id and len(thumbs.feedback_id) == 16  # the span id
        (in_request,) = app.labels.feedback_of(now)
        assert (in_request.value, in_request.name, in_request.comment) == (0.25, "user_feedback", "clear answer")
        assert feedback_total(app, service="fb-app", pipeline="support", name="thumbs", value="1") == 1
        assert feedback_total(app, service="fb-app", pipeline="support", name="user_feedback", value="0.25") == 1
        metrics = await scrape(app)
        assert {labels for (name, labels) in metrics if name == "ragtrace_feedback_total"} == {
            (("name", "thumbs"), ("pipeline", "support"), ("service", "fb-app"), ("value", "1")),
            (("name", "user_feedback"), ("pipeline", "support"), ("service", "fb-app"), ("value", "0.25")),
        }
        assert app.assembler.state.inflight() == (0, 0)  # the late feedback span waits in no trace
        assert app.registry.get_sample_value("ragtrace_late_spans_total") in (None, 0.0)
    finally:
        await app.stop(drain_timeout=1)
    # the request's feedback span did not change its record: two records, their own spans
    records = queued_trace_ids(app)
    assert sorted(records) == sorted([later, now])


async def test_feedback_before_its_trace_then_the_trace_is_a_record(tmp_path, sdk_to):
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    try:
        handle = sdk_to(app)
        trace_id, request = F.to_request(F.ragtrace_shaped(), service="fb-app")
        await asyncio.to_thread(ragtrace.feedback, 0.6, trace_id=trace_id)
        await flushed(handle)
        await until(lambda: len(app.labels.feedback_of(trace_id)) == 1)
        assert app.labels.feedback_of(trace_id)[0].value == 0.6
        assert feedback_total(app, service="fb-app", pipeline="unknown", name="user_feedback", value="0.5") == 1
        assert app.assembler.state.inflight() == (0, 0)
        assert (await post(app, request.SerializeToString()))[0] == 200
        await until(lambda: app.queue.depth() == 1)
    finally:
        await app.stop(drain_timeout=1)
    assert queued_trace_ids(app) == [trace_id]


async def test_feedback_on_a_trace_never_sampled_is_stored(tmp_path, sdk_to):
    app = CollectorApp(make_config(tmp_path, sampling={"rate": 0.0}))
    await app.start()
    try:
        handle = sdk_to(app)
        trace_id = await asyncio.to_thread(answer, "refunds?", False)
        await flushed(handle)
        await until(lambda: len(app.labels.feedback_of(trace_id)) == 1)
        await until(
            lambda: (app.registry.get_sample_value("ragtrace_assembly_completed_total", {"reason": "root"}) or 0) >= 1
        )
        assert app.labels.feedback_of(trace_id)[0].value == 0.0
    finally:
        await app.stop(drain_timeout=1)
    assert queued_trace_ids(app) == []  # not sampled: no record, the feedback still kept


async def test_a_feedback_only_trace_is_never_a_record(tmp_path):
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    try:
        ids = [uuid.uuid4().hex for _ in range(3)]
        status, reply = await post(
            app, feedback_request(*({"trace_id": t, "value": 1.0} for t in ids)).SerializeToString()
        )
        assert status == 200 and reply.partial_success.rejected_spans == 0
        assert app.assembler.state.inflight() == (0, 0)
        assert app.registry.get_sample_value("ragtrace_spans_received_total", {"transport": "http"}) == 3
    finally:
        await app.stop(drain_timeout=1)
    assert queued_trace_ids(app) == []
    assert app.registry.get_sample_value("ragtrace_assembly_completed_total", {"reason": "shutdown"}) is None


# --- re-sent, malformed, many --------------------------------------------------------------------------------------
async def test_the_same_feedback_span_sent_twice_is_stored_once(tmp_path):
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    try:
        trace_id = uuid.uuid4().hex
        body = feedback_request({"trace_id": trace_id, "value": True}).SerializeToString()
        assert (await post(app, body))[0] == 200
        assert (await post(app, body))[0] == 200  # an exporter's retry
        assert len(app.labels.feedback_of(trace_id)) == 1
        assert feedback_total(app, service="fb-app", pipeline="unknown", name="user_feedback", value="1") == 1
    finally:
        await app.stop(drain_timeout=1)


async def test_a_malformed_value_is_refused_counted_and_the_request_still_taken(tmp_path):
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    try:
        bad, good = uuid.uuid4().hex, uuid.uuid4().hex
        trace_id, rag = F.to_request(F.ragtrace_shaped(), service="fb-app")
        request = feedback_request(
            {"trace_id": bad, "value": 1.5},
            {"trace_id": bad, "value": "great"},
            {"trace_id": bad},  # no value at all
            {"trace_id": bad, "value": 1.0, "name": ""},
            {"trace_id": good, "value": 0.9},
        )
        request.resource_spans.extend(rag.resource_spans)  # beside a RAG trace, in one request
        status, reply = await post(app, request.SerializeToString())
        assert status == 200
        assert reply.partial_success.rejected_spans == 4
        assert "feedback: bad_value" in reply.partial_success.error_message
        assert app.labels.feedback_of(bad) == []
        assert [f.value for f in app.labels.feedback_of(good)] == [0.9]
        refused = app.registry.get_sample_value
        assert refused("ragtrace_feedback_refused_total", {"reason": "bad_value"}) == 3
        assert refused("ragtrace_feedback_refused_total", {"reason": "bad_name"}) == 1
        await until(lambda: app.queue.depth() == 1)  # the request's RAG trace went on to assembly
    finally:
        await app.stop(drain_timeout=1)
    assert queued_trace_ids(app) == [trace_id]


async def test_a_flood_of_feedback_is_stored_or_refused_with_a_status_and_labels_stay_bounded(tmp_path):
    """5,000 feedback spans in 50 concurrent requests, 40 names and any value: each request answered 200 (all its
    feedback stored) or 503 (none: admission), nothing held in assembly, and /metrics within its bounds."""
    app = CollectorApp(make_config(tmp_path, limits={"max_pending_requests": 8}))
    await app.start()
    try:
        bodies = [
            feedback_request(
                *(
                    {"trace_id": uuid.uuid4().hex, "value": ((r * 100 + i) % 101) / 100, "name": f"signal-{i % 40}"}
                    for i in range(100)
                )
            ).SerializeToString()
            for r in range(50)
        ]
        statuses = [s for s, _ in await asyncio.gather(*(post(app, b) for b in bodies))]
        assert set(statuses) <= {200, 503}  # admission sheds what is past its bound (8 requests at once)
        shed = [b for b, status in zip(bodies, statuses) if status == 503]
        assert app.labels.counts()["feedback"] == (50 - len(shed)) * 100  # a 200 is all of a request's stored
        for _ in range(100):  # the exporters retry a 503
            if not shed:
                break
            await asyncio.sleep(0.02)
            statuses = [s for s, _ in await asyncio.gather(*(post(app, b) for b in shed))]
            shed = [b for b, status in zip(shed, statuses) if status == 503]
        assert not shed
        assert app.labels.counts()["feedback"] == 5000
        assert app.assembler.state.inflight() == (0, 0)
        metrics = await scrape(app)
        series = [dict(labels) for (name, labels) in metrics if name == "ragtrace_feedback_total"]
        assert sum(v for (name, _), v in metrics.items() if name == "ragtrace_feedback_total") == 5000
        assert {s["value"] for s in series} <= set(VALUE_BUCKETS)
        names = {s["name"] for s in series}
        assert len(names - {"other"}) <= MAX_NAMES and "other" in names
    finally:
        await app.stop(drain_timeout=1)


# --- the intake alone -----------------------------------------------------------------------------------------------
def test_value_buckets_are_the_nearest_quarter():
    assert [value_bucket(v) for v in (0.0, 0.12, 0.13, 0.5, 0.62, 0.63, 0.87, 0.88, 1.0)] == [
        "0",
        "0",
        "0.25",
        "0.5",
        "0.5",
        "0.75",
        "0.75",
        "1",
        "1",
    ]


def test_add_from_the_api_counts_new_items_and_refuses_a_bad_batch_whole(tmp_path):
    store = LabelStore(tmp_path / "results.db")
    registry = CollectorRegistry()
    intake = FeedbackIntake(store, registry, pipeline_of={"t1": "support"}.get)
    try:
        items = [Feedback("t1", 1.0, feedback_id="k1"), Feedback("t2", 0.5, feedback_id="k2")]
        assert intake.add(items) == [True, True]
        assert intake.add(items[:1]) == [False]  # the same Idempotency-Key
        with pytest.raises(BadLabel):
            intake.add([Feedback("t3", 0.5), Feedback("t3", 2.0)])
        assert store.feedback_of("t3") == []
        value = registry.get_sample_value
        assert (
            value(
                "ragtrace_feedback_total", dict(service="unknown", pipeline="support", name="user_feedback", value="1")
            )
            == 1
        )
        assert (
            value(
                "ragtrace_feedback_total",
                dict(service="unknown", pipeline="unknown", name="user_feedback", value="0.5"),
            )
            == 1
        )
    finally:
        store.close()


def test_take_cost_per_feedback_span(tmp_path):
    """What storing costs the event loop per span (one transaction per request): printed, and bounded loosely."""
    store = LabelStore(tmp_path / "results.db")
    intake = FeedbackIntake(store, CollectorRegistry())
    try:
        requests = [
            feedback_request(*({"trace_id": uuid.uuid4().hex, "value": 0.5} for _ in range(100))) for _ in range(20)
        ]
        decoded = [extract_spans(r) for r in requests]
        started = time.perf_counter()
        for d in decoded:
            intake.take(d)
        per_span = (time.perf_counter() - started) / 2000
        assert all(not d.traces for d in decoded)
        assert store.counts()["feedback"] == 2000
        print(f"\nFeedbackIntake.take: {per_span * 1e6:.1f} µs per feedback span (100 a request)")
        assert per_span < 0.002
    finally:
        store.close()
