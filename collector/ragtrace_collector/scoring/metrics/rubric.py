"""Prometheus-style rubric grading: an evaluator model's 1–5 grade on a score rubric."""

from __future__ import annotations

from ragtrace_collector.scoring.capabilities import RubricGrading
from ragtrace_collector.scoring.judge import JudgeError
from ragtrace_collector.scoring.metrics.base import Metric, Outcome, ScoringContext


class Prometheus(Metric):
    """prometheus = (g − 1) / 4, g ∈ {1..5} the evaluator's absolute grade of the response to the user input on
    a score rubric (Kim et al., Prometheus / Prometheus 2, the published absolute-grading prompt format:
    feedback first, then ``[RESULT] g``).

    The rubric (``scoring.options.prometheus.criteria`` and its five ``score_descriptions``) and the evaluator
    (``model``, the judge's when unset) come from the configuration; the record's reference is shown as the
    score-5 answer when it has one and ``use_reference`` is on. ``details`` has the raw ``grade`` and the
    ``feedback``. Range 0–1, higher is better.
    """

    name = "prometheus"
    requires = ("user_input", "response")
    needs = (RubricGrading,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        cfg, r = ctx.options.prometheus, ctx.record
        reference = r.reference if cfg.use_reference and (r.reference or "").strip() else None
        g = await ctx.need(RubricGrading).rubric_grade(
            r.user_input or "", r.response or "", cfg.criteria, list(cfg.score_descriptions), reference, cfg.model
        )
        if not 1 <= g.grade <= 5:
            raise JudgeError(f"evaluator grade {g.grade} outside 1-5")
        return Outcome(
            (g.grade - 1) / 4,
            {"grade": g.grade, "feedback": g.feedback, "with_reference": reference is not None, "model": cfg.model},
            label=str(g.grade),
        )
