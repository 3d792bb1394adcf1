"""Feedback spans as the OTLP exporters send them, malformed ones included (collector tests of the feedback intake)."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from ragtrace import attributes as A


def feedback_request(*items: dict[str, Any], service: str = "fb-app"):
    """An OTLP request of feedback spans, made by the OTel SDK and encoded as its exporters encode it: each item's
    ``trace_id`` and the span's attributes (``value`` as given, malformed ones too)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for item in items:
        parent = SpanContext(int(item["trace_id"], 16), 0x1234, True, TraceFlags(TraceFlags.SAMPLED))
        attrs = {A.RAGTRACE_SPAN_ROLE: A.ROLE_FEEDBACK, A.RAGTRACE_FEEDBACK_NAME: item.get("name", "user_feedback")}
        if "value" in item:
            attrs[A.RAGTRACE_FEEDBACK_VALUE] = item["value"]
        attrs.update(item.get("attrs", {}))
        span = tracer.start_span(
            A.RAGTRACE_FEEDBACK_SPAN, context=trace.set_span_in_context(NonRecordingSpan(parent)), attributes=attrs
        )
        span.end()
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans())
