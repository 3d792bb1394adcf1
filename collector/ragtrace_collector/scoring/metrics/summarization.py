"""Summarization: QAG alignment and coverage of a summary against its source (DeepEval's definition)."""

from __future__ import annotations

import asyncio

from ragtrace_collector.scoring.capabilities import ClaimExtraction, ClaimVerification, ClosedQuestions
from ragtrace_collector.scoring.judge import JudgeError
from ragtrace_collector.scoring.metrics.base import (
    Metric,
    MetricSkipped,
    Outcome,
    ScoringContext,
    _aligned,
    verdict_detail,
)


class Summarization(Metric):
    """summarization = min(alignment, coverage), the response being a summary of a source text.

    alignment = |{c ∈ C : v(c) ≠ no}| / |C|, C the summary's claims (the shared extraction) and v(c) the
    judge's verdict of claim c against the source (``no``: contradicted or absent; ``idk`` counts as aligned);
    coverage = |{q ∈ Q : a_src(q) = yes ∧ a_sum(q) = yes}| / |{q ∈ Q : a_src(q) = yes}|, Q the ``questions``
    closed questions the judge writes from the source, a_src / a_sum the answers read from the source and from
    the summary. The source is the user input (``scoring.options.summarization.source: user_input``, the text
    given to summarise) or the retrieved contexts (then alignment shares faithfulness's verdicts).
    ``details`` has both parts, each claim's verdict and each question's two answers. Range 0–1, higher is better.
    """

    name = "summarization"
    requires = ("response",)
    needs = (ClaimExtraction, ClaimVerification, ClosedQuestions)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        cfg, r = ctx.options.summarization, ctx.record
        if cfg.source == "retrieved_contexts":
            source = "\n\n".join(ctx.contexts)
        else:
            source = r.user_input or ""
        if not source.strip():
            raise MetricSkipped(f"missing input: {cfg.source} (the source of scoring.options.summarization)")
        claims = await ctx.claims()
        if not claims:
            raise MetricSkipped("the summary makes no claims")

        async def alignment_verdicts() -> list:
            if cfg.source == "retrieved_contexts":
                return await ctx.claim_verdicts()
            judge = ctx.need(ClaimVerification)
            verdicts = await ctx.memo(
                ("claims_vs_source",), lambda: judge.verify_claims(claims, [source], ctx.question)
            )
            return _aligned(verdicts, len(claims), "claim verdicts against the source")

        async def answers() -> tuple[list[str], list, list]:
            qag = ctx.need(ClosedQuestions)
            questions = await ctx.memo(
                ("assessment_questions", cfg.source, cfg.questions),
                lambda: qag.assessment_questions(source, cfg.questions),
            )
            questions = [q for q in questions if q.strip()]
            if not questions:
                raise JudgeError("the judge wrote no assessment questions from the source")
            from_source, from_summary = await asyncio.gather(
                qag.answer_questions(questions, source), qag.answer_questions(questions, r.response or "")
            )
            return (
                questions,
                _aligned(from_source, len(questions), "answers from the source"),
                _aligned(from_summary, len(questions), "answers from the summary"),
            )

        verdicts, (questions, src, summ) = await asyncio.gather(alignment_verdicts(), answers())
        alignment = sum(v.verdict != "no" for v in verdicts) / len(verdicts)
        asked = [i for i in range(len(questions)) if src[i].verdict == "yes"]
        if not asked:
            raise JudgeError("the source answers none of the judge's own assessment questions 'yes'")
        coverage = sum(summ[i].verdict == "yes" for i in asked) / len(asked)
        return Outcome(
            min(alignment, coverage),
            {
                "alignment": alignment,
                "coverage": coverage,
                "source": cfg.source,
                "claims": [verdict_detail(v) for v in verdicts],
                # alignment counts ``idk`` as aligned: readers of these details (explanations, the results CLI) then
                # list only the ``no`` claims as the summary's problems
                "idk_counts_as_supported": True,
                "questions": [
                    {"question": q, "source": src[i].verdict, "summary": summ[i].verdict}
                    for i, q in enumerate(questions)
                ],
            },
        )
