"""Decoded spans' byte estimate: what ``max_inflight_bytes`` bounds must track the memory they hold."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from ragtrace_collector.receiver.decode import extract_spans
from tests.support import span_fixtures as F


def _request(decorate, n: int = 40):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for i in range(n):
        with tracer.start_as_current_span("llm") as span:
            decorate(span, i)
    return encode_spans(exporter.get_finished_spans())


def _content_events(span, i):  # OpenLIT-style prompt event and an exception with its stack trace
    span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": "user: " + "word " * 2000 + str(i)})
    span.add_event("exception", {"exception.type": "E", "exception.stacktrace": "frame\n" * 500 + str(i)})


def _array_attributes(span, i):
    span.set_attribute("gen_ai.request.stop_sequences", [f"stop-{i}-{j}-" + "y" * 80 for j in range(100)])
    span.set_attribute("llm.numbers", list(range(100)))


def _big_name(span, i):  # every kept field counts, not only attributes (a hostile exporter picks the one that doesn't)
    span.update_name(f"n{i}-" + "x" * 100_000)


def _big_status_message(span, i):
    span.set_status(Status(StatusCode.ERROR, f"e{i}-" + "y" * 100_000))


def _unshared_keys(span, i):  # keys past what the shared key table holds: each span keeps (and counts) its own
    for j in range(40):
        span.set_attribute(f"gen_ai.k{i}-{j}-" + "k" * 220, "v")


def _non_ascii_attributes(span, i):  # CPython keeps these at 2 and 4 bytes a character
    span.set_attribute("gen_ai.prompt", f"{i} " + "\u00e9\u4e2d" * 20_000)
    span.set_attribute("gen_ai.completion", f"{i} " + "\N{GRINNING FACE}" * 20_000)
    span.update_name("\u8c03\u7528-" + "\u4e2d" * 5_000)


@pytest.mark.parametrize(
    "requests",
    [
        pytest.param(lambda: [_request(_content_events)], id="content-events"),
        pytest.param(lambda: [_request(_array_attributes)], id="array-attributes"),
        pytest.param(lambda: [F.to_request(F.ragtrace_shaped())[1] for _ in range(30)], id="ragtrace"),
        pytest.param(lambda: [F.to_request(F.openlit())[1] for _ in range(30)], id="openlit"),
        pytest.param(lambda: [_request(_big_name)], id="big-span-names"),
        pytest.param(lambda: [_request(_big_status_message)], id="big-status-messages"),
        pytest.param(lambda: [_request(_non_ascii_attributes)], id="non-ascii-text"),
        pytest.param(lambda: [_request(_unshared_keys)], id="unshared-keys"),
        pytest.param(
            lambda: [F.to_request(F.ragtrace_shaped(), service=f"svc-{i}-" + "s" * 200_000)[1] for i in range(10)],
            id="big-resource-attributes",
        ),
    ],
)
def test_byte_estimate_tracks_python_memory(requests):
    reqs = requests()
    gc.collect()
    # Only allocations made under our decoder count: threads left running by other tests (exporters,
    # litellm's workers, even our own queues' threads) allocate during the window too, and a plain before/after
    # total picks that up (in CI, under load, 25% more than the decoder held).
    ours = [tracemalloc.Filter(True, "*/ragtrace_collector/receiver/decode.py", all_frames=True)]
    tracemalloc.start(64)
    try:
        before = tracemalloc.take_snapshot().filter_traces(ours)
        decoded = [extract_spans(r) for r in reqs]
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(ours)
    finally:
        tracemalloc.stop()
    held = sum(t.size for t in after.traces) - sum(t.size for t in before.traces)
    estimate = sum(s.nbytes for d in decoded for spans in d.traces.values() for s in spans)
    assert 0.8 * held <= estimate <= 1.3 * held, (estimate, held)


def test_spans_hold_one_str_for_each_attribute_key():
    # spans repeat the same few dozen keys: assembly holds one copy of each, not one a span (a quarter of a trace)
    decoded = [extract_spans(F.to_request(F.ragtrace_shaped())[1]) for _ in range(3)]
    objects: dict[str, set[int]] = {}
    for d in decoded:
        for spans in d.traces.values():
            for span in spans:
                for key in span.attrs:
                    objects.setdefault(key, set()).add(id(key))
    assert len(objects) > 10
    assert all(len(ids) == 1 for ids in objects.values()), {k: len(v) for k, v in objects.items() if len(v) > 1}
