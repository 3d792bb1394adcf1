"""Wiring the scoring stage from the configuration: the judge, the worker, its results store and sinks.

The worker itself (:mod:`ragtrace_collector.scoring.worker`) knows its collaborators only by their
interfaces; this is where the concrete ones (Prometheus, OTLP events) are chosen.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ragtrace_collector.config import CollectorConfig, JudgeConfig
from ragtrace_collector.exporter.otlp_events import EvaluationEvents
from ragtrace_collector.exporter.prometheus import eval_metrics_for, watch_queue
from ragtrace_collector.queue.base import RecordQueue
from ragtrace_collector.scoring.engine import evaluate_record, unknown_metrics
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.scoring.judges import make_judge
from ragtrace_collector.scoring.options import ScoringOptions
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.scoring.worker import ScoringWorker, TimedJudge, metrics_selector


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
        judge = judge_from_config(config.judge)
    store = ResultsStore(config.results_path)
    events_cfg = config.export.otlp_events
    events = None
    if events_cfg.endpoint:
        events = EvaluationEvents(events_cfg.endpoint, protocol=events_cfg.protocol, headers=dict(events_cfg.headers))
    return ScoringWorker(
        queue,
        TimedJudge(judge, metrics),
        store,
        metrics,
        metrics_for=metrics_selector(scoring.metrics, dict(scoring.pipelines)),
        evaluate=evaluate_record,
        options=ScoringOptions.from_config(scoring.options),
        events=events,
        concurrency=scoring.concurrency,
        lease_seconds=scoring.lease_seconds,
        backoff_initial=scoring.backoff_initial_seconds,
        backoff_max=scoring.backoff_max_seconds,
        judge_name=judge.name,
    )


def judge_from_config(judge_cfg: JudgeConfig) -> Judge:
    """The judge of the ``judge`` section: the embedded one for ``local``, else an LLM judge through litellm."""
    if judge_cfg.model == "local":
        return make_judge("local")
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
