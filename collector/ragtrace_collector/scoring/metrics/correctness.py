"""Answer correctness and answer similarity: the answer against a reference answer."""

from __future__ import annotations

from ragtrace_collector.scoring.capabilities import Embedding, ReferenceClassification
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext, clip01, cosine


async def semantic_similarity(ctx: ScoringContext) -> float:
    """Cosine of the answer's and the reference's embeddings, clipped to [0, 1]."""
    vecs = await ctx.embeddings([ctx.record.response or "", ctx.record.reference or ""])
    return clip01(cosine(vecs[0], vecs[1]))


class AnswerSimilarity(Metric):
    """answer_similarity = cos(embed(response), embed(reference)), clipped to [0, 1]."""

    name = "answer_similarity"
    requires = ("response", "reference")
    needs = (Embedding,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        return Outcome(await semantic_similarity(ctx))


class AnswerCorrectness(Metric):
    """answer_correctness = w_f · F1 + w_s · similarity, with F1 = TP / (TP + 0.5 · (FP + FN)).

    TP: answer statements the reference supports; FP: answer statements it does not; FN: reference
    statements the answer misses (one judge call). similarity is ``answer_similarity``. Weights
    ``(w_f, w_s)`` default to Ragas's (0.75, 0.25); with ``w_s = 0`` no embedding is needed.
    Range 0–1, higher is better.
    """

    name = "answer_correctness"
    requires = ("user_input", "response", "reference")
    needs = (ReferenceClassification, Embedding)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        r = ctx.record
        judge = ctx.need(ReferenceClassification)
        cls = await ctx.memo(
            ("classify_statements",),
            lambda: judge.classify_statements(r.user_input or "", r.response or "", r.reference or ""),
        )
        tp, fp, fn = len(cls.tp), len(cls.fp), len(cls.fn)
        if tp + fp + fn == 0:
            raise MetricSkipped("no statements in the response or the reference")
        f1 = tp / (tp + 0.5 * (fp + fn))
        w_f, w_s = ctx.options.answer_correctness_weights
        details = {"TP": cls.tp, "FP": cls.fp, "FN": cls.fn, "factual_f1": f1, "weights": [w_f, w_s]}
        similarity = 0.0
        if w_s > 0:
            similarity = await semantic_similarity(ctx)
            details["semantic_similarity"] = similarity
        return Outcome(w_f * f1 + w_s * similarity, details)
