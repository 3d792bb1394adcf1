"""ragtrace's direct OTLP protobuf encoder against OpenTelemetry's, byte for byte (issue 35).

The contract: for every batch of spans, ``ragtrace.otlp_encoding.encode_spans(spans)`` is exactly
``opentelemetry...trace_encoder.encode_spans(spans).SerializeToString()``. Batches are generated from a seed over
every feature OpenTelemetry's encoder writes; spans made by ragtrace's decorators are checked too; and
values OpenTelemetry's encoder refuses make the whole batch go to its encoder.
"""

from __future__ import annotations

import random

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as otel_encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util.types import Attributes

import ragtrace
from ragtrace import config
from ragtrace import otlp_encoding as enc
from tests.support.otlp_sink import OtlpSink

STRINGS = [
    "",
    "a",
    "é",
    "日本語",
    "𝄞 music",  # non-BMP: 4 UTF-8 bytes, a surrogate pair in UTF-16
    "🙂" * 40,
    "x" * 127,
    "x" * 128,  # a 2-byte length varint
    "lorem ipsum " * 1400,  # a 3-byte length varint
    "\x00nul\ttab\n",
    "key=value,other",
]
INTS = [0, 1, -1, 127, 128, -128, 300, 2**31, -(2**31), 2**32, 2**63 - 1, -(2**63), 1234567890123]
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, -1e-300, float("inf"), float("-inf"), 3.141592653589793]


def _value(rng: random.Random, depth: int = 0, none: bool = False):
    kind = rng.randrange(12 if depth < 2 else 6)
    if kind == 0:
        return rng.choice(STRINGS)
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice(INTS + [rng.randint(-(2**63), 2**63 - 1)])
    if kind == 3:
        return rng.choice(FLOATS + [rng.uniform(-1e6, 1e6)])
    if kind == 4:
        return rng.choice([b"", b"\x00\xff", bytes(range(256))])
    if kind == 5:
        return None if none else rng.choice(INTS)
    if kind in (6, 7):  # a homogeneous sequence, as the SDK's attributes hold
        each = rng.choice([STRINGS, [True, False], INTS, FLOATS, [b"a", b""]])
        seq = [rng.choice(each) for _ in range(rng.randrange(4))]
        return tuple(seq) if kind == 6 else seq
    if kind == 8:
        return [_value(rng, depth + 1, none) for _ in range(rng.randrange(3))]  # mixed, nested
    if kind == 9:
        return {rng.choice(STRINGS): _value(rng, depth + 1, none) for _ in range(rng.randrange(3))}  # kvlist
    return rng.choice(STRINGS)


NONE = {"on": False}  # set by the test of None values (which OpenTelemetry's releases encode differently)


def _attributes(rng: random.Random, n: int | None = None) -> dict:
    n = rng.randrange(6) if n is None else n
    return {rng.choice(STRINGS) + str(i % 3): _value(rng, none=NONE["on"]) for i in range(n)}


def _context(rng: random.Random, remote: bool | None = None) -> SpanContext:
    state = TraceState() if rng.random() < 0.6 else TraceState([("vendor", "v1"), ("rojo", "00f067aa0ba902b7")])
    return SpanContext(
        trace_id=rng.choice([1, 2**128 - 1, rng.getrandbits(128) or 1]),
        span_id=rng.choice([1, 2**64 - 1, rng.getrandbits(64) or 1]),
        is_remote=rng.random() < 0.5 if remote is None else remote,
        trace_flags=TraceFlags(rng.choice([0, 1])),
        trace_state=state,
    )


RESOURCES = [
    Resource({"service.name": "a", "n": 1}),
    Resource({"service.name": "a", "n": 1}),  # equal to the first, another object: one group
    Resource({"service.name": "b", "list": ("x", "y")}, schema_url="https://opentelemetry.io/schemas/1.21.0"),
    Resource({}),
    Resource({"service.name": "a", "n": True}),  # == the first (1 == True) but hashed apart: its own group
]
SCOPES = [
    None,
    InstrumentationScope("ragtrace"),
    InstrumentationScope("ragtrace"),  # equal, distinct
    InstrumentationScope("other", "1.2.3", "https://schema/1", {"scope.attr": "v", "n": 3}),
    InstrumentationScope("", ""),
]


def _bounded(attrs: dict, dropped: int) -> Attributes:
    from opentelemetry.attributes import BoundedAttributes

    b = BoundedAttributes(maxlen=max(0, len(attrs) - dropped), attributes=None, immutable=False)
    for k, v in attrs.items():
        if v is not None:
            b[k] = v
    return b


def _span(rng: random.Random) -> ReadableSpan:
    events = [
        Event(
            rng.choice(STRINGS),
            _attributes(rng) if rng.random() < 0.5 else _bounded(_attributes(rng, 4), rng.randrange(3)),
            timestamp=rng.choice([1, 2**64 - 1, rng.getrandbits(63)]),
        )
        for _ in range(rng.randrange(3))
    ]
    links = [
        Link(_context(rng), _attributes(rng) if rng.random() < 0.5 else _bounded(_attributes(rng, 4), 2))
        for _ in range(rng.randrange(3))
    ]
    if rng.random() < 0.3:
        ev = BoundedList(1)
        ev.extend(events)
        events = ev  # type: ignore[assignment]
        lk = BoundedList(1)
        lk.extend(links)
        links = lk  # type: ignore[assignment]
    attrs = _attributes(rng) if rng.random() < 0.7 else _bounded(_attributes(rng, 5), rng.randrange(4))
    start = rng.choice([0, 1, rng.getrandbits(63)])
    return ReadableSpan(
        name=rng.choice(STRINGS),
        context=_context(rng, remote=False),
        parent=rng.choice([None, _context(rng)]),
        resource=rng.choice(RESOURCES),
        attributes=attrs,
        events=events,
        links=links,
        kind=rng.choice(list(SpanKind)),
        status=rng.choice(
            [Status(), Status(StatusCode.OK), Status(StatusCode.ERROR, rng.choice(STRINGS)), Status(StatusCode.ERROR)]
        ),
        start_time=start,
        end_time=rng.choice([None, start, start + rng.randrange(10**9)]),
        instrumentation_scope=rng.choice(SCOPES),
    )


def _otel(spans) -> bytes:
    return otel_encode_spans(spans).SerializeToString()


@pytest.mark.parametrize("seed", range(40))
def test_generated_batches_are_byte_identical(seed):
    rng = random.Random(seed)
    direct = 0
    for _ in range(15):
        spans = [_span(rng) for _ in range(rng.randrange(1, 9))]
        expected = _otel(spans)
        assert enc.encode_spans(spans) == expected
        try:
            fast = enc.encode_spans_fast(spans)  # the direct encoder itself, not the fallback
        except enc._Unsupported:  # a None the SDK's attribute cleaning put in a sequence (see the module)
            continue
        assert fast == expected
        direct += 1
    assert direct >= 10


@pytest.mark.parametrize("seed", range(10))
def test_none_values_go_through_opentelemetrys_encoder(seed, monkeypatch):
    """An empty AnyValue from OpenTelemetry 1.35, skipped by 1.34: its encoder writes such a batch, whichever it is."""
    monkeypatch.setitem(NONE, "on", True)
    rng = random.Random(1000 + seed)
    for _ in range(10):
        spans = [_span(rng) for _ in range(rng.randrange(1, 6))]
        assert enc.encode_spans(spans) == _otel(spans)
    none = ReadableSpan(name="n", context=SpanContext(1, 2, False), attributes={"a": None})
    with pytest.raises(enc._Unsupported):
        enc.encode_spans_fast([none])


def test_empty_batch():
    assert enc.encode_spans([]) == _otel([]) == b""


def test_spans_of_a_real_provider_with_limits_and_remote_parents():
    exporter = InMemorySpanExporter()
    tp = TracerProvider(
        resource=Resource.create({"service.name": "svc"}),
        span_limits=SpanLimits(max_span_attributes=3, max_events=1, max_links=1, max_event_attributes=1),
    )
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tp.get_tracer("t", "0.1", schema_url="https://s")
    other = tp.get_tracer("u")
    remote = SpanContext(7, 9, is_remote=True, trace_flags=TraceFlags(1))
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    with tracer.start_as_current_span(
        "root", context=set_span_in_context(NonRecordingSpan(remote)), links=[Link(remote, {"a": 1}), Link(remote)]
    ) as root:
        root.set_attributes({f"k{i}": i for i in range(6)})
        root.add_event("e1", {"x": 1, "y": 2})
        root.add_event("e2")
        root.set_status(Status(StatusCode.ERROR, "boom"))
        with other.start_as_current_span("child", kind=SpanKind.CLIENT) as child:
            child.record_exception(ValueError("ünïcode 𝄞"))
    spans = exporter.get_finished_spans()
    assert any(s.dropped_attributes for s in spans) and any(s.dropped_events for s in spans)
    assert enc.encode_spans_fast(spans) == _otel(spans)
    tp.shutdown()


def test_spans_of_ragtrace_decorators(spans):
    docs = [
        {"id": f"doc-{i}", "content": "lorem ipsum 𝄞 " * 80, "score": 1.0 - i / 10, "metadata": {"i": i}}
        for i in range(5)
    ]

    @ragtrace.retriever(name="retrieve")
    def retrieve(q):
        return docs

    @ragtrace.generator(name="generate", model="m")
    def generate(question, contexts):
        yield from ("The ", "answer ", "é")

    @ragtrace.pipeline(name="rag")
    def rag(q):
        ragtrace.annotate(reference="x", tags=["a", "b"], sample=True)
        return "".join(generate(q, [d["content"] for d in retrieve(q)]))

    @ragtrace.pipeline(name="broken")
    def broken(q):
        raise RuntimeError("no")

    rag("what is x?")
    with pytest.raises(RuntimeError):
        broken("q")
    finished = spans.all()
    assert len(finished) >= 4
    assert enc.encode_spans_fast(finished) == _otel(finished)


class _Odd:
    pass


@pytest.mark.parametrize(
    "value",
    [2**63, -(2**63) - 1, _Odd(), "lone \ud800 surrogate", ["ok", _Odd()], {"k": 2**64}],
    ids=["above-int64", "below-int64", "object", "surrogate", "object-in-list", "big-in-map"],
)
def test_a_value_opentelemetry_refuses_sends_the_batch_through_its_encoder(value):
    good = _span(random.Random(1))
    bad = ReadableSpan(name="bad", context=SpanContext(1, 2, False), attributes={"ok": "yes", "bad": value})
    with pytest.raises(Exception):  # noqa: B017 - any failure of the direct encoder means fallback
        enc.encode_spans_fast([good, bad])
    assert enc.encode_spans([good, bad]) == otel_encode_spans([good, bad]).SerializePartialToString()


def test_init_exports_through_the_fast_encoder_and_the_env_switch_restores_opentelemetry(monkeypatch, restore_settings):
    monkeypatch.delenv("RAGTRACE_OTLP_ENCODER", raising=False)
    sink = OtlpSink()
    try:
        port = sink.start_http()
        handle = ragtrace.init(endpoint=f"http://127.0.0.1:{port}", set_global=False, schedule_delay_ms=50)
        inner = handle.exporter.inner
        assert type(inner).__module__ == "ragtrace.otlp_encoding" and isinstance(inner, OTLPSpanExporter)
        assert inner._send is not None  # this OpenTelemetry's sending step was found: the fast path is used

        @ragtrace.retriever(name="r")
        def r(q):
            return [{"id": "1", "content": "𝄞"}]

        r("q")
        assert handle.force_flush(10.0)
        assert sink.wait_for_spans(1)[0]["name"] == "r"
        assert handle.stats()["spans_exported"] == 1
        handle.shutdown(2.0)

        monkeypatch.setenv("RAGTRACE_OTLP_ENCODER", "OpenTelemetry")
        handle = ragtrace.init(endpoint=f"http://127.0.0.1:{port}", set_global=False)
        assert type(handle.exporter.inner) is OTLPSpanExporter
        handle.shutdown(2.0)
    finally:
        sink.stop()


def test_gzip_compression_is_honoured(monkeypatch, restore_settings):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    sink = OtlpSink()
    try:
        port = sink.start_http()
        handle = ragtrace.init(endpoint=f"http://127.0.0.1:{port}", set_global=False, schedule_delay_ms=50)

        @ragtrace.retriever(name="gz")
        def r(q):
            return []

        r("q")
        assert handle.force_flush(10.0)
        assert sink.wait_for_spans(1)[0]["name"] == "gz"
        handle.shutdown(2.0)
    finally:
        sink.stop()


def test_the_encoder_choice_is_in_the_options(monkeypatch):
    monkeypatch.delenv("RAGTRACE_OTLP_ENCODER", raising=False)
    assert config.Options.resolve().otlp_encoder == "ragtrace"
    monkeypatch.setenv("RAGTRACE_OTLP_ENCODER", "opentelemetry")
    assert config.Options.resolve().otlp_encoder == "opentelemetry"
