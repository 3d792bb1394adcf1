"""Prometheus metrics of the ingest path: latency and tokens of every record, receive and sampling counters.

Every completed record is observed here, sampled or not, with its ``trace_id`` as exemplar so a
Grafana panel jumps from a slow bucket to the trace. Buckets follow the OTel GenAI semantic
conventions' advisory boundaries. Label values come from the traffic (service, pipeline, model), so
they go through :mod:`ragtrace_collector.telemetry.labels`: sanitised, each label kept to a number of
distinct values, and the metrics sharing them bounded in series as a product (``limits``); later or idle
ones are reported as ``other`` or expire.
"""

from __future__ import annotations

import bisect
import collections
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ragtrace_collector.config import LimitsConfig
from ragtrace_collector.model.record import RecordFacts
from ragtrace_collector.telemetry.labels import (  # noqa: F401 (OTHER, UNKNOWN re-exported)
    OTHER,
    UNKNOWN,
    BoundedLabel,
    LabelSet,
    Member,
    series_overflow,
)
from ragtrace_collector.telemetry.slots import Reclaim

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


class IngestMetrics:
    """The ingest half's Prometheus metrics, registered on the given registry.

    Exported names (``_total`` counters, ``_seconds`` histograms, all on ``registry``):
    ``ragtrace_time_to_first_token_seconds``, ``ragtrace_time_per_output_token_seconds``,
    ``ragtrace_request_duration_seconds``, ``ragtrace_retrieval_duration_seconds``,
    ``ragtrace_generation_duration_seconds``, ``ragtrace_request_tokens{kind}`` (histogram of tokens
    per request), ``ragtrace_tokens_total{kind}``, ``ragtrace_traces_received_total``,
    ``ragtrace_spans_received_total``, ``ragtrace_spans_rejected_total{reason}``, ``ragtrace_log_records_total{outcome}``,
    ``ragtrace_otlp_requests_total{transport,status}``, ``ragtrace_traces_sampled_total{pipeline,reason}``,
    ``ragtrace_traces_dropped_total{pipeline,reason}``, ``ragtrace_late_spans_total``,
    ``ragtrace_assembly_completed_total{reason}``, ``ragtrace_assembly_inflight_traces``,
    ``ragtrace_assembly_inflight_bytes``, ``ragtrace_records_with_error_total``.

    The families labelled by the traffic form label sets (``{service,pipeline,model}``,
    ``{service,pipeline}``, ``{pipeline,reason}`` twice), each within ``limits.max_series_per_label_set``
    series (what overflows is counted in ``ragtrace_metric_series_overflow_total{metric}``); a name turned
    away that recurs takes a one-shot one's slot (``limits.label_reclaim_hits``); ``clock`` (swappable, like
    the assembler's) times their idle expiry and recent frequency.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        max_services: int = 20,
        max_pipelines: int = 50,
        max_models: int = 30,
        limits: LimitsConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.clock = clock
        limits = limits if limits is not None else LimitsConfig()
        idle = limits.label_idle_seconds
        reclaim = Reclaim(limits.label_reclaim_hits, limits.label_reclaim_window_seconds)
        self.service_label = BoundedLabel(max_services, idle, self._now, reclaim)
        self.pipeline_label = BoundedLabel(max_pipelines, idle, self._now, reclaim)
        self.model_label = BoundedLabel(max_models, idle, self._now, reclaim)
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
        self.log_records_total = Counter(
            "ragtrace_log_records",
            "OTLP log records by outcome: kept (a GenAI event naming its span), not_genai, no_span, bad_time (dropped"
            " at the receiver); joined (folded into its span), unmatched (its trace completed without that span),"
            " late (its trace had completed), over_limit (too many traces known only from log events).",
            ("outcome",),
            registry=registry,
        )
        self.otlp_requests = Counter(
            "ragtrace_otlp_requests",
            "OTLP export requests by outcome (ok, partial, malformed, too_large, unauthenticated, overloaded, ...).",
            ("transport", "status"),
            registry=registry,
        )
        self.http_refused = Counter(
            "ragtrace_http_requests_refused",
            "HTTP requests refused before any handler, by listener (otlp_http, metrics) and reason (host: a Host"
            " the collector does not answer, origin: a cross-site Origin): DNS rebinding and cross-site requests.",
            ("listener", "reason"),
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
        overflow = series_overflow(registry)

        def label_set(members: list[Member], labels: tuple[BoundedLabel | None, ...]) -> LabelSet:
            return LabelSet(
                members,
                labels,
                max_series=limits.max_series_per_label_set,
                idle_seconds=idle,
                overflow=overflow,
                clock=self._now,
                reclaim=reclaim,
            )

        one: tuple[tuple[str, ...], ...] = ((),)
        kinds: tuple[tuple[str, ...], ...] = (("input",), ("output",))
        service, pipeline, model = self.service_label, self.pipeline_label, self.model_label
        self._per_model = label_set(
            [
                (self.ttft, one),
                (self.tpot, one),
                (self.generation_duration, one),
                (self.request_tokens, kinds),
                (self.tokens, kinds),
            ],
            (service, pipeline, model),
        )
        self._per_pipeline = label_set(
            [
                (self.request_duration, one),
                (self.retrieval_duration, one),
                (self.traces_received, one),
                (self.records_with_error, one),
            ],
            (service, pipeline),
        )
        self._sampled = label_set([(self.traces_sampled, one)], (pipeline, None))
        self._dropped = label_set([(self.traces_dropped, one)], (pipeline, None))

    def _now(self) -> float:
        return self.clock()

    # --- receivers ---
    def request(self, transport: str, status: str) -> None:
        self.otlp_requests.labels(transport, status).inc()

    def refused(self, listener: str, reason: str) -> None:
        self.http_refused.labels(listener, reason).inc()

    def spans(self, transport: str, accepted: int, rejected: dict[str, int] | None = None) -> None:
        if accepted:
            self.spans_received.labels(transport).inc(accepted)
        for reason, n in (rejected or {}).items():
            self.spans_rejected.labels(reason).inc(n)

    def log_records(self, kept: int, dropped: dict[str, int] | None = None) -> None:
        """A logs request's records: the GenAI events kept, the others dropped by reason."""
        if kept:
            self.log_records_total.labels("kept").inc(kept)
        for reason, n in (dropped or {}).items():
            self.log_records_total.labels(reason).inc(n)

    # --- assembly (AssemblyObserver) ---
    def log_events(self, outcome: str, n: int) -> None:
        """Log events leaving assembly (``LogEventsObserver``): joined, unmatched, late, over_limit."""
        if n:
            self.log_records_total.labels(outcome).inc(n)

    def late_spans(self, n: int) -> None:
        self.late_spans_total.inc(n)

    def trace_completed(self, reason: str) -> None:
        self.assembly_completed.labels(reason).inc()

    def inflight(self, traces: int, nbytes: int) -> None:
        self.inflight_traces.set(traces)
        self.inflight_bytes.set(nbytes)

    # --- sampling ---
    def sampled(self, pipeline: str | None, reason: str, n: int = 1) -> None:
        self._sampled.children(pipeline, reason, times=n)[0].inc(n)

    def dropped(self, pipeline: str | None, reason: str, n: int = 1) -> None:
        self._dropped.children(pipeline, reason, times=n)[0].inc(n)

    # --- every record ---
    def _series(self, service: str | None, pipeline: str | None, model: str | None, times: int = 1) -> _Series:
        """The record's children, each label set admitting (or sending to ``other``) its combination; ``times``
        records of it (see :meth:`LabelSet.labels`)."""
        ttft, tpot, gen, tok_in_h, tok_out_h, tok_in, tok_out = self._per_model.children(
            service, pipeline, model, times=times
        )
        req, ret, received, errors = self._per_pipeline.children(service, pipeline, times=times)
        return _Series(ttft, tpot, req, ret, gen, tok_in_h, tok_out_h, tok_in, tok_out, received, errors)

    def observe_record(self, record: RecordFacts) -> None:
        """Latency, tokens and counts of one assembled record, with its trace id as exemplar."""
        self.observe_records((record,))

    def observe_records(self, records: Sequence[RecordFacts]) -> None:
        """:meth:`observe_record` for each of one sweep's records, with the same outcome for less: each label
        combination is looked up once (its slots count the seconds it is seen in; an overflow still counts each
        record), counters are added to once, and a bucket is given the exemplar of the last record in it (a bucket
        keeps only its latest), so an exemplar is not validated and stamped for every observation. Each series sees
        its values in the records' order, as one at a time."""
        wanted = collections.Counter((r.service, r.pipeline, r.model) for r in records)  # in order of first appearance
        resolved = {key: self._series(*key, times=n) for key, n in wanted.items()}
        series = [resolved[(r.service, r.pipeline, r.model)] for r in records]
        added: collections.Counter[Any] = collections.Counter()  # counter child -> what to add to it
        for record, s in zip(records, series):
            added[s.received] += 1
            if record.error:
                added[s.errors] += 1
            if record.input_tokens is not None:
                added[s.input_tokens_total] += record.input_tokens
            if record.output_tokens is not None:
                added[s.output_tokens_total] += record.output_tokens
        for counter, total in added.items():
            if total:
                counter.inc(total)
        for histogram, field in _HISTOGRAMS:
            values = [(getattr(r, field), r.trace_id, getattr(s, histogram)) for r, s in zip(records, series)]
            # (child, bucket) -> the last record in it with a trace id; ``le`` is the first bound at or above a value,
            # as ``Histogram.observe`` places it
            last = {
                (child, bisect.bisect_left(child._upper_bounds, value)): i
                for i, (value, trace_id, child) in enumerate(values)
                if value is not None and trace_id
            }
            carrying = set(last.values())
            for i, (value, trace_id, child) in enumerate(values):
                if value is not None:
                    child.observe(value, {"trace_id": trace_id} if i in carrying else None)


class _Series(NamedTuple):
    """One label combination's children of the per-record metrics."""

    ttft: Any
    tpot: Any
    request: Any
    retrieval: Any
    generation: Any
    input_tokens: Any
    output_tokens: Any
    input_tokens_total: Any
    output_tokens_total: Any
    received: Any
    errors: Any


# Each histogram child of a record's :class:`_Series` and the record field it observes.
_HISTOGRAMS: tuple[tuple[str, str], ...] = (
    ("ttft", "ttft_seconds"),
    ("tpot", "tpot_seconds"),
    ("request", "request_duration_seconds"),
    ("retrieval", "retrieval_duration_seconds"),
    ("generation", "generation_duration_seconds"),
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
)
