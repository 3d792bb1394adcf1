"""Scores out as OpenTelemetry ``gen_ai.evaluation.result`` *events*: log records tied to the scored trace.

Each scored (or failed) result becomes one OTLP log record whose event name is ``gen_ai.evaluation.result``
and whose attributes are the GenAI semantic conventions' (``gen_ai.evaluation.name``,
``gen_ai.evaluation.score.value``, ``gen_ai.evaluation.score.label``, ``gen_ai.evaluation.explanation``,
``error.type`` when the judge failed), and what produced the score — the conventions name none, so under
``ragtrace.``: ``ragtrace.evaluation.judge.model``, ``ragtrace.evaluation.judge.hash``,
``ragtrace.evaluation.metric.version``, ``ragtrace.version`` and ``ragtrace.evaluation.provenance.id``. The record carries the scored trace's id and the span it evaluates (the
request's root span, ``record.metadata["root_span_id"]``, set by the assembler), so a backend (Tempo + Loki,
Grafana, an OTel Collector) shows the scores beside the request they judge.

Events, not spans: an evaluation span stamped at scoring time inside the scored trace stretched the trace (a
102 ms request showed 2.8 s in Phoenix, and the project's p99 latency with it). A log record adds nothing to
any trace's duration.

Records go through the OTel logs SDK's batch processor and OTLP log exporter (HTTP/protobuf or gRPC) on a
private ``LoggerProvider`` (never the global one, so an app embedding the collector keeps its own). Sending never
blocks scoring: the batch processor drops on overflow and a dead downstream only costs log lines. Over HTTP the
exporter's session reads a reply's body up to ``MAX_REPLY_BYTES`` and fails a redirect (the SDK counts a 3xx as
delivered; see :mod:`~ragtrace_collector.exporter.sender_loop`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from prometheus_client import CollectorRegistry, Counter

from ragtrace import attributes as A
from ragtrace_collector.config import OtlpEventsConfig
from ragtrace_collector.exporter.sender_loop import MAX_REPLY_BYTES, describe_status
from ragtrace_collector.internal.urls import mask_credentials
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import Claim, ClaimVerdicts, MetricResult
from ragtrace_collector.scoring.sink import ResultSink

log = logging.getLogger(__name__)

SERVICE_NAME = "ragtrace-collector"
SCOPE = "ragtrace.collector.evaluation"
MAX_EXPLANATION_CHARS = 2000
LOGS_PATH = "/v1/logs"
EXPORTER = "otlp_events"  # the name its confirmations are kept under in the results store
STATUSES = ("scored", "error")  # the results it sends
#: The event attribute naming the result it carries, ``<record key>/<metric>``: the same for every delivery of one
#: result, so a backend (or a query) can keep one event per id when a restart sends a result again.
EVALUATION_ID = "ragtrace.evaluation.id"
#: A result's provenance (``scoring/provenance.py``) as event attributes: provenance key → attribute name.
PROVENANCE_ATTRIBUTES = {
    "judge_model": "ragtrace.evaluation.judge.model",
    "judge_hash": "ragtrace.evaluation.judge.hash",
    "metric_version": "ragtrace.evaluation.metric.version",
    "ragtrace_version": "ragtrace.version",
    "id": "ragtrace.evaluation.provenance.id",
}
OUTCOMES = ("sent", "failed", "shutdown")

#: Told the ``(record key, metric)`` results whose events the endpoint took, from the exporting thread.
Confirm = Callable[[list[tuple[str, str]]], None]


def evaluation_id(record_key: str, metric: str) -> str:
    """The deterministic id of one result's event (:data:`EVALUATION_ID`)."""
    return f"{record_key}/{metric}"


def parse_evaluation_id(value: object) -> tuple[str, str] | None:
    """``(record key, metric)`` of an :func:`evaluation_id` (metric names hold no ``/``)."""
    if not isinstance(value, str) or "/" not in value:
        return None
    key, _, metric = value.rpartition("/")
    return (key, metric) if key and metric else None


def logs_endpoint(endpoint: str) -> str:
    """The OTLP/HTTP logs URL for ``endpoint``: a base URL gets ``/v1/logs``; a ``/v1/traces`` URL (what this key
    held when scores were sent as spans) is pointed at ``/v1/logs`` of the same server; any other path is kept."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    if path == "":
        return urlunsplit(parts._replace(path=LOGS_PATH))
    if path.endswith("/v1/traces"):
        log.warning(
            "export.otlp_events.endpoint %s: evaluation events are logs now, sent to %s",
            mask_credentials(endpoint),
            LOGS_PATH,
        )
        return urlunsplit(parts._replace(path=path[: -len("/v1/traces")] + LOGS_PATH))
    return endpoint


class Redirected(requests.RequestException):
    """A downstream answered a redirect: the batch is not delivered (never re-sent where it points)."""


class BoundedSession(requests.Session):
    """The OTLP log exporter's session: a reply's body read up to ``MAX_REPLY_BYTES`` (the connection closed on
    the rest, not drained), and a redirect raised as :class:`Redirected`, which fails the export. A redirect is
    logged here (again when it points elsewhere): the SDK drops its own failure line for 20 s after another."""

    def __init__(self) -> None:
        super().__init__()
        self._told: str | None = None  # the last redirect logged

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True
        kwargs["allow_redirects"] = False
        response = super().send(request, **kwargs)
        raw = response.raw
        try:
            response._content = raw.read(MAX_REPLY_BYTES, decode_content=True) or b""
            response._content_consumed = not raw.read(1, decode_content=True)  # ended: the connection is reused
        finally:
            response.close()
        if 300 <= response.status_code < 400:
            where = describe_status(response.status_code, response.headers.get("Location"))
            problem = f"{mask_credentials(request.url or '')} answered {where}"
            if problem != self._told:
                self._told = problem
                log.warning("evaluation events not delivered: %s", problem)
            raise Redirected(problem)
        return response


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

    return HttpExporter(
        endpoint=logs_endpoint(endpoint), headers=headers or None, timeout=timeout, session=BoundedSession()
    )


def _claim_problem(claim: Claim, where: str) -> str:
    """One claim the metric did not count as supported, saying which verdict it had: ``Contradicted: <claim>
    (<the judge's reason>)``, ``Not found in the contexts: <claim>``, or ``Unsupported: <claim> (<reason>)`` for a
    ``no`` whose reason does not say contradicted (an LLM judge's ``no`` may be either)."""
    statement = " ".join(claim.statement.split())
    if claim.kind == "not_found":
        return f"Not found in {where}: {statement}"
    label = "Contradicted" if claim.kind == "contradicted" else "Unsupported"
    reason = " ".join(claim.reason.split()) if claim.reason else None
    return f"{label}: {statement} ({reason})" if reason else f"{label}: {statement}"


def explanation(result: MetricResult) -> str:
    """A short human-readable why: where the details hold per-claim verdicts, each claim not counted as supported
    with its verdict (contradicted first, then unsupported, then not found); else the unsupported claims where the
    metric lists them; else the reason. At most ``MAX_EXPLANATION_CHARS``."""
    typed = ClaimVerdicts.from_details(result.details)
    problems = typed.problems()
    if problems:
        where = "the source" if typed.source == "user_input" else "the contexts"  # summarization's source
        text = "; ".join(_claim_problem(c, where) for c in problems)
    elif not typed.judged and (bad := typed.unsupported_statements()):
        text = "Unsupported claims: " + "; ".join(bad)
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
    for key, name in PROVENANCE_ATTRIBUTES.items():
        value = (result.provenance or {}).get(key)
        if value is not None:
            attrs[name] = str(value)
    return attrs


class _Confirming(LogRecordExporter):
    """The OTLP exporter, counting each batch's outcome and confirming the results of a batch it delivered."""

    def __init__(self, inner: LogRecordExporter, owner: EvaluationEvents) -> None:
        self.inner = inner
        self.owner = owner

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        result = self.inner.export(batch)
        delivered = result is LogRecordExportResult.SUCCESS
        self.owner.counted("sent" if delivered else "failed", len(batch))
        if delivered:
            self.owner.delivered(batch)
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()


class EvaluationEvents(ResultSink):
    """A :class:`~ragtrace_collector.scoring.sink.ResultSink` sending each metric result as a ``gen_ai.evaluation.result`` event (an OTLP log record) of the scored trace.

    Each event carries :data:`EVALUATION_ID`; outcomes are counted in ``ragtrace_evaluation_events_total{outcome}``
    (``sent``, ``failed``: the endpoint did not take the batch, ``shutdown``: still waiting when a stop ran out of
    time), and ``confirm`` is told the results delivered, so the service sends again at the next start those that
    were not. ``shutdown(timeout)`` returns within ``timeout`` whatever the endpoint does.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        protocol: str = "http/protobuf",
        headers: Mapping[str, str] | None = None,
        exporter: LogRecordExporter | None = None,
        batch: bool = True,
        timeout: float = 5.0,
        registry: CollectorRegistry | None = None,
        confirm: Confirm | None = None,
    ) -> None:
        if exporter is None:
            if not endpoint:
                raise ValueError("EvaluationEvents needs an OTLP endpoint or an exporter")
            exporter = make_exporter(endpoint, protocol, headers, timeout)
        self.timeout = timeout
        self.confirm = confirm
        self.registry = registry if registry is not None else CollectorRegistry()
        counter = Counter(
            "ragtrace_evaluation_events",
            "gen_ai.evaluation.result events delivered over OTLP (outcome=sent), or not (failed, shutdown).",
            ("outcome",),
            registry=self.registry,
        )
        self._outcomes = {o: counter.labels(outcome=o) for o in OUTCOMES}
        self._lock = threading.Lock()
        self._emitted = 0  # events handed to the processor
        self._settled = 0  # of them, those whose export ended (sent or failed)
        self._closed = False
        self.provider = LoggerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        # Scores are not urgent, but a second's delay keeps them close to the trace they judge.
        confirming = _Confirming(exporter, self)
        processor = (
            BatchLogRecordProcessor(confirming, schedule_delay_millis=1000)
            if batch
            else SimpleLogRecordProcessor(confirming)
        )
        self.provider.add_log_record_processor(processor)
        self.logger = self.provider.get_logger(SCOPE)

    @classmethod
    def from_config(
        cls, config: OtlpEventsConfig, registry: CollectorRegistry | None = None, confirm: Confirm | None = None
    ) -> EvaluationEvents:
        """The sink an ``export.otlp_events`` section asks for (its ``endpoint`` must be set)."""
        if not config.endpoint:
            raise ValueError("export.otlp_events.endpoint is not set")
        return cls(
            config.endpoint, protocol=config.protocol, headers=dict(config.headers), registry=registry, confirm=confirm
        )

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
            with self._lock:
                if self._closed:  # a stop already ended the exporter
                    self._outcomes["shutdown"].inc()
                    continue
                self._emitted += 1
            failed = result.status == "error"
            self.logger.emit(
                timestamp=time.time_ns(),
                context=context,
                severity_number=SeverityNumber.WARN if failed else SeverityNumber.INFO,
                severity_text="WARN" if failed else "INFO",
                attributes={
                    **result_attributes(result),
                    **extra,
                    EVALUATION_ID: evaluation_id(record.key, result.metric),
                },
                event_name=A.GEN_AI_EVALUATION_RESULT_EVENT,
            )
            emitted += 1
        return emitted

    def count(self, outcome: str) -> float:
        """Events counted under ``outcome`` (of :data:`OUTCOMES`) so far."""
        return self.registry.get_sample_value("ragtrace_evaluation_events_total", {"outcome": outcome}) or 0.0

    def counted(self, outcome: str, n: int) -> None:
        """``n`` events ended with ``outcome`` (the exporting thread)."""
        with self._lock:
            self._settled += n
        self._outcomes[outcome].inc(n)

    def delivered(self, batch: Sequence[ReadableLogRecord]) -> None:
        """Confirm the results of a batch the endpoint took."""
        if self.confirm is None:
            return
        keys = [parse_evaluation_id((item.log_record.attributes or {}).get(EVALUATION_ID)) for item in batch]
        try:
            self.confirm([k for k in keys if k is not None])
        except Exception as exc:  # not confirmed: sent again at the next start
            log.warning("evaluation events sent but not marked exported: %s", exc)

    def flush(self, timeout_millis: int = 5000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def force_flush(self, timeout: float | None = None) -> bool:
        """Export what the batch processor holds; False when ``timeout`` seconds (None: 30) passed first."""
        return self.flush(int(1000 * (30.0 if timeout is None else max(0.0, timeout))))

    def shutdown(self, timeout: float | None = None) -> None:
        """Send what waits within ``timeout`` (default twice the request timeout), then count what is left as
        ``shutdown``: the SDK's own shutdown waits up to 30 s on an endpoint that does not answer, so it runs on a
        daemon thread that is left behind past the bound."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        closing = threading.Thread(target=self.provider.shutdown, name="ragtrace-events-shutdown", daemon=True)
        closing.start()
        closing.join(max(0.0, timeout if timeout is not None else 2 * self.timeout + 1))
        with self._lock:
            left, self._settled = self._emitted - self._settled, self._emitted
        if left > 0:
            self._outcomes["shutdown"].inc(left)
