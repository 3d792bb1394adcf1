"""NLI: the response's claims classified against a premise (entailment / neutral / contradiction)."""

from __future__ import annotations

from ragtrace_collector.scoring.capabilities import ClaimExtraction, NaturalLanguageInference
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext, _aligned


class Nli(Metric):
    """nli = |E| / |C|: the share of the response's claims C that the premise entails (E), each claim labelled
    ``entailment``, ``neutral`` or ``contradiction`` by the judge's NLI decision.

    The premise is the retrieved contexts joined (``scoring.options.nli.premise: retrieved_contexts``) or the
    reference (``reference``); the claims are the shared extraction (faithfulness's). ``details`` has each
    claim's label and the rates of the three labels (``contradiction_rate`` = |contradicted| / |C|); ``label``
    is ``contradiction`` when any claim is contradicted, else ``entailment`` when all are entailed, else
    ``neutral``. Range 0–1, higher is better. Needs a judge that makes three-way NLI decisions: the LLM judge,
    or the local judge, whose claim verdicts against the premise are the three labels (supported → entailment,
    contradicted → contradiction, not found → neutral).
    """

    name = "nli"
    requires = ("response",)
    needs = (ClaimExtraction, NaturalLanguageInference)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        which = ctx.options.nli.premise
        premise = (ctx.record.reference or "") if which == "reference" else "\n\n".join(ctx.contexts)
        if not premise.strip():
            raise MetricSkipped(f"missing input: {which} (scoring.options.nli.premise)")
        claims = await ctx.claims()
        if not claims:
            raise MetricSkipped("the response makes no claims to infer")
        judge = ctx.need(NaturalLanguageInference)
        verdicts = _aligned(
            await ctx.memo(("nli", which), lambda: judge.nli(premise, claims)), len(claims), "NLI verdicts"
        )
        counts = {k: sum(v.label == k for v in verdicts) for k in ("entailment", "neutral", "contradiction")}
        n = len(verdicts)
        label = (
            "contradiction" if counts["contradiction"] else ("entailment" if counts["entailment"] == n else "neutral")
        )
        return Outcome(
            counts["entailment"] / n,
            {
                "premise": which,
                "claims": [{"statement": v.statement, "label": v.label, "reason": v.reason} for v in verdicts],
                **{f"{k}_rate": c / n for k, c in counts.items()},
            },
            label=label,
        )
