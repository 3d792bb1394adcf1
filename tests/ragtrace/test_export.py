"""Real OTLP export over loopback (HTTP/protobuf and gRPC) to the test sink; dead and slow
exporters; an app that brings its own TracerProvider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import ragtrace
from ragtrace import attributes as A
from tests.support.net import free_port
from tests.support.otlp_sink import OtlpSink

REPO = Path(__file__).resolve().parents[2]


@ragtrace.retriever(data_source="kb")
def retrieve(query):
    return [{"id": "d1", "content": "Paris is the capital of France.", "score": 0.9, "metadata": {"lang": "en"}}]


@ragtrace.generator(model="openai/gpt-4o-mini")
def generate(question, contexts):
    yield "Paris"
    yield "."


@ragtrace.pipeline(name="export-test")
def pipe(question):
    ragtrace.annotate(reference="Paris", sample=True, tags=["t"])
    docs = retrieve(question)
    return "".join(generate(question, [d["content"] for d in docs]))


@pytest.fixture
def sink():
    s = OtlpSink()
    yield s
    s.stop()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_spans_reach_a_real_otlp_receiver(sink, restore_settings, protocol):
    if protocol == "grpc":
        endpoint = f"http://127.0.0.1:{sink.start_grpc()}"
    else:
        endpoint = f"http://127.0.0.1:{sink.start_http()}"
    handle = ragtrace.init(
        service_name="svc-under-test", endpoint=endpoint, protocol=protocol, set_global=False, schedule_delay_ms=50
    )
    try:
        assert pipe("What is the capital of France?") == "Paris."
        assert handle.force_flush(10.0)
        got = {s["name"]: s for s in sink.wait_for_spans(3)}
    finally:
        handle.shutdown(5.0)
    root, ret, gen = got["export-test"], got["retrieve"], got["generate"]
    assert root["resource"]["service.name"] == "svc-under-test"
    assert ret["parent_span_id"] == root["span_id"] and gen["parent_span_id"] == root["span_id"]
    assert len({root["trace_id"], ret["trace_id"], gen["trace_id"]}) == 1
    ra, ga, ta = root["attributes"], gen["attributes"], ret["attributes"]
    assert ra[A.RAGTRACE_SPAN_ROLE] == "pipeline" and ra[A.RAGTRACE_PIPELINE_NAME] == "export-test"
    assert ra[A.RAGTRACE_REFERENCE] == "Paris" and ra[A.RAGTRACE_SAMPLE] is True and ra[A.TAG_TAGS] == ["t"]
    assert ta[A.document_attr(0, "score")] == 0.9 and ta[A.GEN_AI_DATA_SOURCE_ID] == "kb"
    assert json.loads(ta[A.document_attr(0, "metadata")]) == {"lang": "en"}
    assert ga[A.GEN_AI_REQUEST_STREAM] is True and ga[A.RAGTRACE_CHUNK_COUNT] == 2
    assert ga[A.RAGTRACE_CONTEXT_DOCUMENTS] == [ret["span_id"] + ":0"] and A.RAGTRACE_CONTEXTS not in ga
    assert ta[A.document_attr(0, "content")] == "Paris is the capital of France."
    assert ga[A.OUTPUT_VALUE] == "Paris."
    assert handle.stats()["spans_exported"] == 3


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_unreachable_exporter_never_blocks_or_breaks_the_app(restore_settings, protocol):
    dead = free_port()  # nothing listens here
    handle = ragtrace.init(
        endpoint=f"http://127.0.0.1:{dead}",
        protocol=protocol,
        set_global=False,
        schedule_delay_ms=20,
        max_queue_size=256,
        export_timeout_s=1.0,
    )
    t0 = time.perf_counter()
    for i in range(300):
        assert pipe(f"q{i}") == "Paris."
    app_time = time.perf_counter() - t0
    t1 = time.perf_counter()
    handle.shutdown(2.0)
    shutdown_time = time.perf_counter() - t1
    stats = handle.stats()
    assert app_time < 10.0  # 900 spans while the exporter fails: no waiting on it
    assert shutdown_time < 6.0  # bounded, whatever the exporter does
    assert stats["spans_ended"] == 900
    assert stats["spans_exported"] == 0
    assert stats["spans_dropped"] + stats["spans_failed"] > 0


def test_slow_sink_drops_and_counts_with_a_bounded_queue(sink, restore_settings):
    sink.delay = 0.3
    port = sink.start_http()
    handle = ragtrace.init(
        endpoint=f"http://127.0.0.1:{port}",
        set_global=False,
        schedule_delay_ms=10,
        max_queue_size=64,
        export_timeout_s=2.0,
    )
    for i in range(400):
        pipe(f"q{i}")
    stats = handle.stats()
    handle.shutdown(3.0)
    assert stats["spans_ended"] == 1200
    assert stats["spans_dropped"] > 0
    assert len(handle.processor._batch_processor._queue) <= 64


def test_app_with_its_own_tracer_provider_is_used_as_is():
    code = textwrap.dedent("""
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import ragtrace

        exporter = InMemorySpanExporter()
        app_provider = TracerProvider()
        app_provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(app_provider)
        app_tracer = trace.get_tracer("app")

        @ragtrace.retriever
        def retrieve(query):
            return ["doc"]

        before = retrieve("before init")         # the global proxy already reaches the app's provider
        handle = ragtrace.init(service_name="ignored")
        with app_tracer.start_as_current_span("http-request") as outer:
            retrieve("after init")
        spans = {s.name + ":" + str(dict(s.attributes).get("input.value")): s for s in exporter.get_finished_spans()}
        inner = spans["retrieve:after init"]
        print(json.dumps({
            "owns": handle.owns_provider,
            "processor": handle.processor is not None,
            "same_provider": handle.provider is app_provider,
            "names": sorted(spans),
            "parent_is_app_span": inner.parent.span_id == spans["http-request:None"].context.span_id,
        }))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGTRACE_", "OTEL_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res == {
        "owns": False,
        "processor": False,
        "same_provider": True,
        "names": ["http-request:None", "retrieve:after init", "retrieve:before init"],
        "parent_is_app_span": True,
    }


def test_env_configuration_is_resolved(monkeypatch, restore_settings, sink):
    port = sink.start_http()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    handle = ragtrace.init(set_global=False, schedule_delay_ms=20)
    assert handle.endpoint == f"http://127.0.0.1:{port}/v1/traces"
    retrieve("q")
    handle.force_flush(5.0)
    spans = sink.wait_for_spans(1)
    handle.shutdown(2.0)
    assert spans[0]["resource"]["service.name"] == "from-env"
    # the argument wins over the environment
    h2 = ragtrace.init(endpoint="http://127.0.0.1:1", set_global=False)
    assert h2.endpoint == "http://127.0.0.1:1/v1/traces"
    h2.shutdown(1.0)


def test_init_after_shutdown_exports_again(sink):
    """A second ``init()`` in the same process (a notebook re-running its setup, ``run_requests``
    called twice) must not adopt the global provider the first handle shut down."""
    port = sink.start_http()
    code = textwrap.dedent("""
        import ragtrace

        @ragtrace.retriever
        def retrieve(query):
            return ["doc"]

        for round in ("first", "second"):
            handle = ragtrace.init(service_name="twice", schedule_delay_ms=20)
            retrieve(round)
            handle.shutdown(5.0)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGTRACE_", "OTEL_"))}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    spans = sink.wait_for_spans(2, timeout=10)
    assert sorted(s["attributes"][A.INPUT_VALUE] for s in spans) == ["first", "second"]
