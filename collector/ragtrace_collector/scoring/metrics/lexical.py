"""Reference-based lexical metrics: BLEU, ROUGE, Levenshtein. No judge involved."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ragtrace_collector.scoring.metrics.base import Metric, Outcome, ScoringContext

# sacrebleu and rouge-score load lazily: importing the engine should not pay for them.


@lru_cache(maxsize=1)
def _bleu() -> Any:
    from sacrebleu.metrics import BLEU

    return BLEU(effective_order=True)


@lru_cache(maxsize=1)
def _rouge() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


class Bleu(Metric):
    """bleu = sacrebleu sentence BLEU(response, [reference]) / 100 (effective order). Range 0–1."""

    name = "bleu"
    requires = ("response", "reference")

    async def compute(self, ctx: ScoringContext) -> Outcome:
        result = _bleu().sentence_score(ctx.record.response or "", [ctx.record.reference or ""])
        return Outcome(result.score / 100.0, {"bleu": result.score, "precisions": list(result.precisions)})


class Rouge(Metric):
    """rouge = ROUGE F1 of response vs reference (rouge-score, stemmed); ``rouge_type`` picks the
    reported one (default ROUGE-L), all three F1s are in the details. Range 0–1."""

    name = "rouge"
    requires = ("response", "reference")

    async def compute(self, ctx: ScoringContext) -> Outcome:
        scores = _rouge().score(ctx.record.reference or "", ctx.record.response or "")
        f1 = {k: v.fmeasure for k, v in scores.items()}
        return Outcome(f1[ctx.options.rouge_type], {"f1": f1, "rouge_type": ctx.options.rouge_type})


class Levenshtein(Metric):
    """levenshtein = 1 − edit distance / max(len(response), len(reference)) (rapidfuzz). Range 0–1."""

    name = "levenshtein"
    requires = ("response", "reference")

    async def compute(self, ctx: ScoringContext) -> Outcome:
        from rapidfuzz.distance import Levenshtein as _Lev

        a, b = ctx.record.response or "", ctx.record.reference or ""
        return Outcome(_Lev.normalized_similarity(a, b), {"distance": _Lev.distance(a, b)})
