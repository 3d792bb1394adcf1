"""End to end over loopback: the SDK's real exporters → the collector's receivers → assembled record →
sampled → queued (→ scored by the embedded judge → /metrics with exemplars, in the role=all test)."""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client.openmetrics.parser import text_string_to_metric_families

import ragtrace
from ragtrace_collector.config import load_config
from ragtrace_collector.queue import open_queue
from ragtrace_collector.service.app import CollectorApp
from tests.support import span_fixtures as F
from tests.support.net import free_port, wait_for_port

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def config(tmp_path, **over):
    base = {
        "role": "receiver",
        "data_dir": str(tmp_path),
        "listen": {"http_port": 0, "grpc_port": 0, "metrics_port": 0},
        "assembly": {"grace_seconds": 0.1, "sweep_interval_seconds": 0.05},
    }
    for key, value in over.items():
        if isinstance(value, dict):
            base.setdefault(key, {}).update(value)
        else:
            base[key] = value
    return load_config(overrides=base, environ={})


@pytest.fixture
async def collector(tmp_path):
    apps = []

    async def start(**over):
        app = CollectorApp(config(tmp_path, **over))
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.stop(drain_timeout=1.0)


async def wait_depth(app, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.queue.depth() >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"queue depth {app.queue.depth()} < {n}")


def queued(app):
    leased = app.queue.lease(100, 30)
    return {item.record.trace_id: item.record for item in leased}


async def scrape(app) -> str:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{app.metrics_port}/metrics", headers={"Accept": "application/openmetrics-text"}) as r,
    ):
        assert r.status == 200
        return await r.text()


def run_decorated_pipeline(endpoint: str, protocol: str) -> str:
    """The SDK's decorators on a small streaming RAG pipeline; returns the trace id."""
    provider = TracerProvider(resource=Resource.create({"service.name": "e2e-bot"}))
    handle = ragtrace.init(
        service_name="e2e-bot", endpoint=endpoint, protocol=protocol, tracer_provider=provider, set_global=False
    )
    docs = [{"id": d, "content": text, "score": score} for d, text, score in F.DOCS]

    @ragtrace.retriever
    def search(query: str):
        return docs

    @ragtrace.generator(model="offline-extractive")
    def answer(question: str, contexts: list):
        for word in F.ANSWER.split(" "):
            time.sleep(0.001)
            yield word + " "

    @ragtrace.pipeline(name="support")
    def handle_request(question: str) -> str:
        ragtrace.annotate(session_id="s-42", user_id="u-7", reference="two years")
        trace_id = ragtrace.current_trace_id()
        handle_request.trace_id = trace_id
        return "".join(answer(question, search(question))).strip()

    try:
        assert handle_request(F.QUESTION) == F.ANSWER
        handle.force_flush()
    finally:
        handle.shutdown()
    return handle_request.trace_id


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_sdk_decorators_to_queued_record(collector, protocol):
    app = await collector()
    endpoint = (
        f"http://127.0.0.1:{app.http_port}" if protocol == "http/protobuf" else f"http://127.0.0.1:{app.grpc_port}"
    )
    trace_id = await asyncio.to_thread(run_decorated_pipeline, endpoint, protocol)
    await wait_depth(app, 1)
    record = queued(app)[trace_id]
    assert record.service == "e2e-bot" and record.pipeline == "support"
    assert record.user_input == F.QUESTION and record.response.strip() == F.ANSWER
    assert [c.id for c in record.retrieved_contexts] == [d[0] for d in F.DOCS]
    assert record.model == "offline-extractive" and record.streamed is True
    assert record.ttft_seconds is not None and record.ttft_seconds > 0
    assert (record.session_id, record.user_id, record.reference) == ("s-42", "u-7", "two years")
    assert record.sampling_weight == 1.0
    text = await scrape(app)
    assert f'trace_id="{trace_id}"' in text  # latency exemplar of this very trace
    transport = "http" if protocol == "http/protobuf" else "grpc"
    assert f'ragtrace_spans_received_total{{transport="{transport}"}} 3.0' in text


async def test_spans_of_one_trace_in_separate_requests(collector):
    app = await collector(sampling={"rate": 1.0})
    provider = TracerProvider(resource=Resource.create({"service.name": "split"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{app.http_port}/v1/traces"))
    )
    trace_id = await asyncio.to_thread(F.emit, provider.get_tracer("t"), F.ragtrace_shaped())
    provider.shutdown()
    await wait_depth(app, 1)
    records = queued(app)
    assert list(records) == [trace_id]
    assert len(records[trace_id].retrieved_contexts) == 3 and records[trace_id].response == F.ANSWER
    g = app.registry.get_sample_value
    assert g("ragtrace_otlp_requests_total", {"transport": "http", "status": "ok"}) == 3
    assert g("ragtrace_assembly_completed_total", {"reason": "root"}) == 1


@pytest.mark.parametrize(
    "fixture",
    [F.openinference_langchain, F.openinference_llamaindex, F.openllmetry, F.openlit],
    ids=["openinference-langchain", "openinference-llamaindex", "openllmetry", "openlit"],
)
async def test_peer_conventions_through_the_receiver(collector, fixture):
    app = await collector()
    provider = TracerProvider(resource=Resource.create({"service.name": "peer"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{app.http_port}/v1/traces"))
    )
    trace_id = await asyncio.to_thread(F.emit, provider.get_tracer("peer"), fixture())
    provider.shutdown()
    await wait_depth(app, 1)
    record = queued(app)[trace_id]
    assert record.user_input == F.QUESTION and record.response == F.ANSWER
    assert record.model and record.output_tokens
    assert record.generation_duration_seconds and record.request_duration_seconds


async def test_sampling_rate_and_weights_reach_the_queue(collector):
    app = await collector(sampling={"rate": 0.3})
    provider = TracerProvider(resource=Resource.create({"service.name": "many"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{app.http_port}/v1/traces"))
    )

    def many():
        tracer = provider.get_tracer("t")
        return [F.emit(tracer, F.ragtrace_shaped(n_docs=1)[:1]) for _ in range(60)]

    ids = await asyncio.to_thread(many)
    provider.shutdown()
    await asyncio.sleep(0.5)
    await app.sweeper.run_once(everything=True)
    from ragtrace_collector.processor.sampling.sampler import in_rate_sample

    expected = {t for t in ids if in_rate_sample(t, 0.3)}
    records = queued(app)
    assert set(records) == expected
    assert all(r.sampling_weight == pytest.approx(1 / 0.3) for r in records.values())
    g = app.registry.get_sample_value
    assert g("ragtrace_traces_dropped_total", {"pipeline": "support", "reason": "rate"}) == 60 - len(expected)
    assert g("ragtrace_traces_received_total", {"service": "many", "pipeline": "support"}) == 60


async def test_bad_requests_against_the_app(collector):
    app = await collector(auth={"bearer_token": "e2e-token-0123456789"}, limits={"max_request_bytes": 10_000})
    url = f"http://127.0.0.1:{app.http_port}/v1/traces"
    _, request = F.to_request(F.ragtrace_shaped())
    wire = request.SerializeToString()
    auth = {"Authorization": "Bearer e2e-token-0123456789", "Content-Type": "application/x-protobuf"}
    async with aiohttp.ClientSession() as s:
        async with s.post(url, data=wire, headers={"Content-Type": "application/x-protobuf"}) as r:
            assert r.status == 401
        async with s.post(url, data=b"\x0a\xff\xff\xff", headers=auth) as r:
            assert r.status == 400
        async with s.post(url, data=wire[:-7], headers=auth) as r:  # truncated protobuf
            assert r.status == 400
        async with s.post(url, data=b"\x0a" * 20_000, headers=auth) as r:
            assert r.status == 413
        async with s.post(url, data=gzip.compress(wire), headers={**auth, "Content-Encoding": "gzip"}) as r:
            assert r.status == 200
    text = await scrape(app)
    for status, n in (("unauthenticated", 1), ("malformed", 2), ("too_large", 1), ("ok", 1)):
        assert f'ragtrace_otlp_requests_total{{status="{status}",transport="http"}} {n}.0' in text
    await wait_depth(app, 1)


async def test_role_all_scores_with_the_embedded_judge(collector):
    app = await collector(role="all", scoring={"metrics": ["faithfulness"], "concurrency": 1})
    trace_id = await asyncio.to_thread(run_decorated_pipeline, f"http://127.0.0.1:{app.http_port}", "http/protobuf")
    deadline = time.monotonic() + 60
    families = {}
    while time.monotonic() < deadline:
        families = {f.name: f for f in text_string_to_metric_families(await scrape(app))}
        score = families.get("ragtrace_eval_score")
        if score and any(s.name.endswith("_count") and s.value >= 1 for s in score.samples):
            break
        await asyncio.sleep(0.2)
    exemplars = [s.exemplar for s in families["ragtrace_eval_score"].samples if s.exemplar is not None]
    assert {e.labels["trace_id"] for e in exemplars} == {trace_id}
    assert any(
        s.labels.get("metric") == "faithfulness" and s.name.endswith("_count") and s.value == 1
        for s in families["ragtrace_eval_score"].samples
    )
    ttft = families["ragtrace_time_to_first_token_seconds"]
    assert any(s.exemplar is not None and s.exemplar.labels["trace_id"] == trace_id for s in ttft.samples)


def test_serve_process_flushes_on_sigterm(tmp_path):
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    env = {**os.environ, "RAGTRACE_ASSEMBLY__GRACE_SECONDS": "30", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragtrace_collector.cli",
            "serve",
            "--role",
            "receiver",
            "--data-dir",
            str(tmp_path),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc_port),
            "--metrics-port",
            str(metrics),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(http)
        wait_for_port(metrics)
        assert urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=5).status == 200
        provider = TracerProvider(resource=Resource.create({"service.name": "sig"}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{http}/v1/traces"))
        )
        trace_id = F.emit(provider.get_tracer("t"), F.ragtrace_shaped())
        provider.shutdown()
        proc.send_signal(signal.SIGTERM)  # the trace is still inside its 30 s grace period
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    queue = open_queue(f"sqlite:///{tmp_path / 'queue.sqlite'}", 100)
    try:
        records = [item.record for item in queue.lease(10, 30)]
    finally:
        queue.close()
    assert [r.trace_id for r in records] == [trace_id]
    assert records[0].metadata.get("ragtrace.assembly") == "shutdown"


def scripted_faithfulness(body: dict) -> dict:
    return {
        "claims": [{"claim": "The warranty covers defects", "relevant": "yes"}],
        "verdicts": [{"id": 1, "verdict": "yes", "reason": "stated in the contexts"}],
    }


async def test_judge_tokens_spent_close_the_token_budget(collector):
    from tests.support.scripted_openai import ScriptedOpenAI

    with ScriptedOpenAI(responder=scripted_faithfulness) as judge:
        app = await collector(
            role="all",
            judge={"model": "openai/judge", "base_url": judge.base_url, "api_key": "k", "max_retries": 0},
            scoring={"metrics": ["faithfulness"], "concurrency": 1},
            sampling={"budget": {"judge_tokens_per_hour": 50}},
        )
        provider = TracerProvider(resource=Resource.create({"service.name": "budget"}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{app.http_port}/v1/traces"))
        )
        tracer = provider.get_tracer("t")
        first = await asyncio.to_thread(F.emit, tracer, F.ragtrace_shaped())
        g = app.registry.get_sample_value
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not g(
            "ragtrace_evaluations_total", {"metric": "faithfulness", "outcome": "scored"}
        ):
            await asyncio.sleep(0.1)
        assert g("ragtrace_evaluations_total", {"metric": "faithfulness", "outcome": "scored"}) == 1
        spent = sum(r.prompt_tokens + r.completion_tokens for r in judge.chat_requests())
        assert spent > 50  # the first record's judging used up the hour's tokens
        await asyncio.to_thread(F.emit, tracer, F.ragtrace_shaped())  # a second request
        provider.shutdown()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not g(
            "ragtrace_traces_dropped_total", {"pipeline": "support", "reason": "budget_tokens"}
        ):
            await asyncio.sleep(0.1)
        assert g("ragtrace_traces_dropped_total", {"pipeline": "support", "reason": "budget_tokens"}) == 1
        assert g("ragtrace_traces_sampled_total", {"pipeline": "support", "reason": "rate"}) == 1
        assert g("ragtrace_traces_received_total", {"service": "budget", "pipeline": "support"}) == 2
        assert first
