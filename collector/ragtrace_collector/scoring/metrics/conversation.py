"""Conversation completeness: did the assistant satisfy what the user wanted?"""

from __future__ import annotations

from ragtrace_collector.scoring.capabilities import IntentionSatisfaction
from ragtrace_collector.scoring.judge import JudgeError
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext, verdict_detail


def conversation_turns(ctx: ScoringContext) -> list[tuple[str, str]]:
    """The record's turns, or its single question/answer exchange when it has none."""
    r = ctx.record
    if r.turns:
        return [(t.role, t.content) for t in r.turns]
    return [("user", r.user_input or ""), ("assistant", r.response or "")]


class Completeness(Metric):
    """completeness = |user intentions satisfied| / |user intentions|.

    Intentions are extracted from the conversation's turns (a record without turns is its single
    exchange), then one call judges each intention. Range 0–1, higher is better.
    """

    name = "completeness"
    requires = ("turns",)
    needs = (IntentionSatisfaction,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        turns = conversation_turns(ctx)
        judge = ctx.need(IntentionSatisfaction)
        intentions = await ctx.memo(("intentions",), lambda: judge.extract_intentions(turns))
        intentions = [i for i in intentions if i and i.strip()]
        if not intentions:
            raise MetricSkipped("no user intentions found in the conversation")
        verdicts = await judge.intentions_satisfied(turns, intentions)
        if len(verdicts) != len(intentions):
            raise JudgeError(f"judge returned {len(verdicts)} verdicts for {len(intentions)} intentions")
        satisfied = sum(v.verdict == "yes" for v in verdicts)
        return Outcome(satisfied / len(intentions), {"intentions": [verdict_detail(v) for v in verdicts]})
