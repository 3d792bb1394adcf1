"""Score one record on a set of metrics with one judge, paying for each decision once.

Metrics of a record run concurrently and share a :class:`ScoringContext`: the answer's claims
are extracted once and reused by faithfulness, hallucination and noise sensitivity; chunk
relevance is shared by context precision and noise sensitivity; embeddings are cached by text.
Each metric's judge calls, tokens and cost are counted in its own usage scope (a shared decision
is counted once, on the metric that asked first). The LLM judge adds an identical-call cache on top.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.scoring.metrics import METRICS, ScoringContext
from ragtrace_collector.scoring.options import ScoringOptions
from ragtrace_collector.scoring.provenance import provenance

__all__ = ["ScoringOptions", "evaluate_record", "unknown_metrics"]


def unknown_metrics(names: Sequence[str]) -> list[str]:
    """The names that are not registered metrics (for validating configuration up front)."""
    return [n for n in names if n not in METRICS]


async def evaluate_record(
    record: RagRecord, metrics: Sequence[str], judge: Judge, options: ScoringOptions | None = None
) -> list[MetricResult]:
    """One :class:`MetricResult` per requested metric, in order. Never raises for a metric's
    failure: unknown names, missing inputs, unsupported decisions and judge errors are results. Each carries its
    provenance (the judge's identity, the metric's version, ragtrace's)."""
    ctx = ScoringContext(record, judge, options)
    names = list(dict.fromkeys(metrics))

    async def one(name: str) -> MetricResult:
        metric = METRICS.get(name)
        if metric is None:
            return MetricResult(
                metric=name, status="error", reason=f"unknown metric {name!r}; known: {', '.join(METRICS)}"
            )
        return await metric.score(record, judge, ctx)

    try:
        results = await asyncio.gather(*(one(n) for n in names))
    finally:
        ctx.cancel_pending()  # only does anything when we were cancelled mid-way
    for result in results:
        result.provenance = provenance(judge, result.metric)
    by_name = dict(zip(names, results))
    return [by_name[n] for n in metrics]
