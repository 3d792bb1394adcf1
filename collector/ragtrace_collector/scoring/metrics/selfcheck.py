"""SelfCheckGPT: an answer's sentences checked against fresh samples of the generator (reference-free)."""

from __future__ import annotations

import asyncio
import hashlib

from ragtrace_collector.scoring.capabilities import ClaimVerification, NaturalLanguageInference, Sampling
from ragtrace_collector.scoring.judge import JudgeError
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext, _aligned
from ragtrace_collector.scoring.text import split_sentences

_REPLAYABLE_ROLES = ("system", "developer", "user", "assistant")
_NLI_INCONSISTENCY = {"entailment": 0.0, "neutral": 0.5, "contradiction": 1.0}
_PROMPT_INCONSISTENCY = {"yes": 0.0, "idk": 0.5, "no": 1.0}


def in_rate(key: str, rate: float) -> bool:
    """Whether a record is in a ``rate`` share of records, by a hash of its key (the same answer every time)."""
    if rate >= 1.0:
        return True
    h = int.from_bytes(hashlib.sha256(f"selfcheckgpt:{key}".encode()).digest()[:8], "big")
    return h / 2**64 < rate


class SelfCheckGPT(Metric):
    """selfcheckgpt = (1/|S|) Σ_{s∈S} (1/N) Σ_{n=1..N} x(s, sₙ): the mean inconsistency of the response's
    sentences S with N fresh samples s₁..s_N of the generator (Manakul et al., 2023).

    The samples are the generator's model (``scoring.options.selfcheckgpt.model``, else the record's ``model``)
    asked the prompt recorded on the trace (``prompt_messages``) N = ``samples`` times at ``temperature`` > 0,
    over the judge's connection, their tokens counted as judge usage. ``variant: prompt`` (SelfCheck-Prompt):
    x = 0 when the sample supports the sentence, 1 when not, 0.5 when the judge cannot tell; ``variant: nli``:
    x = 1 for contradiction, 0.5 neutral, 0 entailment. A record is checked only inside the ``rate`` share
    (a hash of its key), since each costs N generations. ``details`` has every sentence's score and the
    samples. Range 0–1, lower is better (0: every sentence consistent with every sample).
    """

    name = "selfcheckgpt"
    higher_is_better = False
    requires = ("response",)
    needs = (Sampling, NaturalLanguageInference, ClaimVerification)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        cfg, r = ctx.options.selfcheckgpt, ctx.record
        if not in_rate(r.key or (r.response or ""), cfg.rate):
            raise MetricSkipped(f"not in the scoring.options.selfcheckgpt.rate share ({cfg.rate:g}) of records")
        prompt = [(t.role.lower(), t.content) for t in r.prompt_messages if t.content.strip()]
        if not prompt:
            raise MetricSkipped("no generator prompt recorded on the trace (prompt_messages): nothing to re-sample")
        odd = sorted({role for role, _ in prompt if role not in _REPLAYABLE_ROLES})
        if odd:
            raise MetricSkipped(f"the recorded prompt has {', '.join(odd)} messages, which cannot be replayed")
        model = cfg.model or r.model
        if not model:
            raise MetricSkipped(
                "no generator model: the record has none and scoring.options.selfcheckgpt.model is unset"
            )
        sentences = await asyncio.to_thread(split_sentences, r.response or "")
        if not sentences:
            raise MetricSkipped("the response has no sentences")
        samples = await ctx.need(Sampling).sample_responses(prompt, cfg.samples, cfg.temperature, model)
        if len(samples) != cfg.samples:
            raise JudgeError(f"got {len(samples)} samples for {cfg.samples} asked")
        if cfg.variant == "nli":
            nli = ctx.need(NaturalLanguageInference)
            rows = await asyncio.gather(*(nli.nli(sample, sentences) for sample in samples))
            matrix = [
                [_NLI_INCONSISTENCY[v.label] for v in _aligned(row, len(sentences), "NLI verdicts")] for row in rows
            ]
        else:
            per_sample = await ctx.need(ClaimVerification).verify_claims_per_context(
                sentences, samples, r.user_input or ""
            )
            if len(per_sample) != len(samples):
                raise JudgeError(f"judge returned {len(per_sample)} rows for {len(samples)} samples")
            matrix = [
                [_PROMPT_INCONSISTENCY[v.verdict] for v in _aligned(row, len(sentences), "sentence verdicts")]
                for row in per_sample
            ]
        per_sentence = [sum(row[i] for row in matrix) / len(matrix) for i in range(len(sentences))]
        return Outcome(
            sum(per_sentence) / len(per_sentence),
            {
                "variant": cfg.variant,
                "model": model,
                "samples": samples,
                "sentences": [{"sentence": s, "inconsistency": x} for s, x in zip(sentences, per_sentence)],
            },
        )
