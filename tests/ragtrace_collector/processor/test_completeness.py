"""Why a record is incomplete: real peer captures through the real receiver, sweep, sampler and queue.

``ragtrace_record_incomplete_total{service,field}`` counts each sampled record lacking a field and the log says
the cause once per service and cause per interval (tests/fixtures/peers/ are what the real packages emitted).
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import SamplingConfig, ScoringConfig, load_config
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.processor.conventions.completeness import CAUSES, FIELDS, missing_fields
from ragtrace_collector.processor.sampling.sampler import Sampler
from ragtrace_collector.processor.sweep import Sweeper
from ragtrace_collector.queue.sqlite import SQLiteQueue
from ragtrace_collector.receiver.decode import extract_spans
from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver
from ragtrace_collector.service.app import CollectorApp
from ragtrace_collector.service.scoring import blocked_metrics
from ragtrace_collector.telemetry.completeness import IncompleteRecords
from ragtrace_collector.telemetry.labels import BoundedLabel
from tests.support import span_fixtures as F
from tests.support.receiver_stack import Stack

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "peers"
PB = {"Content-Type": "application/x-protobuf"}
LOGGER = "ragtrace_collector.telemetry.completeness"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def post_capture(port: int, setup: str) -> int:
    paths = sorted((FIXTURES / setup).glob("requests-*.binpb"))
    async with aiohttp.ClientSession() as session:
        for path in paths:
            async with session.post(f"http://127.0.0.1:{port}/v1/traces", data=path.read_bytes(), headers=PB) as r:
                assert r.status == 200, await r.text()
    return len(paths)


async def sweep_capture(tmp_path, setup: str, **incomplete_kw) -> tuple[Stack, SQLiteQueue]:
    """Replay ``setup`` through a served receiver, then sweep: sample everything, queue, report what is missing."""
    stack = Stack()
    receiver = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0)
    await receiver.start()
    try:
        await post_capture(receiver.port, setup)
    finally:
        await receiver.shutdown()
    queue = SQLiteQueue(tmp_path / "queue.sqlite")
    incomplete = IncompleteRecords(
        stack.registry,
        stack.metrics.service_label,
        interval=300.0,
        max_series=2000,
        idle_seconds=600.0,
        blocked=blocked_metrics(ScoringConfig()),
        **incomplete_kw,
    )
    sweeper = Sweeper(stack.assembler, Sampler(SamplingConfig(rate=1.0)), queue, stack.metrics, incomplete)
    await sweeper.run_once(everything=True)
    sweeper.close()
    return stack, queue


def incomplete(stack: Stack, service: str) -> dict[str, float]:
    return {f: stack.sample("ragtrace_record_incomplete_total", service=service, field=f) for f in FIELDS}


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def test_openlit_qdrant_retriever_records_no_documents_the_prompt_has_them(tmp_path, caplog):
    """OpenLIT's qdrant spans never record the points returned; the passages the prompt labels as context are the
    record's contexts instead (said in its metadata), so nothing is incomplete."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    stack, queue = await sweep_capture(tmp_path, "openlit_qdrant")
    try:
        assert queue.depth() == 6  # every record is still queued: reporting loses nothing
    finally:
        queue.close()
    counts = incomplete(stack, "peer-openlit_qdrant")
    assert counts == {f: 0.0 for f in FIELDS}
    assert lines(caplog) == []


async def test_bare_llm_traces_have_no_retriever_span(tmp_path, caplog):
    """The OpenAI instrumentation's spans of the OpenInference LangChain + OpenAI capture alone: each call a trace of
    its own with only an LLM span (with LangChain's spans too, each joins its chain's record: see below)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    caplog.set_level(logging.WARNING, logger=LOGGER)
    setup = tmp_path / "openai_only"
    setup.mkdir()
    for path in sorted((FIXTURES / "oi_langchain_openai").glob("requests-*.binpb")):
        request = ExportTraceServiceRequest.FromString(path.read_bytes())
        for rs in request.resource_spans:
            kept = [ss for ss in rs.scope_spans if ss.scope.name == "openinference.instrumentation.openai"]
            del rs.scope_spans[:]
            rs.scope_spans.extend(kept)
        (setup / path.name).write_bytes(request.SerializeToString())
    stack, queue = await sweep_capture(tmp_path, str(setup))
    assert queue.depth() == 6
    queue.close()
    counts = incomplete(stack, "peer-oi_langchain_openai")
    assert counts["retrieved_contexts"] == 0  # the six bare calls: the passages their prompts label as context
    assert counts["ttft"] == 0  # the OpenAI instrumentation records the first token of streamed calls
    assert counts["user_input"] == counts["response"] == counts["model"] == 0
    assert lines(caplog) == []


async def test_a_prompt_labelling_no_context_has_no_retriever_span(tmp_path, caplog):
    """A chain whose passages were looked up untraced and pasted into the prompt under no label: nothing to read them
    from, so the record has no contexts and the log names the cause (the real bare-call captures all label theirs)."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    stack = Stack()
    stack.assembler.add(extract_spans(F.to_request(F.openinference_unlabelled_prompt(), service="shop")[1]))
    queue = SQLiteQueue(tmp_path / "queue.sqlite")
    report = IncompleteRecords(
        stack.registry, stack.metrics.service_label, interval=300.0, max_series=2000, idle_seconds=600.0
    )
    sweeper = Sweeper(stack.assembler, Sampler(SamplingConfig(rate=1.0)), queue, stack.metrics, report)
    assert await sweeper.run_once(everything=True) == 1
    sweeper.close()
    queue.close()
    assert incomplete(stack, "shop") == {f: 1.0 if f == "retrieved_contexts" else 0.0 for f in FIELDS}
    assert lines(caplog) == [
        "service shop: 1 record had no retrieved contexts — no retriever span found, nor a passage labelled as"
        " context in the prompt (span kinds seen: CHAIN, LLM)"
    ]


@pytest.mark.parametrize(
    "setup", ["oi_openai", "tl_decorators", "oi_langchain_openai", "tl_langchain", "openlit_langchain"]
)
async def test_full_records_report_nothing(tmp_path, caplog, setup):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    stack, queue = await sweep_capture(tmp_path, setup)
    queue.close()
    assert incomplete(stack, f"peer-{setup}") == {f: 0.0 for f in FIELDS}
    assert lines(caplog) == []


async def test_streams_without_usage_lack_token_counts(tmp_path):
    stack, queue = await sweep_capture(tmp_path, "oi_llamaindex")
    queue.close()
    assert incomplete(stack, "peer-oi_llamaindex")["tokens"] == 3  # llama-index streams without asking for usage


def test_one_line_per_service_and_cause_per_interval(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    clock = Clock()
    registry = CollectorRegistry()
    report = IncompleteRecords(
        registry,
        BoundedLabel(20, 600.0, clock),
        interval=60.0,
        max_series=2000,
        idle_seconds=600.0,
        blocked={"retrieved_contexts": ["faithfulness"]},
        clock=clock,
    )
    no_ctx = [("retrieved_contexts", "no_retriever_span", "no retriever span found (span kinds seen: LLM, CHAIN)")]
    for _ in range(12):
        report.observe("shop", no_ctx)
        clock.now += 1
    report.observe("shop", [("response", "no_llm_span", "no LLM span found")])  # another cause: its own line
    report.observe("search", no_ctx)  # another service: its own line
    assert lines(caplog) == [
        "service shop: 1 record had no retrieved contexts — no retriever span found (span kinds seen: LLM, CHAIN); "
        "faithfulness cannot be scored",
        "service shop: 1 record had no answer — no LLM span found",
        "service search: 1 record had no retrieved contexts — no retriever span found (span kinds seen: LLM, CHAIN); "
        "faithfulness cannot be scored",
    ]
    caplog.clear()
    clock.now += 60
    report.observe("shop", no_ctx)  # the interval passed: the records since the last line, counted
    assert lines(caplog) == [
        "service shop: 12 records had no retrieved contexts — no retriever span found (span kinds seen: LLM, CHAIN); "
        "faithfulness cannot be scored"
    ]
    get = registry.get_sample_value
    assert get("ragtrace_record_incomplete_total", {"service": "shop", "field": "retrieved_contexts"}) == 13
    assert get("ragtrace_record_incomplete_total", {"service": "shop", "field": "response"}) == 1
    assert get("ragtrace_record_incomplete_total", {"service": "search", "field": "retrieved_contexts"}) == 1


def test_services_from_the_traffic_stay_bounded(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    clock = Clock()
    registry = CollectorRegistry()
    report = IncompleteRecords(
        registry, BoundedLabel(2, 600.0, clock), interval=60.0, max_series=2000, idle_seconds=600.0, clock=clock
    )
    for i in range(50):
        report.observe(f"svc-\x1b[31m{i}", [("model", "llm_without_model", "LLM span(s) 'x' recorded no model name")])
    services = {
        s.labels["service"] for m in registry.collect() if m.name == "ragtrace_record_incomplete" for s in m.samples
    }
    assert services == {"svc-_[31m0", "svc-_[31m1", "other"}  # sanitised, two slots, the rest "other"
    assert registry.get_sample_value("ragtrace_record_incomplete_total", {"service": "other", "field": "model"}) == 48
    assert len(lines(caplog)) == 3  # log keys are bounded the same way
    assert all("\x1b" not in line for line in lines(caplog))


def test_causes_and_fields_are_a_fixed_set():
    """Every diagnosis names a field and a cause of the fixed sets (the metric's and the log's bounds)."""
    record = RagRecord(trace_id="0" * 31 + "1", streamed=True, error="TimeoutError: boom")
    missing = missing_fields(record, [])
    assert [m.field for m in missing] == list(FIELDS)
    assert {m.cause for m in missing} <= set(CAUSES)
    assert {m.field: m.cause for m in missing}["response"] == "request_failed"
    assert {m.field: m.cause for m in missing}["retrieved_contexts"] == "no_retriever_span"


def test_blocked_metrics_follow_what_each_metric_requires():
    blocked = blocked_metrics(ScoringConfig(metrics=["faithfulness", "bleu"], pipelines={"qa": ["latency"]}))
    assert blocked["retrieved_contexts"] == ["faithfulness"]
    assert blocked["response"] == ["faithfulness", "bleu"]
    assert blocked["ttft"] == ["latency"]
    assert "model" not in blocked


async def test_a_failing_report_never_loses_the_record(tmp_path):
    class Broken:
        def observe(self, service, missing):
            raise RuntimeError("boom")

    stack = Stack()
    _, request = F.to_request(F.ragtrace_shaped(n_docs=0))
    stack.assembler.add(extract_spans(request))
    queue = SQLiteQueue(tmp_path / "queue.sqlite")
    try:
        sweeper = Sweeper(stack.assembler, Sampler(SamplingConfig(rate=1.0)), queue, stack.metrics, Broken())
        assert await sweeper.run_once(everything=True) == 1
        sweeper.close()
        assert queue.depth() == 1
    finally:
        queue.close()


async def test_the_served_collector_reports_incomplete_records(tmp_path):
    cfg = load_config(
        overrides={
            "role": "receiver",
            "data_dir": str(tmp_path),
            "listen": {"http_port": 0, "grpc_port": 0, "metrics_port": 0},
            "assembly": {"grace_seconds": 30.0, "sweep_interval_seconds": 60.0},
        },
        environ={},
    )
    app = CollectorApp(cfg)
    await app.start()
    try:
        await post_capture(app.http_port, "oi_langchain")
    finally:
        await app.stop(drain_timeout=1)  # the last sweep builds what is still in assembly
    labels = {"service": "peer-oi_langchain", "field": "ttft"}  # its LangChain LLM span has no first-token time
    assert app.registry.get_sample_value("ragtrace_record_incomplete_total", labels) == 3
