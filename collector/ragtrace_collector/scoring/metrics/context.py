"""Retrieval metrics: context precision, relevancy, recall and entity recall."""

from __future__ import annotations

import re
import unicodedata

from ragtrace_collector.model.result import ChunkUsefulness
from ragtrace_collector.scoring.capabilities import (
    ChunkRelevance,
    ContextSentenceRelevance,
    EntityExtraction,
    StatementAttribution,
)
from ragtrace_collector.scoring.judge import JudgeError
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext, verdict_detail


def context_precision_at_k(flags: list[bool]) -> float:
    """Σ_k precision@k · v_k / |relevant chunks| (0 when no chunk is relevant)."""
    hits = 0
    total = 0.0
    for k, relevant in enumerate(flags, start=1):
        if relevant:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


class ContextPrecision(Metric):
    """context_precision = Σ_k (precision@k · v_k) / |relevant chunks|, over the ranked chunks.

    ``v_k`` is the judge's verdict that chunk k was useful in arriving at the reference (or at the
    answer when there is no reference); all chunks are judged in one call. Rewards rankers that put
    the useful chunks first. Range 0–1, higher is better; 0 when no chunk is useful.
    """

    name = "context_precision"
    requires = ("user_input", "retrieved_contexts")
    requires_any = (("reference", "response"),)
    needs = (ChunkRelevance,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        r = ctx.record
        against = "reference" if (r.reference or "").strip() else "response"
        flags = await ctx.chunk_relevance((r.reference if against == "reference" else r.response) or "")
        return Outcome(context_precision_at_k(flags), ChunkUsefulness(tuple(flags), against).to_details())


class ContextRelevancy(Metric):
    """context_relevancy = |context sentences relevant to the question| / |context sentences|.

    Range 0–1, higher is better.
    """

    name = "context_relevancy"
    requires = ("user_input", "retrieved_contexts")
    needs = (ContextSentenceRelevance,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        judge = ctx.need(ContextSentenceRelevance)
        result = await ctx.memo(
            ("context_sentences",),
            lambda: judge.relevant_context_sentences(ctx.record.user_input or "", ctx.contexts),
        )
        if result.total <= 0:
            raise MetricSkipped("the contexts contain no sentences")
        if len(result.relevant) > result.total:
            raise JudgeError(f"judge returned {len(result.relevant)} relevant of {result.total} sentences")
        return Outcome(
            len(result.relevant) / result.total, {"relevant_sentences": result.relevant, "total": result.total}
        )


class ContextRecall(Metric):
    """context_recall = |reference statements attributable to the contexts| / |reference statements|.

    Range 0–1, higher is better.
    """

    name = "context_recall"
    requires = ("reference", "retrieved_contexts")
    needs = (StatementAttribution,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        judge = ctx.need(StatementAttribution)
        verdicts = await ctx.memo(
            ("attribute_statements",), lambda: judge.attribute_statements(ctx.record.reference or "", ctx.contexts)
        )
        if not verdicts:
            raise MetricSkipped("the reference contains no statements")
        attributed = sum(v.verdict == "yes" for v in verdicts)
        return Outcome(attributed / len(verdicts), {"statements": [verdict_detail(v) for v in verdicts]})


def normalise_entity(entity: str) -> str:
    text = unicodedata.normalize("NFKC", entity).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    text = re.sub(r"\b(the|a|an)\b", " ", text)
    return " ".join(text.split())


class ContextEntityRecall(Metric):
    """context_entity_recall = |entities(reference) ∩ entities(contexts)| / |entities(reference)|.

    Entities (names, numbers, dates) are matched after case folding, punctuation and article
    removal. Range 0–1, higher is better.
    """

    name = "context_entity_recall"
    requires = ("reference", "retrieved_contexts")
    needs = (EntityExtraction,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        judge = ctx.need(EntityExtraction)
        ref_entities = await ctx.memo(
            ("entities", "reference"), lambda: judge.extract_entities(ctx.record.reference or "")
        )
        joined = "\n\n".join(ctx.contexts)
        ctx_entities = await ctx.memo(("entities", "contexts"), lambda: judge.extract_entities(joined))
        ref = {normalise_entity(e): e for e in ref_entities if normalise_entity(e)}
        if not ref:
            raise MetricSkipped("the reference contains no entities")
        found = {normalise_entity(e) for e in ctx_entities}
        recalled = [orig for norm, orig in ref.items() if norm in found]
        missing = [orig for norm, orig in ref.items() if norm not in found]
        return Outcome(
            len(recalled) / len(ref),
            {
                "reference_entities": list(ref.values()),
                "context_entities": list(ctx_entities),
                "recalled": recalled,
                "missing": missing,
            },
        )
