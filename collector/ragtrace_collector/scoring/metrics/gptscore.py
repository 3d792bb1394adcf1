"""GPTScore: how probable a scoring model finds the response, given an instruction."""

from __future__ import annotations

import math
import string

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import TextLogprobs
from ragtrace_collector.scoring.judge import JudgeError
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext

_FIELDS = ("user_input", "retrieved_contexts", "reference")


def fill_instruction(template: str, record: RagRecord) -> str:
    """The instruction with ``{user_input}``, ``{retrieved_contexts}`` (numbered, joined) and ``{reference}``
    filled from the record; a field it names that the record lacks skips the metric."""
    values: dict[str, str] = {}
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None or name in values:
            continue
        if name not in _FIELDS:
            raise MetricSkipped(f"gptscore.instruction names {{{name}}}; it may use {', '.join(_FIELDS)}")
        if name == "retrieved_contexts":
            value = "\n".join(f"[{i}] {c}" for i, c in enumerate(record.context_texts, 1) if c.strip())
        else:
            value = getattr(record, name) or ""
        if not value.strip():
            raise MetricSkipped(f"missing input: {name} (named by scoring.options.gptscore.instruction)")
        values[name] = value
    return template.format_map(values)


class GPTScore(Metric):
    """gptscore = (1/|T|) Σ_{t∈T} log p(t | instruction, t_<): the mean natural-log probability of the
    response's tokens T right after the instruction (Fu et al., 2023, uniform token weights).

    The instruction is ``scoring.options.gptscore.instruction`` filled from the record; the probabilities come
    from ``scoring.options.gptscore.model``, a completions model whose provider echoes the prompt's token
    log-probabilities (``echo`` with ``logprobs``). Without that model, or when the provider returns none, the
    metric is skipped: chat models only give the probabilities of tokens they generate themselves.
    ``details`` has the token count, the sum, and ``token_probability`` = exp(score) (inverse perplexity).
    Range (−∞, 0], higher is better; not comparable across scoring models.
    """

    name = "gptscore"
    requires = ("response",)
    needs = (TextLogprobs,)
    score_range = (float("-inf"), 0.0)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        cfg = ctx.options.gptscore
        if not cfg.model:
            raise MetricSkipped(
                "no scoring.options.gptscore.model: GPTScore needs a completions model that returns the prompt's "
                "token log-probabilities (echo), which chat models do not"
            )
        instruction = fill_instruction(cfg.instruction, ctx.record)
        response = ctx.record.response or ""
        continuation = response if instruction[-1:].isspace() else " " + response
        lp = await ctx.need(TextLogprobs).continuation_logprobs(instruction, continuation, cfg.model)
        if not lp.logprobs or len(lp.logprobs) != len(lp.tokens):
            raise JudgeError("the scoring model returned no token log-probabilities for the response")
        total = math.fsum(lp.logprobs)
        mean = total / len(lp.logprobs)
        return Outcome(
            mean,
            {
                "model": cfg.model,
                "tokens": len(lp.tokens),
                "sum_logprob": total,
                "token_probability": math.exp(mean),
            },
        )
