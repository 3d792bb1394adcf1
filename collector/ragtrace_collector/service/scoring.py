"""Wiring the scoring stage from the configuration: the judge, the worker, its results store and sinks.

The worker itself (:mod:`ragtrace_collector.scoring.worker`) knows its collaborators only by their
interfaces (the result sinks by :class:`~ragtrace_collector.scoring.sink.ResultSink`); this is where the concrete
ones (Prometheus, OTLP events, Phoenix annotations) are chosen.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from ragtrace_collector.config import CollectorConfig, JudgeConfig, LocalJudgeConfig, ScoringConfig
from ragtrace_collector.exporter import otlp_events, phoenix
from ragtrace_collector.exporter.otlp_events import EvaluationEvents
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations
from ragtrace_collector.exporter.prometheus import EvalMetrics, eval_metrics_for, watch_queue
from ragtrace_collector.internal.component import Component
from ragtrace_collector.internal.secrets import Scrubber, config_secrets
from ragtrace_collector.internal.urls import is_redis_url
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import JudgeUsage, MetricResult
from ragtrace_collector.queue.base import RecordQueue
from ragtrace_collector.scoring.engine import evaluate_record, unknown_metrics
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.scoring.judges import make_judge
from ragtrace_collector.scoring.metrics import METRICS
from ragtrace_collector.scoring.options import ScoringOptions
from ragtrace_collector.scoring.results_store import ResultsStore, StoredResult
from ragtrace_collector.scoring.sink import ResultSink
from ragtrace_collector.scoring.worker import ScoringWorker, TimedJudge, metrics_selector

log = logging.getLogger(__name__)


class FanOut(ResultSink):
    """Several result sinks as one (as opentelemetry-python's multi span processors): each gets every result; one
    that fails costs a log line, not the others."""

    def __init__(self, sinks: Sequence[ResultSink]) -> None:
        self.sinks = list(sinks)

    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> None:
        for sink in self.sinks:
            try:
                sink.emit(record, results, judge)
            except Exception as exc:
                log.warning("results not sent by %s: %s", type(sink).__name__, exc)

    def force_flush(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        flushed = True
        for sink in self.sinks:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            flushed = sink.force_flush(left) and flushed
        return flushed

    def shutdown(self, timeout: float | None = None) -> None:
        """Shut every sink down, all within ``timeout`` (they flush side by side): one that fails or hangs costs a
        log line, not the others' time."""
        closing = [
            threading.Thread(target=_close, args=(sink, timeout), name="ragtrace-sink-shutdown", daemon=True)
            for sink in self.sinks
        ]
        for thread in closing:
            thread.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in closing:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


def _close(sink: ResultSink, timeout: float | None) -> None:
    try:
        sink.shutdown(timeout)
    except Exception as exc:
        log.warning("closing %s failed: %s", type(sink).__name__, exc)


#: Results stored at most this long ago and not confirmed by an exporter are sent again at start ...
RESEND_HOURS = 24.0
#: ... at most this many per exporter (Phoenix keeps ``max_pending`` annotations waiting: they go a page at a time).
RESEND_MAX_RESULTS = 10_000
RESEND_PAGE = 500


@dataclass
class Resend:
    """One exporter's side of :class:`ExportResume`: its name in the results store, the statuses it sends, the
    sink, and how long to wait (``force_flush``) for a page to leave before the next (so a page never overflows
    its buffer)."""

    exporter: str
    statuses: tuple[str, ...]
    sink: ResultSink
    flush_seconds: float = 60.0


class ExportResume(Component):
    """At start, sends again the results the store holds that an exporter never confirmed (a ``kill -9``, a stop past
    its bound, a downstream that was down): stored in the last ``hours``, at most ``max_results`` per exporter,
    oldest first, from a daemon thread beside the live results. Exports are at least once; the downstreams keep one
    per identifier (Phoenix upserts, events carry ``ragtrace.evaluation.id``)."""

    def __init__(
        self,
        store: ResultsStore,
        resends: Sequence[Resend],
        *,
        hours: float = RESEND_HOURS,
        max_results: int = RESEND_MAX_RESULTS,
        page: int = RESEND_PAGE,
    ) -> None:
        self.store = store
        self.resends = list(resends)
        self.hours = hours
        self.max_results = max_results
        self.page = page
        self.until = time.time()  # live results (stored from now on) are the sinks' own
        self.sent: dict[str, int] = {}  # per exporter, results sent again
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragtrace-export-resume", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self, timeout: float | None = 0.5) -> None:
        """Stop between pages (what is not sent is still unconfirmed: the next start sends it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every page was handed over; False when ``timeout`` passed first (tests)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        for resend in self.resends:
            try:
                self._resend(resend)
            except Exception as exc:  # a closed or locked store: the next start tries again
                log.warning("results not sent again to %s: %s", resend.exporter, exc)
            if self.sent.get(resend.exporter):
                log.info("%d stored results sent again to %s", self.sent[resend.exporter], resend.exporter)

    def _resend(self, resend: Resend) -> None:
        since = self.until - self.hours * 3600.0
        cursor: tuple[float, str, str] | None = None
        left = self.max_results
        while left > 0 and not self._stop.is_set():
            page, cursor = self.store.unexported(
                resend.exporter,
                resend.statuses,
                since=since,
                until=self.until,
                after=cursor,
                limit=min(self.page, left),
            )
            for record, rows in page:
                resend.sink.emit(record, [_stored_result(r) for r in rows], rows[0].judge or "unknown")
                left -= len(rows)
                self.sent[resend.exporter] = self.sent.get(resend.exporter, 0) + len(rows)
            if cursor is None:
                return
            resend.sink.force_flush(resend.flush_seconds)


def _stored_result(row: StoredResult) -> MetricResult:
    """A stored row as the result it was: usage is not stored, so an LLM judge's result counts one call (Phoenix's
    annotator kind stays LLM)."""
    calls = 0 if row.judge == phoenix.LOCAL_JUDGE else 1
    return MetricResult(
        row.metric,
        row.status,  # type: ignore[arg-type]
        score=row.score,
        reason=row.reason,
        details=dict(row.details or {}),
        higher_is_better=bool(row.higher_is_better),
        label=row.label,
        usage=JudgeUsage(calls=calls),
        provenance=dict(row.provenance or {}),
    )


class ExportingSinks(FanOut):
    """The configured sinks, and the :class:`ExportResume` sending them what they never confirmed (from
    :meth:`start`)."""

    def __init__(self, sinks: Sequence[ResultSink], resume: ExportResume | None) -> None:
        super().__init__(sinks)
        self.resume = resume

    def start(self) -> None:
        for sink in self.sinks:
            sink.start()
        if self.resume is not None:
            self.resume.start()

    def shutdown(self, timeout: float | None = None) -> None:
        if self.resume is not None:
            self.resume.shutdown()
        super().shutdown(timeout)


def result_sinks(
    config: CollectorConfig,
    registry: CollectorRegistry,
    store: ResultsStore | None = None,
    metrics: EvalMetrics | None = None,
) -> ExportingSinks | None:
    """Where results go besides the results store: Prometheus (``metrics``, when given), OTLP events and Phoenix
    annotations (as configured), and scaled out on Redis the results stream the receivers' explorers follow (with
    ``store``); None when nowhere. With ``store``, each exporter confirms in it what it delivered,
    and what it never confirmed is sent again once the sinks are started."""
    confirm = _confirmer(store)
    resends: list[Resend] = []
    events_cfg = config.export.otlp_events
    if events_cfg.endpoint:
        events = EvaluationEvents.from_config(events_cfg, registry, confirm(otlp_events.EXPORTER))
        resends.append(Resend(otlp_events.EXPORTER, otlp_events.STATUSES, events, 30.0))
    phoenix_cfg = config.export.phoenix
    if phoenix_cfg.endpoint:
        annotations = PhoenixAnnotations.from_config(phoenix_cfg, registry, confirm(phoenix.EXPORTER))
        resends.append(Resend(phoenix.EXPORTER, phoenix.STATUSES, annotations, 60.0))
    if store is not None and is_redis_url(config.queue_url):  # scaled out: the receivers' explorers show them
        # imported here so a collector without scale-out never imports the redis client
        from ragtrace_collector.exporter import results_stream

        streamed = results_stream.ResultsStream(
            config.queue_url,
            registry,
            confirm(results_stream.EXPORTER),
            max_entries=config.export.results_stream_max_entries,
        )
        resends.append(Resend(results_stream.EXPORTER, results_stream.STATUSES, streamed, 30.0))
    sinks: list[ResultSink] = ([metrics] if metrics is not None else []) + [r.sink for r in resends]
    if not sinks:
        return None
    resume = ExportResume(store, resends) if store is not None and resends else None
    return ExportingSinks(sinks, resume)


def _confirmer(store: ResultsStore | None) -> Callable[[str], Callable[[list[tuple[str, str]]], None] | None]:
    """Per exporter name, the callback marking its deliveries in ``store`` (none without a store)."""

    def confirm(exporter: str) -> Callable[[list[tuple[str, str]]], None] | None:
        if store is None:
            return None
        marks = store

        def mark(keys: list[tuple[str, str]]) -> None:
            marks.mark_exported(exporter, keys)

        return mark

    return confirm


def build_worker(
    config: CollectorConfig, registry: CollectorRegistry, queue: RecordQueue, *, judge: Judge | None = None
) -> ScoringWorker:
    """The worker described by ``config``, with its results store (``worker.store``) and result sinks
    (``worker.sinks``: Prometheus and the configured exporters), each a component of its own; ``judge`` overrides
    the configured one (tests, embedding)."""
    scoring = config.scoring
    named = list(scoring.metrics) + [m for ms in scoring.pipelines.values() for m in ms]
    bad = unknown_metrics(named)
    if bad:
        raise ValueError(f"unknown metric(s) in scoring config: {', '.join(sorted(set(bad)))}")
    metrics = eval_metrics_for(registry, config.limits)
    watch_queue(registry, queue)
    if judge is None:
        judge = judge_from_config(config.judge, config.local_judge)
    store = ResultsStore(config.results_path)
    return ScoringWorker(
        queue,
        TimedJudge(judge, metrics),
        store,
        metrics,
        metrics_for=metrics_selector(scoring.metrics, dict(scoring.pipelines)),
        evaluate=evaluate_record,
        options=ScoringOptions.from_config(scoring.options),
        sinks=result_sinks(config, registry, store, metrics),
        concurrency=scoring.concurrency,
        lease_seconds=scoring.lease_seconds,
        backoff_initial=scoring.backoff_initial_seconds,
        backoff_max=scoring.backoff_max_seconds,
        judge_name=judge.name,
        scrubber=Scrubber(config_secrets(config, os.environ)),
    )


# A record field the completeness report names (processor.conventions.completeness.FIELDS) -> the metric inputs
# (Metric.requires) it provides.
_FIELD_INPUTS: dict[str, tuple[str, ...]] = {
    "user_input": ("user_input",),
    "retrieved_contexts": ("retrieved_contexts",),
    "response": ("response",),
    "tokens": ("output_tokens",),
    "ttft": ("ttft_seconds",),
}


def blocked_metrics(scoring: ScoringConfig) -> dict[str, list[str]]:
    """Per record field, the configured metrics that cannot be scored without it (for the incomplete-record log)."""
    named = list(dict.fromkeys(list(scoring.metrics) + [m for ms in scoring.pipelines.values() for m in ms]))
    out: dict[str, list[str]] = {}
    for fld, inputs in _FIELD_INPUTS.items():
        needing = [m for m in named if m in METRICS and set(inputs) & set(METRICS[m].requires)]
        if needing:
            out[fld] = needing
    return out


def judge_from_config(judge_cfg: JudgeConfig, local_cfg: LocalJudgeConfig | None = None) -> Judge:
    """The judge of the ``judge`` section: the embedded one for ``local`` (its claim model from the
    ``local_judge`` section), else an LLM judge through litellm."""
    if judge_cfg.model == "local":
        local = local_cfg or LocalJudgeConfig()
        return make_judge("local", model=local.model, workers=local.workers, max_chars=local.max_chars)
    from ragtrace_collector.scoring.judges.llm import missing_key_variables

    missing = missing_key_variables(judge_cfg.model, judge_cfg.api_key, judge_cfg.base_url)
    if missing:  # said once, at start: otherwise the first sign is records that never get scored
        log.error(
            "judge %s has no API key: set %s or judge.api_key (RAGTRACE_JUDGE__API_KEY); records are received and"
            " wait in the queue until then",
            judge_cfg.model,
            " or ".join(missing),
        )
    return make_judge(
        judge_cfg.model,
        base_url=judge_cfg.base_url,
        api_key=judge_cfg.api_key,
        timeout=judge_cfg.timeout_seconds,
        max_retries=judge_cfg.max_retries,
        concurrency=judge_cfg.concurrency,
        embedding_model=judge_cfg.embedding_model,
        max_tokens=judge_cfg.max_tokens,
        max_reply_chars=judge_cfg.max_reply_chars,
    )
