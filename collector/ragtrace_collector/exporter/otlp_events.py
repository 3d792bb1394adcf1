"""Scores out as OpenTelemetry ``gen_ai.evaluation.result`` *events*: log records tied to the scored trace.

Each scored (or failed) result becomes one OTLP log record whose event name is ``gen_ai.evaluation.result``
and whose attributes are the GenAI semantic conventions' (``gen_ai.evaluation.name``,
``gen_ai.evaluation.score.value``, ``gen_ai.evaluation.score.label``, ``gen_ai.evaluation.explanation``,
``error.type`` when the judge failed). The record carries the scored trace's id and the span it evaluates (the
request's root span, ``record.metadata["root_span_id"]``, set by the assembler), so a backend (Tempo + Loki,
Grafana, an OTel Collector) shows the scores beside the request they judge.

Events, not spans: an evaluation span stamped at scoring time inside the scored trace stretched the trace (a
102 ms request showed 2.8 s in Phoenix, and the project's p99 latency with it). A log record adds nothing to
any trace's duration.

Records go through the OTel logs SDK's batch processor and OTLP log exporter (HTTP/protobuf or gRPC) on a
private ``LoggerProvider`` (never the global one, so an app embedding the collector keeps its own). Sending never
blocks scoring: the batch processor drops on overflow and a dead downstream only costs log lines.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from ragtrace import attributes as A
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult, unsupported_claim_verdicts, unsupported_claims

log = logging.getLogger(__name__)

SERVICE_NAME = "ragtrace-collector"
SCOPE = "ragtrace.collector.evaluation"
MAX_EXPLANATION_CHARS = 2000
LOGS_PATH = "/v1/logs"


def logs_endpoint(endpoint: str) -> str:
    """The OTLP/HTTP logs URL for ``endpoint``: a base URL gets ``/v1/logs``; a ``/v1/traces`` URL (what this key
    held when scores were sent as spans) is pointed at ``/v1/logs`` of the same server; any other path is kept."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    if path == "":
        return urlunsplit(parts._replace(path=LOGS_PATH))
    if path.endswith("/v1/traces"):
        log.warning("export.otlp_events.endpoint %s: evaluation events are logs now, sent to %s", endpoint, LOGS_PATH)
        return urlunsplit(parts._replace(path=path[: -len("/v1/traces")] + LOGS_PATH))
    return endpoint


def make_exporter(
    endpoint: str, protocol: str = "http/protobuf", headers: Mapping[str, str] | None = None, timeout: float = 5.0
) -> LogRecordExporter:
    """The OTLP log exporter for ``endpoint`` (a base URL like ``http://otel-collector:4318``)."""
    headers = dict(headers or {})
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcExporter

        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        return GrpcExporter(
            endpoint=parts.netloc, insecure=parts.scheme != "https", headers=headers or None, timeout=timeout
        )
    if protocol != "http/protobuf":
        raise ValueError(f"unsupported OTLP protocol {protocol!r}: use http/protobuf or grpc")
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpExporter

    return HttpExporter(endpoint=logs_endpoint(endpoint), headers=headers or None, timeout=timeout)


def _claim_problem(claim: dict[str, Any], where: str) -> str:
    """One claim the metric did not count as supported, saying which verdict it had: ``Contradicted: <claim>
    (<the judge's reason>)``, ``Not found in the contexts: <claim>``, or ``Unsupported: <claim> (<reason>)`` for a
    ``no`` whose reason does not say contradicted (an LLM judge's ``no`` may be either)."""
    statement = " ".join(claim["statement"].split())
    if claim["kind"] == "not_found":
        return f"Not found in {where}: {statement}"
    label = "Contradicted" if claim["kind"] == "contradicted" else "Unsupported"
    return f"{label}: {statement} ({claim['reason']})" if claim["reason"] else f"{label}: {statement}"


def explanation(result: MetricResult) -> str:
    """A short human-readable why: where the details hold per-claim verdicts, each claim not counted as supported
    with its verdict (contradicted first, then unsupported, then not found); else the unsupported claims where the
    metric lists them; else the reason. At most ``MAX_EXPLANATION_CHARS``."""
    details = result.details or {}
    problems = unsupported_claim_verdicts(details)
    if problems:
        where = "the source" if details.get("source") == "user_input" else "the contexts"  # summarization's source
        text = "; ".join(_claim_problem(c, where) for c in problems)
    elif problems is None and (bad := unsupported_claims(details)):
        text = "Unsupported claims: " + "; ".join(str(c) for c in bad)
    else:
        text = result.reason or ""
    return text if len(text) <= MAX_EXPLANATION_CHARS else text[: MAX_EXPLANATION_CHARS - 1] + "…"


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


def result_attributes(result: MetricResult) -> dict[str, Any]:
    """The ``gen_ai.evaluation.result`` attributes of one result (semantic conventions' names)."""
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
    return attrs


class EvaluationEvents:
    """Sends each metric result as a ``gen_ai.evaluation.result`` event (an OTLP log record) of the scored trace."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        protocol: str = "http/protobuf",
        headers: Mapping[str, str] | None = None,
        exporter: LogRecordExporter | None = None,
        batch: bool = True,
        timeout: float = 5.0,
    ) -> None:
        if exporter is None:
            if not endpoint:
                raise ValueError("EvaluationEvents needs an OTLP endpoint or an exporter")
            exporter = make_exporter(endpoint, protocol, headers, timeout)
        self.provider = LoggerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        # Scores are not urgent, but a second's delay keeps them close to the trace they judge.
        processor = (
            BatchLogRecordProcessor(exporter, schedule_delay_millis=1000)
            if batch
            else SimpleLogRecordProcessor(exporter)
        )
        self.provider.add_log_record_processor(processor)
        self.logger = self.provider.get_logger(SCOPE)

    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> int:
        """Queue one event per scored or failed result; returns how many were emitted."""
        trace_id = parse_trace_id(record.trace_id)
        if trace_id is None:
            return 0  # not a live trace (a dataset row): nothing to attach the score to
        span_id = parse_span_id((record.metadata or {}).get("root_span_id")) or 0  # 0: the trace, no span
        context = trace.set_span_in_context(
            NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)))
        )
        extra: dict[str, Any] = {"ragtrace.judge": judge}
        if record.pipeline:
            extra[A.RAGTRACE_PIPELINE_NAME] = record.pipeline
        if record.service:
            extra["ragtrace.evaluated.service"] = record.service
        emitted = 0
        for result in results:
            if result.status == "skipped":
                continue
            failed = result.status == "error"
            self.logger.emit(
                timestamp=time.time_ns(),
                context=context,
                severity_number=SeverityNumber.WARN if failed else SeverityNumber.INFO,
                severity_text="WARN" if failed else "INFO",
                attributes={**result_attributes(result), **extra},
                event_name=A.GEN_AI_EVALUATION_RESULT_EVENT,
            )
            emitted += 1
        return emitted

    def flush(self, timeout_millis: int = 5000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.provider.shutdown()
