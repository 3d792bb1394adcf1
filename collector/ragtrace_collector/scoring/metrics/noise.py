"""Noise sensitivity: incorrect answer claims that the retrieved chunks led the generator into."""

from __future__ import annotations

from ragtrace_collector.scoring.capabilities import ChunkRelevance, ClaimExtraction, ClaimVerification
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext


async def _noise(ctx: ScoringContext) -> dict:
    claims = await ctx.claims()
    if not claims:
        raise MetricSkipped("the response contains no checkable claims")
    correct = [v.verdict == "yes" for v in await ctx.claims_vs_reference()]
    relevant_chunks = await ctx.chunk_relevance(ctx.record.reference or "")
    entail = [[v.verdict == "yes" for v in row] for row in await ctx.claims_per_context()]
    n = len(claims)
    by_relevant = [any(entail[j][i] for j in range(len(entail)) if relevant_chunks[j]) for i in range(n)]
    by_irrelevant = [
        any(entail[j][i] for j in range(len(entail)) if not relevant_chunks[j]) and not by_relevant[i] for i in range(n)
    ]
    incorrect = [not c for c in correct]
    return {
        "claims": claims,
        "correct": [int(c) for c in correct],
        "relevant_chunks": [int(f) for f in relevant_chunks],
        "entailed_by_relevant_chunk": [int(x) for x in by_relevant],
        "entailed_by_irrelevant_chunk": [int(x) for x in by_irrelevant],
        "_relevant": sum(a and b for a, b in zip(incorrect, by_relevant)) / n,
        "_irrelevant": sum(a and b for a, b in zip(incorrect, by_irrelevant)) / n,
    }


def _outcome(d: dict, key: str) -> Outcome:
    score = d[key]
    return Outcome(score, {k: v for k, v in d.items() if not k.startswith("_")})


class NoiseSensitivityRelevant(Metric):
    """noise_sensitivity_relevant = |incorrect claims entailed by a relevant chunk| / |claims|.

    Claims are the answer's (shared with faithfulness); a claim is incorrect when the reference
    does not support it; a chunk is relevant when the judge finds it useful towards the
    reference (shared with context_precision); entailment per chunk comes from one call. Range
    0–1, lower is better.
    """

    name = "noise_sensitivity_relevant"
    higher_is_better = False
    requires = ("user_input", "response", "reference", "retrieved_contexts")
    needs = (ClaimExtraction, ClaimVerification, ChunkRelevance)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        return _outcome(await ctx.memo(("noise",), lambda: _noise(ctx)), "_relevant")


class NoiseSensitivityIrrelevant(Metric):
    """noise_sensitivity_irrelevant = |incorrect claims entailed only by irrelevant chunks| / |claims|.

    As Ragas: a claim entailed by a relevant chunk counts in the relevant mode, not here.
    Range 0–1, lower is better.
    """

    name = "noise_sensitivity_irrelevant"
    higher_is_better = False
    requires = ("user_input", "response", "reference", "retrieved_contexts")
    needs = (ClaimExtraction, ClaimVerification, ChunkRelevance)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        return _outcome(await ctx.memo(("noise",), lambda: _noise(ctx)), "_irrelevant")
