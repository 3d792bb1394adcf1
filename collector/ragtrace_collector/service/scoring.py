"""Wiring the scoring stage from the configuration: the judge, the worker, its results store and sinks.

The worker itself (:mod:`ragtrace_collector.scoring.worker`) knows its collaborators only by their
interfaces; this is where the concrete ones (Prometheus, OTLP events, Phoenix annotations) are chosen.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from ragtrace_collector.config import CollectorConfig, JudgeConfig, LocalJudgeConfig, ScoringConfig
from ragtrace_collector.exporter.otlp_events import EvaluationEvents
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations
from ragtrace_collector.exporter.prometheus import eval_metrics_for, watch_queue
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.queue.base import RecordQueue
from ragtrace_collector.scoring.engine import evaluate_record, unknown_metrics
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.scoring.judges import make_judge
from ragtrace_collector.scoring.metrics import METRICS
from ragtrace_collector.scoring.options import ScoringOptions
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.scoring.worker import ResultSink, ScoringWorker, TimedJudge, metrics_selector

log = logging.getLogger(__name__)


class FanOut:
    """Several result sinks as one: each gets every result; one that fails costs a log line, not the others."""

    def __init__(self, sinks: Sequence[ResultSink]) -> None:
        self.sinks = list(sinks)

    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> None:
        for sink in self.sinks:
            try:
                sink.emit(record, results, judge)
            except Exception as exc:
                log.warning("results not sent by %s: %s", type(sink).__name__, exc)

    def shutdown(self) -> None:
        for sink in self.sinks:
            try:
                sink.shutdown()
            except Exception as exc:
                log.warning("closing %s failed: %s", type(sink).__name__, exc)


def result_sinks(config: CollectorConfig, registry: CollectorRegistry) -> ResultSink | None:
    """Where results go besides Prometheus and the results store: OTLP events, Phoenix annotations (as configured)."""
    sinks: list[ResultSink] = []
    events_cfg = config.export.otlp_events
    if events_cfg.endpoint:
        sinks.append(
            EvaluationEvents(events_cfg.endpoint, protocol=events_cfg.protocol, headers=dict(events_cfg.headers))
        )
    phoenix = config.export.phoenix
    if phoenix.endpoint:
        sinks.append(
            PhoenixAnnotations(
                phoenix.endpoint,
                api_key=phoenix.api_key,
                batch_size=phoenix.batch_size,
                max_pending=phoenix.max_pending,
                timeout=phoenix.timeout_seconds,
                registry=registry,
            )
        )
    if not sinks:
        return None
    return sinks[0] if len(sinks) == 1 else FanOut(sinks)


def build_worker(
    config: CollectorConfig, registry: CollectorRegistry, queue: RecordQueue, *, judge: Judge | None = None
) -> ScoringWorker:
    """The worker described by ``config``; ``judge`` overrides the configured one (tests, embedding)."""
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
        events=result_sinks(config, registry),
        concurrency=scoring.concurrency,
        lease_seconds=scoring.lease_seconds,
        backoff_initial=scoring.backoff_initial_seconds,
        backoff_max=scoring.backoff_max_seconds,
        judge_name=judge.name,
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
        return make_judge("local", model=local.model, workers=local.workers)
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
