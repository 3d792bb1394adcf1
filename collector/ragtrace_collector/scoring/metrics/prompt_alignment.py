"""Prompt alignment: does the response follow each instruction of the prompt template?"""

from __future__ import annotations

from ragtrace_collector.scoring.capabilities import InstructionExtraction, InstructionFollowing
from ragtrace_collector.scoring.metrics.base import (
    Metric,
    MetricSkipped,
    Outcome,
    ScoringContext,
    _aligned,
    verdict_detail,
)


class PromptAlignment(Metric):
    """prompt_alignment = |{i ∈ I : the response follows i}| / |I|, one judge verdict per instruction.

    The instructions I are ``scoring.options.prompt_alignment.instructions`` when set, else those the judge
    extracts from the system (and developer) messages of the generator prompt recorded on the trace
    (``prompt_messages``); without either the metric is skipped. ``details`` has each instruction's verdict
    and where the instructions came from. Range 0–1, higher is better.
    """

    name = "prompt_alignment"
    requires = ("response",)
    needs = (InstructionExtraction, InstructionFollowing)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        r = ctx.record
        instructions = [i.strip() for i in ctx.options.prompt_alignment.instructions if i.strip()]
        origin = "configured"
        if not instructions:
            template = "\n\n".join(
                t.content for t in r.prompt_messages if t.role.lower() in ("system", "developer") and t.content.strip()
            )
            if not template:
                raise MetricSkipped(
                    "no instructions: set scoring.options.prompt_alignment.instructions, or record the generator's "
                    "prompt with its system message on the trace"
                )
            extractor = ctx.need(InstructionExtraction)
            instructions = await ctx.memo(("instructions", template), lambda: extractor.extract_instructions(template))
            instructions = [i for i in instructions if i.strip()]
            if not instructions:
                raise MetricSkipped("the recorded system prompt gives no instructions")
            origin = "system_prompt"
        verdicts = _aligned(
            await ctx.need(InstructionFollowing).instructions_followed(
                instructions, r.user_input or "", r.response or ""
            ),
            len(instructions),
            "instruction verdicts",
        )
        followed = sum(v.verdict == "yes" for v in verdicts)
        return Outcome(
            followed / len(verdicts),
            {"instructions_from": origin, "instructions": [verdict_detail(v) for v in verdicts]},
        )
