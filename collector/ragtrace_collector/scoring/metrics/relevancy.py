"""Answer relevancy in three variants: statement verdicts, synthetic questions, embeddings."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from ragtrace_collector.scoring.capabilities import Embedding, QuestionGeneration, StatementRelevance
from ragtrace_collector.scoring.judge import JudgeUnsupported
from ragtrace_collector.scoring.metrics.base import (
    Metric,
    MetricSkipped,
    Outcome,
    ScoringContext,
    clip01,
    cosine,
    verdict_detail,
)
from ragtrace_collector.scoring.options import ANSWER_RELEVANCY_VARIANTS
from ragtrace_collector.scoring.text import split_sentences


class AnswerRelevancy(Metric):
    """How much of the answer addresses the question, in one of three variants.

    * ``statements``: |statements judged relevant to the question| / |statements| (DeepEval);
      ``idk`` verdicts count as relevant, as DeepEval does.
    * ``questions``: N=3 questions generated back from the answer; score = mean cosine between the
      question and each generated one (Ragas), 0 when every generation is non-committal.
    * ``embedding``: judge-free, mean cosine between the question and each answer sentence.

    Cosines are clipped to [0, 1]. With no variant set, the first one the judge supports in the
    order above is used (``details.variant`` says which). Range 0–1, higher is better.
    """

    name = "answer_relevancy"
    requires = ("user_input", "response")
    needs = (StatementRelevance, QuestionGeneration, Embedding)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        chosen = ctx.options.answer_relevancy_variant
        variants = (chosen,) if chosen else ANSWER_RELEVANCY_VARIANTS
        reasons = []
        for variant in variants:
            try:
                outcome = await getattr(self, f"_{variant}")(ctx)
            except JudgeUnsupported as exc:
                if chosen:
                    raise
                reasons.append(str(exc))
                continue
            outcome.details["variant"] = variant
            return outcome
        raise JudgeUnsupported("; ".join(reasons))

    async def _statements(self, ctx: ScoringContext) -> Outcome:
        r, judge = ctx.record, ctx.need(StatementRelevance)
        verdicts = await ctx.memo(
            ("statement_relevance",), lambda: judge.statement_relevance(r.user_input or "", r.response or "")
        )
        if not verdicts:
            raise MetricSkipped("the response contains no statements")
        relevant = sum(v.verdict in ("yes", "idk") for v in verdicts)
        return Outcome(relevant / len(verdicts), {"statements": [verdict_detail(v) for v in verdicts]})

    async def _questions(self, ctx: ScoringContext) -> Outcome:
        r, n, judge = ctx.record, ctx.options.questions_n, ctx.need(QuestionGeneration)
        generated = await ctx.memo(
            ("generate_questions", n), lambda: judge.generate_questions(r.response or "", ctx.contexts, n)
        )
        generated = [g for g in generated if g.question.strip()]  # an empty question has no meaning to compare
        if not generated:
            raise MetricSkipped("the judge generated no questions")
        details: dict[str, Any] = {
            "questions": [{"question": g.question, "noncommittal": g.noncommittal} for g in generated]
        }
        if all(g.noncommittal for g in generated):
            details["noncommittal"] = True
            return Outcome(0.0, details)
        vecs = await ctx.embeddings([r.user_input or ""] + [g.question for g in generated])
        cosines = [cosine(vecs[0], v) for v in vecs[1:]]
        details["cosines"] = [round(c, 6) for c in cosines]
        return Outcome(clip01(float(np.mean(cosines))), details)

    async def _embedding(self, ctx: ScoringContext) -> Outcome:
        r = ctx.record
        sentences = await asyncio.to_thread(split_sentences, r.response or "")  # pysbd: ms per answer, off the loop
        if not sentences:
            raise MetricSkipped("the response has no sentences")
        vecs = await ctx.embeddings([r.user_input or ""] + sentences)
        cosines = [cosine(vecs[0], v) for v in vecs[1:]]
        return Outcome(
            clip01(float(np.mean(cosines))),
            {"segments": [{"text": s, "cosine": round(c, 6)} for s, c in zip(sentences, cosines)]},
        )
