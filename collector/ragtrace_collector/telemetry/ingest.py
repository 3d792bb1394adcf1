"""Prometheus metrics of the ingest path: latency and tokens of every record, receive and sampling counters.

Every completed record is observed here, sampled or not, with its ``trace_id`` as exemplar so a
Grafana panel jumps from a slow bucket to the trace. Buckets follow the OTel GenAI semantic
conventions' advisory boundaries. Label values come from the traffic (service, pipeline, model), so
each label keeps at most a fixed number of distinct values; later ones are reported as ``other``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ragtrace_collector.model.record import RagRecord

# OTel GenAI advisory buckets (gen_ai.server.time_to_first_token, gen_ai.client.operation.duration, ...)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)

OTHER = "other"
UNKNOWN = "unknown"


class BoundedLabel:
    """Keeps at most ``limit`` distinct values of one label; the rest map to ``other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: object) -> str:
        if value is None or value == "":
            return UNKNOWN
        text = str(value)[:128]
        if text in self._seen:
            return text
        with self._lock:
            if text in self._seen:
                return text
            if len(self._seen) >= self.limit:
                return OTHER
            self._seen.add(text)
            return text


class IngestMetrics:
    """The ingest half's Prometheus metrics, registered on the given registry.

    Exported names (``_total`` counters, ``_seconds`` histograms, all on ``registry``):
    ``ragtrace_time_to_first_token_seconds``, ``ragtrace_time_per_output_token_seconds``,
    ``ragtrace_request_duration_seconds``, ``ragtrace_retrieval_duration_seconds``,
    ``ragtrace_generation_duration_seconds``, ``ragtrace_request_tokens{kind}`` (histogram of tokens
    per request), ``ragtrace_tokens_total{kind}``, ``ragtrace_traces_received_total``,
    ``ragtrace_spans_received_total``, ``ragtrace_spans_rejected_total{reason}``,
    ``ragtrace_otlp_requests_total{transport,status}``, ``ragtrace_traces_sampled_total{pipeline,reason}``,
    ``ragtrace_traces_dropped_total{pipeline,reason}``, ``ragtrace_late_spans_total``,
    ``ragtrace_assembly_completed_total{reason}``, ``ragtrace_assembly_inflight_traces``,
    ``ragtrace_assembly_inflight_bytes``, ``ragtrace_records_with_error_total``.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        max_services: int = 20,
        max_pipelines: int = 50,
        max_models: int = 30,
    ) -> None:
        self.registry = registry
        self.service_label = BoundedLabel(max_services)
        self.pipeline_label = BoundedLabel(max_pipelines)
        self.model_label = BoundedLabel(max_models)
        spm = ("service", "pipeline", "model")
        sp = ("service", "pipeline")

        def hist(name: str, doc: str, labels: Iterable[str], buckets: tuple) -> Histogram:
            return Histogram(name, doc, tuple(labels), buckets=buckets, registry=registry)

        self.ttft = hist(
            "ragtrace_time_to_first_token_seconds",
            "Time to the first streamed chunk of the answer.",
            spm,
            DURATION_BUCKETS,
        )
        self.tpot = hist(
            "ragtrace_time_per_output_token_seconds",
            "Time per output token after the first one.",
            spm,
            TPOT_BUCKETS,
        )
        self.request_duration = hist(
            "ragtrace_request_duration_seconds", "Duration of the whole RAG request.", sp, DURATION_BUCKETS
        )
        self.retrieval_duration = hist(
            "ragtrace_retrieval_duration_seconds", "Time spent in retrieval per request.", sp, DURATION_BUCKETS
        )
        self.generation_duration = hist(
            "ragtrace_generation_duration_seconds", "Time spent in generation per request.", spm, DURATION_BUCKETS
        )
        self.request_tokens = hist(
            "ragtrace_request_tokens",
            "Tokens per request by kind (input or output).",
            spm + ("kind",),
            TOKEN_BUCKETS,
        )
        self.tokens = Counter(
            "ragtrace_tokens", "Tokens used by the traced application, by kind.", spm + ("kind",), registry=registry
        )
        self.traces_received = Counter(
            "ragtrace_traces_received", "RAG records assembled from received traces.", sp, registry=registry
        )
        self.records_with_error = Counter(
            "ragtrace_records_with_error", "Assembled records whose request failed.", sp, registry=registry
        )
        self.spans_received = Counter(
            "ragtrace_spans_received", "Spans accepted by the OTLP receivers.", ("transport",), registry=registry
        )
        self.spans_rejected = Counter(
            "ragtrace_spans_rejected", "Spans refused in a partial success.", ("reason",), registry=registry
        )
        self.otlp_requests = Counter(
            "ragtrace_otlp_requests",
            "OTLP export requests by outcome (ok, partial, malformed, too_large, unauthenticated, overloaded, ...).",
            ("transport", "status"),
            registry=registry,
        )
        self.traces_sampled = Counter(
            "ragtrace_traces_sampled",
            "Records selected for scoring, by the rule that selected them.",
            ("pipeline", "reason"),
            registry=registry,
        )
        self.traces_dropped = Counter(
            "ragtrace_traces_dropped",
            "Records not scored, by reason (rate, budget_records, budget_tokens, queue_full, ...).",
            ("pipeline", "reason"),
            registry=registry,
        )
        self.late_spans_total = Counter(
            "ragtrace_late_spans", "Spans that arrived after their trace was completed.", registry=registry
        )
        self.assembly_completed = Counter(
            "ragtrace_assembly_completed",
            "Traces leaving assembly by reason (root, max_wait, evicted, shutdown).",
            ("reason",),
            registry=registry,
        )
        self.inflight_traces = Gauge(
            "ragtrace_assembly_inflight_traces", "Traces waiting to complete.", registry=registry
        )
        self.inflight_bytes = Gauge(
            "ragtrace_assembly_inflight_bytes", "Encoded bytes of spans waiting to complete.", registry=registry
        )
        self._children: dict[tuple, tuple] = {}

    # --- receivers ---
    def request(self, transport: str, status: str) -> None:
        self.otlp_requests.labels(transport, status).inc()

    def spans(self, transport: str, accepted: int, rejected: dict[str, int] | None = None) -> None:
        if accepted:
            self.spans_received.labels(transport).inc(accepted)
        for reason, n in (rejected or {}).items():
            self.spans_rejected.labels(reason).inc(n)

    # --- assembly (AssemblyObserver) ---
    def late_spans(self, n: int) -> None:
        self.late_spans_total.inc(n)

    def trace_completed(self, reason: str) -> None:
        self.assembly_completed.labels(reason).inc()

    def inflight(self, traces: int, nbytes: int) -> None:
        self.inflight_traces.set(traces)
        self.inflight_bytes.set(nbytes)

    # --- sampling ---
    def sampled(self, pipeline: str | None, reason: str) -> None:
        self.traces_sampled.labels(self.pipeline_label(pipeline), reason).inc()

    def dropped(self, pipeline: str | None, reason: str) -> None:
        self.traces_dropped.labels(self.pipeline_label(pipeline), reason).inc()

    # --- every record ---
    def _series(self, service: str, pipeline: str, model: str) -> tuple:
        key = (service, pipeline, model)
        children = self._children.get(key)
        if children is None:
            sp = (service, pipeline)
            children = (
                self.ttft.labels(*key),
                self.tpot.labels(*key),
                self.request_duration.labels(*sp),
                self.retrieval_duration.labels(*sp),
                self.generation_duration.labels(*key),
                self.request_tokens.labels(*key, "input"),
                self.request_tokens.labels(*key, "output"),
                self.tokens.labels(*key, "input"),
                self.tokens.labels(*key, "output"),
                self.traces_received.labels(*sp),
                self.records_with_error.labels(*sp),
            )
            self._children[key] = children
        return children

    def observe_record(self, record: RagRecord) -> None:
        """Latency, tokens and counts of one assembled record, with its trace id as exemplar."""
        (ttft, tpot, req, ret, gen, tok_in_h, tok_out_h, tok_in, tok_out, received, errors) = self._series(
            self.service_label(record.service), self.pipeline_label(record.pipeline), self.model_label(record.model)
        )
        exemplar = {"trace_id": record.trace_id} if record.trace_id else None
        received.inc()
        if record.error:
            errors.inc()
        if record.ttft_seconds is not None:
            ttft.observe(record.ttft_seconds, exemplar)
        if record.tpot_seconds is not None:
            tpot.observe(record.tpot_seconds, exemplar)
        if record.request_duration_seconds is not None:
            req.observe(record.request_duration_seconds, exemplar)
        if record.retrieval_duration_seconds is not None:
            ret.observe(record.retrieval_duration_seconds, exemplar)
        if record.generation_duration_seconds is not None:
            gen.observe(record.generation_duration_seconds, exemplar)
        if record.input_tokens is not None:
            tok_in_h.observe(record.input_tokens, exemplar)
            tok_in.inc(record.input_tokens)
        if record.output_tokens is not None:
            tok_out_h.observe(record.output_tokens, exemplar)
            tok_out.inc(record.output_tokens)
