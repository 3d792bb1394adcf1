"""Scores out as OpenTelemetry ``gen_ai.evaluation.result`` events, in the scored trace.

Each result becomes one short span ``gen_ai.evaluation <metric>`` carrying one
``gen_ai.evaluation.result`` event (``gen_ai.evaluation.name``, ``gen_ai.evaluation.score.value``,
``gen_ai.evaluation.score.label``, ``gen_ai.evaluation.explanation``) inside the *scored* trace:
its trace id is the record's, and its parent is the record's root span when the assembler
recorded it in ``record.metadata["root_span_id"]`` (16 hex digits); otherwise the evaluation span is
a root of that same trace. A trace backend (Tempo, Jaeger, Phoenix) then shows the scores beside
the request they judge.

Spans go through the OTel SDK's batch processor and OTLP exporter (HTTP/protobuf or gRPC) on a
private ``TracerProvider`` (never the global one, so an app embedding the collector keeps its own).
Sending never blocks scoring: the batch processor drops on overflow and a dead downstream only
costs log lines.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ragtrace import attributes as A
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult, unsupported_claims

log = logging.getLogger(__name__)

SERVICE_NAME = "ragtrace-collector"
MAX_EXPLANATION_CHARS = 2000

_forced_trace_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("ragtrace_eval_trace_id", default=None)


class _RecordTraceIds(IdGenerator):
    """Gives a root evaluation span the scored record's trace id (set per emit)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = _forced_trace_id.get()
        return forced if forced is not None else self._random.generate_trace_id()


def make_exporter(
    endpoint: str, protocol: str = "http/protobuf", headers: Mapping[str, str] | None = None, timeout: float = 5.0
) -> SpanExporter:
    """The OTLP span exporter for ``endpoint`` (a base URL like ``http://tempo:4318``; the HTTP
    exporter's ``/v1/traces`` path is added when absent)."""
    headers = dict(headers or {})
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        return GrpcExporter(
            endpoint=parts.netloc, insecure=parts.scheme != "https", headers=headers or None, timeout=timeout
        )
    if protocol != "http/protobuf":
        raise ValueError(f"unsupported OTLP protocol {protocol!r}: use http/protobuf or grpc")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint, headers=headers or None, timeout=timeout)


def explanation(result: MetricResult) -> str:
    """A short human-readable why: the unsupported claims where the metric lists them, else the reason."""
    bad = unsupported_claims(result.details)
    if bad:
        text = "Unsupported claims: " + "; ".join(str(c) for c in bad)
    else:
        text = result.reason or ""
    return text[:MAX_EXPLANATION_CHARS]


def parse_trace_id(value: str | None) -> int | None:
    if not value:
        return None
    try:
        tid = int(value, 16)
    except ValueError:
        return None
    return tid if 0 < tid < 2**128 else None


def parse_span_id(value: Any) -> int | None:
    if isinstance(value, int):
        return value if 0 < value < 2**64 else None
    if not isinstance(value, str) or not value:
        return None
    try:
        sid = int(value, 16)
    except ValueError:
        return None
    return sid if 0 < sid < 2**64 else None


class EvaluationEvents:
    """Sends each metric result as a ``gen_ai.evaluation.result`` event in the scored trace."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        protocol: str = "http/protobuf",
        headers: Mapping[str, str] | None = None,
        exporter: SpanExporter | None = None,
        batch: bool = True,
        timeout: float = 5.0,
    ) -> None:
        if exporter is None:
            if not endpoint:
                raise ValueError("EvaluationEvents needs an OTLP endpoint or an exporter")
            exporter = make_exporter(endpoint, protocol, headers, timeout)
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": SERVICE_NAME}), id_generator=_RecordTraceIds()
        )
        # Scores are not urgent, but a second's delay keeps them close to the trace they judge.
        processor = BatchSpanProcessor(exporter, schedule_delay_millis=1000) if batch else SimpleSpanProcessor(exporter)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("ragtrace.collector.evaluation")

    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> int:
        """Queue one span+event per scored or failed result; returns how many were emitted."""
        trace_id = parse_trace_id(record.trace_id)
        if trace_id is None:
            return 0  # not a live trace (a dataset row): nothing to attach the score to
        root = parse_span_id((record.metadata or {}).get("root_span_id"))
        parent = None
        if root is not None:
            parent = trace.set_span_in_context(
                NonRecordingSpan(
                    SpanContext(trace_id, root, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
                )
            )
        emitted = 0
        token = _forced_trace_id.set(trace_id)
        try:
            for result in results:
                if result.status == "skipped":
                    continue
                self._emit_one(record, result, judge, parent)
                emitted += 1
        finally:
            _forced_trace_id.reset(token)
        return emitted

    def _emit_one(self, record: RagRecord, result: MetricResult, judge: str, parent: Any) -> None:
        now = time.time_ns()
        attrs: dict[str, Any] = {A.GEN_AI_EVALUATION_NAME: result.metric}
        if result.score is not None:
            attrs[A.GEN_AI_EVALUATION_SCORE_VALUE] = float(result.score)
        if result.label:
            attrs[A.GEN_AI_EVALUATION_SCORE_LABEL] = result.label
        why = explanation(result)
        if why:
            attrs[A.GEN_AI_EVALUATION_EXPLANATION] = why
        if result.status == "error":
            attrs[A.ERROR_TYPE] = "judge_error"
        span_attrs = {
            A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_EVALUATOR,
            A.GEN_AI_EVALUATION_NAME: result.metric,
            "ragtrace.judge": judge,
        }
        if record.pipeline:
            span_attrs[A.RAGTRACE_PIPELINE_NAME] = record.pipeline
        if record.service:
            span_attrs["ragtrace.evaluated.service"] = record.service
        span = self.tracer.start_span(
            f"gen_ai.evaluation {result.metric}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=span_attrs,
            start_time=now,
        )
        span.add_event(A.GEN_AI_EVALUATION_RESULT_EVENT, attributes=attrs, timestamp=now)
        if result.status == "error":
            span.set_status(Status(StatusCode.ERROR, result.reason or "evaluation failed"))
        span.end(end_time=now)

    def flush(self, timeout_millis: int = 5000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.provider.shutdown()
