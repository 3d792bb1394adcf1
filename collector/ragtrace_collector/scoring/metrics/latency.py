"""Latency from the record's streaming timings."""

from __future__ import annotations

from ragtrace_collector.scoring.metrics.base import Metric, Outcome, ScoringContext


class Latency(Metric):
    """latency = TTFT + TPOT × output tokens, in seconds (lower is better).

    The measured totals (generation and request durations) sit beside it in the details, so a
    gap between the model's token arithmetic and the wall clock is visible.
    """

    name = "latency"
    higher_is_better = False
    requires = ("ttft_seconds", "tpot_seconds", "output_tokens")
    score_range = (0.0, float("inf"))

    async def compute(self, ctx: ScoringContext) -> Outcome:
        r = ctx.record
        # present: ``requires`` is checked before ``compute`` runs
        assert r.ttft_seconds is not None and r.tpot_seconds is not None and r.output_tokens is not None
        value = float(r.ttft_seconds) + float(r.tpot_seconds) * int(r.output_tokens)
        details = {"ttft_seconds": r.ttft_seconds, "tpot_seconds": r.tpot_seconds, "output_tokens": r.output_tokens}
        if r.generation_duration_seconds is not None:
            details["measured_generation_seconds"] = r.generation_duration_seconds
        if r.request_duration_seconds is not None:
            details["measured_request_seconds"] = r.request_duration_seconds
        return Outcome(value, details)
