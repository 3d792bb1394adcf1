"""Tool correctness: the tools an agentic request called against the tools it was expected to call. No judge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragtrace_collector.model.record import ToolCall
from ragtrace_collector.scoring.metrics.base import Metric, Outcome, ScoringContext


def call_matches(called: ToolCall, expected: ToolCall, arguments: bool) -> bool:
    """Same tool name; with ``arguments``, every argument the expected call states has the same value (JSON
    equality) in the call (arguments the expected call leaves out are not checked, as in Ragas)."""
    if called.name != expected.name:
        return False
    return not arguments or all(k in called.args and called.args[k] == v for k, v in expected.args.items())


def max_matching(called: Sequence[ToolCall], expected: Sequence[ToolCall], arguments: bool) -> list[int | None]:
    """A largest one-to-one matching, as ``matched[j]`` = the index of the call matched to expected call j."""
    owner: dict[int, int] = {}  # called index → expected index

    def augment(j: int, seen: set[int]) -> bool:
        for i, c in enumerate(called):
            if i in seen or not call_matches(c, expected[j], arguments):
                continue
            seen.add(i)
            if i not in owner or augment(owner[i], seen):
                owner[i] = j
                return True
        return False

    for j in range(len(expected)):
        augment(j, set())
    matched: list[int | None] = [None] * len(expected)
    for i, j in owner.items():
        matched[j] = i
    return matched


def lcs_length(called: Sequence[ToolCall], expected: Sequence[ToolCall], arguments: bool) -> int:
    """Longest common subsequence of the two call sequences under :func:`call_matches`."""
    prev = [0] * (len(expected) + 1)
    for c in called:
        row = [0]
        for j, e in enumerate(expected):
            row.append(prev[j] + 1 if call_matches(c, e, arguments) else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


def tool_correctness(
    called: Sequence[ToolCall], expected: Sequence[ToolCall], *, ordering: bool, arguments: bool, exact: bool
) -> tuple[float, dict[str, Any]]:
    """The score and its details: see :class:`ToolCorrectness`."""
    matched = max_matching(called, expected, arguments)
    hit = [i for i in matched if i is not None]
    details: dict[str, Any] = {
        "called": [c.name for c in called],
        "expected": [e.name for e in expected],
        "missing": [e.name for e, i in zip(expected, matched) if i is None],
        "unexpected": [c.name for i, c in enumerate(called) if i not in hit],
        "ordering": ordering,
        "arguments": arguments,
        "exact_match": exact,
    }
    if not expected:
        details["matched"] = 0
        return (1.0 if not called else 0.0), details
    if ordering:
        n = lcs_length(called, expected, arguments)
        in_order = n == len(expected) == len(called)
    else:
        n = len(hit)
        in_order = n == len(expected) == len(called)
    details["matched"] = n
    if exact:
        return (1.0 if in_order else 0.0), details
    return n / len(expected), details


class ToolCorrectness(Metric):
    """tool_correctness = |matched expected calls| / |expected calls| — tools called (``tools_called``, from the
    trace's tool spans or a data set row) against tools expected (``reference_tool_calls``, Ragas's field).

    A call matches an expected call when the tool name is the same and, with ``scoring.options.
    tool_correctness_arguments``, every argument the expected call states has the same value. Matching is one to
    one (a tool expected twice must be called twice); unordered, matched = the largest such matching; with
    ``tool_correctness_ordering``, matched = the longest common subsequence of the two call sequences.
    With ``tool_correctness_exact_match`` the score is 1 when every call matches an expected one and none is
    missing or extra (in order, when ordering counts), else 0. Extra calls lower only the exact-match score
    (they are listed as ``unexpected``). No tool expected: 1 when none was called, else 0. Range 0–1.
    """

    name = "tool_correctness"
    requires = ("tools_called", "reference_tool_calls")

    async def compute(self, ctx: ScoringContext) -> Outcome:
        o = ctx.options
        score, details = tool_correctness(
            ctx.record.tools_called or [],
            ctx.record.reference_tool_calls or [],
            ordering=o.tool_correctness_ordering,
            arguments=o.tool_correctness_arguments,
            exact=o.tool_correctness_exact_match,
        )
        return Outcome(score, details)
