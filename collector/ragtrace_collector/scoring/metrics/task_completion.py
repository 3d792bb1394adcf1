"""Task completion: the task inferred from the input, the outcome from the whole execution, judged."""

from __future__ import annotations

import json

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import TaskAssessment
from ragtrace_collector.scoring.judge import JudgeError
from ragtrace_collector.scoring.metrics.base import Metric, Outcome, ScoringContext

STEP_CHARS = 2000  # each step's text shown to the judge, at most (a trace can carry whole documents)


def _cut(text: str) -> str:
    return text if len(text) <= STEP_CHARS else f"{text[:STEP_CHARS]}… [{len(text) - STEP_CHARS} more characters]"


def execution_steps(record: RagRecord) -> list[tuple[str, str]]:
    """The request's execution as (kind, content) steps, in order: the earlier conversation, the user input,
    the retrieval, the tool calls, the error if any, the response."""
    steps: list[tuple[str, str]] = []
    turns = [(t.role, t.content) for t in record.turns if t.content.strip()]
    if len(turns) > 2:  # earlier exchanges (the last two are this request's input and response)
        steps += [(f"conversation:{role}", _cut(content)) for role, content in turns[:-2]]
    if (record.user_input or "").strip():
        steps.append(("user_input", _cut(record.user_input or "")))
    contexts = [c for c in record.context_texts if c.strip()]
    if contexts:
        listed = "\n".join(f"[{i}] {_cut(c)}" for i, c in enumerate(contexts, 1))
        steps.append(("retrieval", f"{len(contexts)} documents retrieved:\n{listed}"))
    for call in record.tools_called or []:
        steps.append(("tool_call", _cut(f"{call.name}({json.dumps(call.args, ensure_ascii=False, default=str)})")))
    if record.error:
        steps.append(("error", _cut(record.error)))
    if (record.response or "").strip():
        steps.append(("response", _cut(record.response or "")))
    return steps


class TaskCompletion(Metric):
    """task_completion = the judge's verdict t ∈ [0, 1] on how completely the outcome accomplishes the task
    (DeepEval's task completion): first the judge infers the task (from the user input) and the outcome (from
    every step of the execution trace: conversation, retrieval, tool calls, error, response), then it judges the
    outcome against the task. ``details`` has the task, the outcome, the reason and the steps' kinds.
    Range 0–1, higher is better.
    """

    name = "task_completion"
    requires = ("user_input",)
    needs = (TaskAssessment,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        steps = execution_steps(ctx.record)
        judge = ctx.need(TaskAssessment)
        inferred = await judge.infer_task(steps)
        if not inferred.task.strip() or not inferred.outcome.strip():
            raise JudgeError("the judge inferred no task or no outcome")
        verdict = await judge.task_completion(inferred.task, inferred.outcome)
        return Outcome(
            float(verdict.score),
            {
                "task": inferred.task,
                "outcome": inferred.outcome,
                "reason": verdict.reason,
                "steps": [kind for kind, _ in steps],
            },
        )
