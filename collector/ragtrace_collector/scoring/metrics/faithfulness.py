"""Faithfulness and hallucination: the answer's claims checked against the retrieved contexts.

Both read the same decisions (claims extracted once per record, one verdict call for all claims),
so asking for both costs what asking for one does.
"""

from __future__ import annotations

from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext, verdict_detail


async def _claims_and_verdicts(ctx: ScoringContext):
    claims = await ctx.claims()
    if not claims:
        raise MetricSkipped("the response contains no checkable claims")
    return claims, await ctx.claim_verdicts()


def _supported(verdict: str, idk_supported: bool) -> bool:
    return verdict == "yes" or (idk_supported and verdict == "idk")


class Faithfulness(Metric):
    """faithfulness = |claims supported by the contexts| / |claims|.

    A claim is supported when its verdict is ``yes``; ``idk`` counts as supported only when
    ``ScoringOptions.idk_counts_as_supported`` is set (default no). Range 0–1, higher is better.
    """

    name = "faithfulness"
    requires = ("user_input", "response", "retrieved_contexts")

    async def compute(self, ctx: ScoringContext) -> Outcome:
        claims, verdicts = await _claims_and_verdicts(ctx)
        idk = ctx.options.idk_counts_as_supported
        supported = sum(_supported(v.verdict, idk) for v in verdicts)
        return Outcome(
            supported / len(claims),
            {
                "claims": [verdict_detail(v) for v in verdicts],
                "supported": supported,
                "total": len(claims),
                "idk_counts_as_supported": idk,
            },
        )


class Hallucination(Metric):
    """hallucination = |claims unsupported or contradicted by the contexts| / |claims|.

    The complement of faithfulness under the same ``idk`` setting. Range 0–1, lower is better;
    ``details.unsupported`` lists the offending claims.
    """

    name = "hallucination"
    higher_is_better = False
    requires = ("user_input", "response", "retrieved_contexts")

    async def compute(self, ctx: ScoringContext) -> Outcome:
        claims, verdicts = await _claims_and_verdicts(ctx)
        idk = ctx.options.idk_counts_as_supported
        bad = [v for v in verdicts if not _supported(v.verdict, idk)]
        return Outcome(
            len(bad) / len(claims),
            {
                "claims": [verdict_detail(v) for v in verdicts],
                "unsupported": [v.statement for v in bad],
                "total": len(claims),
                "idk_counts_as_supported": idk,
            },
        )
