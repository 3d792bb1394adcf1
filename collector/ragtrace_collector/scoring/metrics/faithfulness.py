"""Faithfulness and hallucination: the answer's claims checked against the retrieved contexts.

Both read the same decisions (claims extracted once per record, one verdict call for all claims),
so asking for both costs what asking for one does.
"""

from __future__ import annotations

from ragtrace_collector.model.result import claim_kind
from ragtrace_collector.scoring.capabilities import ClaimExtraction, ClaimVerification
from ragtrace_collector.scoring.judge import ClaimVerdict
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext, verdict_detail


async def _claims_and_verdicts(ctx: ScoringContext):
    claims = await ctx.claims()
    if not claims:
        raise MetricSkipped("the response contains no checkable claims")
    return claims, await ctx.claim_verdicts()


def _supported(verdict: str, idk_supported: bool) -> bool:
    return verdict == "yes" or (idk_supported and verdict == "idk")


def _problems(verdicts: list[ClaimVerdict], idk_supported: bool) -> tuple[list[str], list[str]]:
    """The statements of the claims not counted as supported that the contexts contradict (a ``no`` whose reason
    says "contradicted") and that are not found in them (``idk``). A ``no`` whose reason does not say which (an
    LLM judge's ``no`` covers both) is in neither list, nor in the counts made from them."""
    kinds = [
        (v.statement, claim_kind(v.verdict, v.reason)) for v in verdicts if not _supported(v.verdict, idk_supported)
    ]
    return [s for s, k in kinds if k == "contradicted"], [s for s, k in kinds if k == "not_found"]


class Faithfulness(Metric):
    """faithfulness = |claims supported by the contexts| / |claims|.

    A claim is supported when its verdict is ``yes``; ``idk`` counts as supported only when
    ``ScoringOptions.idk_counts_as_supported`` is set (default no). Range 0–1, higher is better.
    ``details`` counts the claims ``supported``, ``contradicted`` (a ``no`` whose reason says so) and ``not_found``
    in the contexts (``idk``, unless it counted as supported), of ``total``.
    """

    name = "faithfulness"
    requires = ("user_input", "response", "retrieved_contexts")
    needs = (ClaimExtraction, ClaimVerification)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        claims, verdicts = await _claims_and_verdicts(ctx)
        idk = ctx.options.idk_counts_as_supported
        supported = sum(_supported(v.verdict, idk) for v in verdicts)
        contradicted, not_found = _problems(verdicts, idk)
        return Outcome(
            supported / len(claims),
            {
                "claims": [verdict_detail(v) for v in verdicts],
                "supported": supported,
                "contradicted": len(contradicted),
                "not_found": len(not_found),
                "total": len(claims),
                "idk_counts_as_supported": idk,
            },
        )


class Hallucination(Metric):
    """hallucination = |claims unsupported or contradicted by the contexts| / |claims|.

    The complement of faithfulness under the same ``idk`` setting. Range 0–1, lower is better;
    ``details.unsupported`` lists the offending claims; of them, ``contradicted_claims`` those the contexts
    contradict and ``not_found_claims`` those not found in them (``contradicted`` and ``not_found`` count them).
    """

    name = "hallucination"
    higher_is_better = False
    requires = ("user_input", "response", "retrieved_contexts")
    needs = (ClaimExtraction, ClaimVerification)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        claims, verdicts = await _claims_and_verdicts(ctx)
        idk = ctx.options.idk_counts_as_supported
        bad = [v for v in verdicts if not _supported(v.verdict, idk)]
        contradicted, not_found = _problems(verdicts, idk)
        return Outcome(
            len(bad) / len(claims),
            {
                "claims": [verdict_detail(v) for v in verdicts],
                "unsupported": [v.statement for v in bad],
                "contradicted": len(contradicted),
                "not_found": len(not_found),
                "contradicted_claims": contradicted,
                "not_found_claims": not_found,
                "total": len(claims),
                "idk_counts_as_supported": idk,
            },
        )
