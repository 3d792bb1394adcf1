"""Prometheus metrics of the scoring side: scores, evaluation outcomes, judge spending, the queue.

Names (Grafana dashboards and alert rules are written against these):

* ``ragtrace_eval_score{metric,service,pipeline,judge}`` — histogram of scores, ``trace_id`` exemplars,
  buckets every 0.05 on ``[0, 1]`` so each alert threshold (0.5, 0.7, 0.8, 0.9...) is a bucket edge.
* ``ragtrace_eval_weight_total{metric,service,pipeline,judge}`` and
  ``ragtrace_eval_weighted_score_total{metric,service,pipeline,judge}`` — sums of each scored record's
  sampling weight (1 / its sampling probability) and of weight × score, so
  ``rate(weighted_score) / rate(weight)`` is the traffic-weighted mean score, unbiased when
  pipelines or always-sample rules sample at different rates.
* ``ragtrace_eval_latency_seconds{pipeline}`` — the ``latency`` metric (TTFT + TPOT × output tokens),
  which is in seconds, not on ``[0, 1]``: metrics whose range is not ``[0, 1]`` stay out of
  ``ragtrace_eval_score`` so they cannot distort quality means and thresholds.
* ``ragtrace_evaluations_total{metric,outcome}`` — outcome ``scored`` | ``skipped`` | ``error``.
* ``ragtrace_judge_calls_total{judge}``, ``ragtrace_judge_tokens_total{judge,kind}`` (kind
  ``prompt`` | ``completion``), ``ragtrace_judge_cost_usd_total{judge}``,
  ``ragtrace_judge_errors_total{judge,kind}`` (kind ``unavailable``: outage/429/timeout, the record
  waits; ``failed``: this input cannot be judged; ``call``: failed calls the judge retried itself),
  ``ragtrace_judge_latency_seconds{judge}`` — one judge decision (one method call).
* ``ragtrace_records_scored_total{pipeline}`` — records whose results were recorded;
  ``ragtrace_records_released_total{reason}`` — records handed back to the queue unscored
  (``judge_unavailable``, ``shutdown``, ``error``: scoring raised unexpectedly, retried later).
* ``ragtrace_judge_unavailable_total{judge,reason}`` — records sent back to the queue because the judge
  could not be used, by cause: ``credentials`` | ``permission`` | ``config`` need an operator (alert on
  them), ``rate_limit`` | ``timeout`` | ``connection`` | ``server`` | ``unavailable`` usually pass.
* ``ragtrace_queue_depth``, ``ragtrace_queue_oldest_age_seconds``, ``ragtrace_queue_dropped_total``,
  ``ragtrace_queue_corrupt_total`` — read from the queue at scrape time (:func:`watch_queue`).

This module is the one home of ``/metrics``: :class:`MetricsEndpoint` serves the process's one registry (every
component registers its series there, never in the global one) on ``listen.metrics_port``, with content
negotiation (:func:`metrics_response`); :class:`EvalMetrics` is the Prometheus
:class:`~ragtrace_collector.scoring.sink.ResultSink`.

Labels come from bounded sets only: metric names from config, judge names, and service and pipeline names,
which come from the traffic and so keep at most ``max_services`` / ``max_pipelines`` distinct values (later
ones are ``other``); the families labelled by them are label sets
(:class:`~ragtrace_collector.telemetry.labels.LabelSet`, bounded in series as a product of their values),
each within ``limits.max_series_per_label_set`` series, idle combinations expiring.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from ragtrace_collector.config import LimitsConfig, ListenConfig
from ragtrace_collector.internal.component import LISTENER_GRACE_SECONDS, AsyncComponent
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.queue.base import RecordQueue
from ragtrace_collector.scoring.sink import ResultSink
from ragtrace_collector.telemetry.labels import (  # noqa: F401 (UNKNOWN re-exported)
    UNKNOWN,
    BoundedLabel,
    LabelSet,
    Member,
    series_overflow,
)
from ragtrace_collector.telemetry.slots import Reclaim

log = logging.getLogger(__name__)

# 0.05 steps on [0, 1]: every alert threshold on a 0.05 grid is a bucket edge (histogram_quantile and
# "share below 0.7" are then exact), and scores outside [0, 1] still land in +Inf.
SCORE_BUCKETS: tuple[float, ...] = tuple(round(i * 0.05, 2) for i in range(0, 21))
# One judge decision: local judges answer in milliseconds, LLM judges in seconds.
JUDGE_LATENCY_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
# The latency metric: OTel GenAI duration advisory buckets (seconds).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)


def _is_quality_score(metric: str) -> bool:
    """Whether a metric scores on ``[0, 1]`` (a quality score) rather than in other units."""
    from ragtrace_collector.scoring.metrics import METRICS

    m = METRICS.get(metric)
    return m is None or tuple(m.score_range) == (0.0, 1.0)


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, EvalMetrics] = weakref.WeakKeyDictionary()


class EvalMetrics(ResultSink):
    """The scoring side's instruments, registered in the given registry (never the global one): the Prometheus
    result sink (:meth:`emit` counts recorded results) and the worker's
    :class:`~ragtrace_collector.scoring.worker.ScoringObserver` (judge latency, outages, releases).

    Use :func:`eval_metrics_for` to share one instance per registry (registering the same names
    twice in one registry is an error).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        max_pipelines: int = 50,
        limits: LimitsConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_services: int = 20,
    ) -> None:
        self.registry = registry
        self.clock = clock
        limits = limits if limits is not None else LimitsConfig()
        reclaim = Reclaim(limits.label_reclaim_hits, limits.label_reclaim_window_seconds)
        self.pipeline_label = BoundedLabel(max_pipelines, limits.label_idle_seconds, self._now, reclaim)
        self.service_label = BoundedLabel(max_services, limits.label_idle_seconds, self._now, reclaim)
        self.eval_score = Histogram(
            "ragtrace_eval_score",
            "Scores of sampled records by metric (trace_id exemplars link to the scored trace).",
            ["metric", "service", "pipeline", "judge"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.eval_latency = Histogram(
            "ragtrace_eval_latency_seconds",
            "The latency metric of scored records: TTFT + TPOT x output tokens, in seconds.",
            ["pipeline"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.eval_weight = Counter(
            "ragtrace_eval_weight",
            "Sum of the sampling weights (1 / sampling probability) of scored records.",
            ["metric", "service", "pipeline", "judge"],
            registry=registry,
        )
        self.eval_weighted_score = Counter(
            "ragtrace_eval_weighted_score",
            "Sum of sampling weight x score of scored records (divide by ragtrace_eval_weight_total).",
            ["metric", "service", "pipeline", "judge"],
            registry=registry,
        )
        self.evaluations = Counter(
            "ragtrace_evaluations",
            "Metric evaluations of sampled records, by outcome (scored, skipped, error).",
            ["metric", "outcome"],
            registry=registry,
        )
        self.judge_calls = Counter(
            "ragtrace_judge_calls",
            "Calls made to the judge (model requests or local inferences).",
            ["judge"],
            registry=registry,
        )
        self.judge_tokens = Counter(
            "ragtrace_judge_tokens",
            "Tokens spent by the judge, by kind (prompt, completion).",
            ["judge", "kind"],
            registry=registry,
        )
        self.judge_cost = Counter(
            "ragtrace_judge_cost_usd",
            "Judge spending in US dollars.",
            ["judge"],
            registry=registry,
        )
        self.judge_errors = Counter(
            "ragtrace_judge_errors",
            "Judge failures, by kind (unavailable: the record waits; failed: the input cannot be judged; "
            "call: failed calls the judge retried itself).",
            ["judge", "kind"],
            registry=registry,
        )
        self.judge_latency = Histogram(
            "ragtrace_judge_latency_seconds",
            "Time taken by one judge decision.",
            ["judge"],
            buckets=JUDGE_LATENCY_BUCKETS,
            registry=registry,
        )
        self.records_scored = Counter(
            "ragtrace_records_scored",
            "Sampled records whose results were recorded.",
            ["pipeline"],
            registry=registry,
        )
        self.records_released = Counter(
            "ragtrace_records_released",
            "Records handed back to the queue unscored, by reason (judge_unavailable, shutdown, error).",
            ["reason"],
            registry=registry,
        )
        self.judge_outages = Counter(
            "ragtrace_judge_unavailable",
            "Records sent back to the queue because the judge could not be used, by cause (credentials, "
            "permission, config: fix the judge settings; rate_limit, timeout, connection, server, unavailable).",
            ["judge", "reason"],
            registry=registry,
        )
        # the families labelled by the traffic's service and pipeline names, each set bounded in series as a product
        overflow = series_overflow(registry)

        def label_set(members: list[Member], labels: tuple[BoundedLabel | None, ...]) -> LabelSet:
            return LabelSet(
                members,
                labels,
                max_series=limits.max_series_per_label_set,
                idle_seconds=limits.label_idle_seconds,
                overflow=overflow,
                clock=self._now,
            )

        one: tuple[tuple[str, ...], ...] = ((),)
        pipeline, service = self.pipeline_label, self.service_label
        self._scores = label_set(
            [(self.eval_score, one), (self.eval_weight, one), (self.eval_weighted_score, one)],
            (None, service, pipeline, None),
        )
        self._latency = label_set([(self.eval_latency, one)], (pipeline,))
        self._scored = label_set([(self.records_scored, one)], (pipeline,))

    def _now(self) -> float:
        return self.clock()

    # -- recording ----------------------------------------------------------------------------
    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> int:
        """The sink contract: count newly recorded results (see :meth:`observe_results`)."""
        return self.observe_results(record, results, judge)

    def observe_results(
        self, record: RagRecord, results: Sequence[MetricResult], judge: str, new: Sequence[bool] | None = None
    ) -> int:
        """Count results whose ``new`` flag is set (all when ``new`` is None); returns how many counted.

        ``new`` comes from the results store's insert-or-ignore, so a redelivered record's results,
        already stored, are not counted again.
        """
        counted = 0
        pipeline = record.pipeline
        for i, result in enumerate(results):
            if new is not None and not new[i]:
                continue
            counted += 1
            self.evaluations.labels(result.metric, result.status).inc()
            if result.status == "scored" and result.score is not None:
                self._observe_score(record, result, pipeline, judge)
            self.observe_usage(judge, result)
            if result.status == "error" and not result.retryable:
                self.judge_errors.labels(judge, "failed").inc()
        if counted:
            self._scored.children(pipeline)[0].inc()
        return counted

    def _observe_score(self, record: RagRecord, result: MetricResult, pipeline: str | None, judge: str) -> None:
        score = result.score
        assert score is not None, "only scored results are observed"
        exemplar = {"trace_id": record.trace_id} if record.trace_id else None
        if not _is_quality_score(result.metric):
            self._latency.children(pipeline)[0].observe(score, exemplar=exemplar)
            return
        labels = self._scores.labels(result.metric, record.service, pipeline, judge)
        self.eval_score.labels(*labels).observe(score, exemplar=exemplar)
        weight = record.sampling_weight if record.sampling_weight and record.sampling_weight > 0 else 1.0
        self.eval_weight.labels(*labels).inc(weight)
        if score > 0:  # counters only go up; a score of 0 adds nothing anyway
            self.eval_weighted_score.labels(*labels).inc(weight * score)

    def observe_usage(self, judge: str, result: MetricResult) -> None:
        usage = result.usage
        if usage is None:
            return
        if usage.calls:
            self.judge_calls.labels(judge).inc(usage.calls)
        if usage.prompt_tokens:
            self.judge_tokens.labels(judge, "prompt").inc(usage.prompt_tokens)
        if usage.completion_tokens:
            self.judge_tokens.labels(judge, "completion").inc(usage.completion_tokens)
        if usage.cost_usd and usage.cost_usd > 0:
            self.judge_cost.labels(judge).inc(usage.cost_usd)
        if usage.errors:
            self.judge_errors.labels(judge, "call").inc(usage.errors)

    def observe_judge_latency(self, judge: str, seconds: float) -> None:
        self.judge_latency.labels(judge).observe(seconds)

    def judge_registered(self, judge: str) -> None:
        self.judge_latency.labels(judge)

    def record_released(self, reason: str) -> None:
        self.records_released.labels(reason).inc()

    def judge_unavailable(self, judge: str, reason: str = "unavailable") -> None:
        self.judge_errors.labels(judge, "unavailable").inc()
        self.records_released.labels("judge_unavailable").inc()
        self.judge_outages.labels(judge, reason).inc()


def eval_metrics_for(registry: CollectorRegistry, limits: LimitsConfig | None = None) -> EvalMetrics:
    """The one :class:`EvalMetrics` of this registry, created on first use (with ``limits``)."""
    metrics = _by_registry.get(registry)
    if metrics is None:
        metrics = _by_registry[registry] = EvalMetrics(registry, limits=limits)
    return metrics


class QueueCollector(Collector):
    """Reads queue depth, oldest age and drops at scrape time, so they are never stale."""

    def __init__(self, queue: RecordQueue) -> None:
        self.queue = queue

    def describe(self) -> Iterable[Metric]:
        # Describing lets the registry detect duplicate names without collecting (no DB access).
        yield GaugeMetricFamily("ragtrace_queue_depth", "Records waiting in the scoring queue (leased or not).")
        yield GaugeMetricFamily("ragtrace_queue_oldest_age_seconds", "Age of the oldest queued record.")
        yield CounterMetricFamily(
            "ragtrace_queue_dropped",
            "Records the queue lost on put: full, or (Redis) shed past the spill's bound or refused by Redis.",
        )
        yield CounterMetricFamily("ragtrace_queue_corrupt", "Unreadable queued records dropped when leased.")

    def collect(self) -> Iterator[Metric]:
        try:
            depth = self.queue.depth()
            age = self.queue.oldest_age()
        except Exception as exc:  # a scrape must not fail because the queue backend hiccuped
            log.warning("queue metrics unavailable: %s", exc)
            return
        yield GaugeMetricFamily(
            "ragtrace_queue_depth", "Records waiting in the scoring queue (leased or not).", value=depth
        )
        yield GaugeMetricFamily(
            "ragtrace_queue_oldest_age_seconds", "Age of the oldest queued record.", value=age or 0.0
        )
        yield CounterMetricFamily(
            "ragtrace_queue_dropped",
            "Records the queue lost on put: full, or (Redis) shed past the spill's bound or refused by Redis.",
            value=self.queue.dropped,
        )
        yield CounterMetricFamily(
            "ragtrace_queue_corrupt", "Unreadable queued records dropped when leased.", value=self.queue.corrupt
        )


_watched: weakref.WeakKeyDictionary[CollectorRegistry, QueueCollector] = weakref.WeakKeyDictionary()


def watch_queue(registry: CollectorRegistry, queue: RecordQueue) -> QueueCollector:
    """Export ``queue``'s depth, oldest age and drops from ``registry`` (once per registry; a later
    call points the existing collector at the new queue)."""
    existing = _watched.get(registry)
    if existing is not None:
        existing.queue = queue
        return existing
    collector = QueueCollector(queue)
    registry.register(collector)
    _watched[registry] = collector
    return collector


def metrics_response(registry: CollectorRegistry, accept: str | None) -> web.Response:
    """``/metrics`` with content negotiation: OpenMetrics (with exemplars) when the scraper asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return web.Response(body=encoder(registry), headers={"Content-Type": content_type})


class MetricsEndpoint(AsyncComponent):
    """The ``/metrics`` listener: the registry, ``/healthz``, ``/readyz`` (``ready()``), and the routes others add
    (``routes``: the explorer's), behind ``middlewares`` (the host check). ``port`` is the bound one after start."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        *,
        ready: Callable[[], bool] = lambda: True,
        middlewares: Sequence[Any] = (),
        routes: Sequence[Callable[[web.Application], None]] = (),
    ) -> None:
        self.registry = registry
        self.host = host
        self.requested_port = port
        self.ready = ready
        self.middlewares = list(middlewares)
        self.routes = list(routes)
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    @classmethod
    def from_config(cls, listen: ListenConfig, registry: CollectorRegistry, **kwargs: Any) -> MetricsEndpoint:
        """The listener of ``listen.host`` / ``listen.metrics_port`` (which must be set)."""
        if listen.metrics_port is None:
            raise ValueError("listen.metrics_port is not set")
        return cls(registry, listen.host, listen.metrics_port, **kwargs)

    async def start(self) -> None:
        app = web.Application(middlewares=self.middlewares)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/readyz", self._ready)
        for add in self.routes:
            add(app)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=LISTENER_GRACE_SECONDS)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.requested_port, reuse_address=True)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def shutdown(self, timeout: float | None = None) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        # off the loop: collecting reads the queue (a Redis round trip, a SQLite lock), and a slow or unreachable
        # backend must not stall the receivers sharing this loop
        return await asyncio.to_thread(metrics_response, self.registry, request.headers.get("Accept"))

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _ready(self, request: web.Request) -> web.Response:
        return web.Response(text="ready\n") if self.ready() else web.Response(status=503, text="not ready\n")
