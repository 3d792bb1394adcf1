"""A record whose answer has one supported, one contradicted and one not-found claim, scored by a scripted judge
that gives the three verdicts as the local judge words them, for the tests of everything that shows verdicts
(the metrics' details, the explorer, OTLP/Phoenix explanations, the results CLI)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.capabilities import ClaimExtraction, ClaimVerification
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judge import ClaimVerdict, Judge
from ragtrace_collector.scoring.options import ScoringOptions

SUPPORTED = "The Aldren kettle has an automatic shut-off."
CONTRADICTED = "The warranty lasts five years."
NOT_FOUND = "It comes with 5 lifetime filters."
CONTRADICTED_REASON = "contradicted by context #2: '…for two years…' (P=0.04)"
NOT_FOUND_REASON = (
    "not found in the contexts (P=0.12): numbers not in the contexts: 5; words not in the contexts: lifetime"
)
VERDICTS = {
    SUPPORTED: ClaimVerdict(
        SUPPORTED,
        "yes",
        "supported by context #1: '…has an automatic shut-off…' (P=0.93)",
        "The kettle has an automatic shut-off.",
        0.93,
    ),
    CONTRADICTED: ClaimVerdict(CONTRADICTED, "no", CONTRADICTED_REASON, "The motor is covered for two years.", 0.04),
    NOT_FOUND: ClaimVerdict(NOT_FOUND, "idk", NOT_FOUND_REASON, None, 0.12),
}

RECORD = RagRecord(
    trace_id="5" * 32,
    pipeline="support",
    user_input="What does the Aldren kettle come with?",
    retrieved_contexts=["The kettle has an automatic shut-off.", "The motor is covered for two years."],
    response=f"{SUPPORTED} {CONTRADICTED} {NOT_FOUND}",
)


class ThreeVerdictJudge(Judge, ClaimExtraction, ClaimVerification):
    """Extracts the answer's three claims and gives each its verdict above (or ``no`` with ``llm_reason``, as
    an LLM judge does for a claim it finds unsupported without saying why, where ``llm_style``)."""

    name = "local"

    def __init__(self, llm_style: bool = False) -> None:
        self.llm_style = llm_style

    async def extract_claims(self, question: str, response: str) -> list[str]:
        return [SUPPORTED, CONTRADICTED, NOT_FOUND]

    async def verify_claims(self, claims: Sequence[str], contexts: Sequence[str], question: str = "") -> list:
        if self.llm_style:
            return [
                VERDICTS[c] if c == SUPPORTED else ClaimVerdict(c, "no", "the contexts do not say this") for c in claims
            ]
        return [VERDICTS[c] for c in claims]


def scored(
    metrics: Sequence[str] = ("faithfulness", "hallucination"),
    options: ScoringOptions | None = None,
    llm_style: bool = False,
) -> list[MetricResult]:
    """The record's results for ``metrics`` (computed by the real metrics from the scripted verdicts)."""
    return asyncio.run(evaluate_record(RECORD, list(metrics), ThreeVerdictJudge(llm_style), options))
