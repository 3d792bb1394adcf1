"""Tool correctness: the worked example, each option, the skips, and the tools read from a trace's spans."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from ragtrace_collector.model.record import RagRecord, ToolCall
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions import build_record
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.metrics.tools import tool_correctness
from ragtrace_collector.scoring.options import ScoringOptions

T = "0" * 31 + "1"


def calls(*items: object) -> list[ToolCall]:
    return [ToolCall.model_validate(i) for i in items]


def test_worked_example() -> None:
    """Expected search(q=paris), weather(city=Paris), book; called weather(city=Paris), search(q=rome), calc.

    Names, unordered: search and weather found, book missing → 2/3 = 0.666667.
    With arguments: search's q differs → only weather → 1/3.
    Ordered (LCS of [weather, search, calc] and [search, weather, book]): 1 → 1/3.
    Exact match: calc is extra and book missing → 0.
    """
    expected = calls({"name": "search", "args": {"q": "paris"}}, {"name": "weather", "args": {"city": "Paris"}}, "book")
    called = calls(
        {"name": "weather", "arguments": '{"city": "Paris", "units": "C"}'},
        {"name": "search", "input_parameters": {"q": "rome"}},
        "calc",
    )

    def score(**kw: bool) -> float:
        opts = {"ordering": False, "arguments": False, "exact": False, **kw}
        return tool_correctness(called, expected, **opts)[0]

    assert score() == pytest.approx(2 / 3)
    assert score(arguments=True) == pytest.approx(1 / 3)
    assert score(ordering=True) == pytest.approx(1 / 3)
    assert score(exact=True) == 0.0
    _, details = tool_correctness(called, expected, ordering=False, arguments=False, exact=False)
    assert details["missing"] == ["book"] and details["unexpected"] == ["calc"]


def test_one_to_one_and_exact() -> None:
    twice = calls("search", "search")
    assert tool_correctness(calls("search"), twice, ordering=False, arguments=False, exact=False)[0] == 0.5
    assert tool_correctness(calls("b", "a"), calls("a", "b"), ordering=False, arguments=False, exact=True)[0] == 1.0
    assert tool_correctness(calls("b", "a"), calls("a", "b"), ordering=True, arguments=False, exact=True)[0] == 0.0
    assert tool_correctness([], [], ordering=False, arguments=False, exact=False)[0] == 1.0
    assert tool_correctness(calls("a"), [], ordering=False, arguments=False, exact=False)[0] == 0.0


async def test_metric_options_and_skips() -> None:
    rec = RagRecord(tools_called=["search", "calc"], reference_tool_calls=["calc", "search"])
    [r] = await evaluate_record(rec, ["tool_correctness"], None)  # type: ignore[arg-type]
    assert r.status == "scored" and r.score == 1.0
    opts = ScoringOptions(tool_correctness_ordering=True, tool_correctness_exact_match=True)
    [r] = await evaluate_record(rec, ["tool_correctness"], None, opts)  # type: ignore[arg-type]
    assert r.score == 0.0 and r.details["ordering"] is True
    [r] = await evaluate_record(RagRecord(tools_called=["a"]), ["tool_correctness"], None)  # type: ignore[arg-type]
    assert r.status == "skipped" and r.reason == "missing input: reference_tool_calls"
    [r] = await evaluate_record(RagRecord(reference_tool_calls=[]), ["tool_correctness"], None)  # type: ignore[arg-type]
    assert r.status == "skipped" and r.reason == "missing input: tools_called"


def _brute_force_matched(called: list[ToolCall], expected: list[ToolCall], arguments: bool, ordering: bool) -> int:
    """The definition by enumeration: unordered, the most expected calls that distinct calls can each match (every
    injective assignment of calls to expected calls tried); ordered, the longest sequence of pairs (call i, expected
    j) matching, increasing in both i and j (every subsequence of the calls tried against every one of the
    expected calls of the same length)."""

    def match(c: ToolCall, e: ToolCall) -> bool:
        return c.name == e.name and (not arguments or all(k in c.args and c.args[k] == v for k, v in e.args.items()))

    if ordering:
        for k in range(min(len(called), len(expected)), 0, -1):
            for ci in itertools.combinations(range(len(called)), k):
                for ej in itertools.combinations(range(len(expected)), k):
                    if all(match(called[i], expected[j]) for i, j in zip(ci, ej)):
                        return k
        return 0
    for k in range(min(len(called), len(expected)), 0, -1):
        for ej in itertools.combinations(range(len(expected)), k):
            for ci in itertools.permutations(range(len(called)), k):
                if all(match(called[i], expected[j]) for i, j in zip(ci, ej)):
                    return k
    return 0


def test_agrees_with_the_definition_by_enumeration() -> None:
    """The matching (augmenting paths) and the LCS (dynamic programming) against brute force on 600 random cases,
    with repeated tools and argument clashes; the score is matched / |expected|, exact match 1 only when every
    call and every expected call are matched (in order with ordering)."""
    rng = random.Random(15)
    pool = [{"name": n, "args": a} for n in ("a", "b", "c") for a in ({}, {"x": 1}, {"x": 2})]
    for _ in range(600):
        called = calls(*rng.choices(pool, k=rng.randint(0, 5)))
        expected = calls(*rng.choices(pool, k=rng.randint(1, 4)))
        for arguments, ordering in itertools.product((False, True), repeat=2):
            n = _brute_force_matched(called, expected, arguments, ordering)
            opts = {"ordering": ordering, "arguments": arguments}
            score, details = tool_correctness(called, expected, exact=False, **opts)
            assert details["matched"] == n, (called, expected, opts)
            assert score == pytest.approx(n / len(expected))
            exact, _ = tool_correctness(called, expected, exact=True, **opts)
            assert exact == float(n == len(expected) == len(called)), (called, expected, opts)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        ToolCall.model_validate({"name": "x", "arguments": "not json"})


def _span(span_id: str, parent: str, start: int, attrs: dict) -> SpanData:
    return SpanData(T, span_id, parent, "s" + span_id, start, start + 10, attrs=attrs)


async def test_tools_from_spans_of_each_convention_end_to_end() -> None:
    """An agent span tree: OTel GenAI execute_tool, an OpenInference TOOL span (nested in an OpenLLMetry tool span:
    one call), an LLM span; the expected tools on the request span. Scored for tool correctness."""
    spans = [
        _span(
            "a",
            "",
            0,
            {
                "openinference.span.kind": "AGENT",
                "input.value": "Weather in Paris?",
                "ragtrace.reference.tool_calls": json.dumps(
                    [{"name": "geocode", "args": {"city": "Paris"}}, "weather"]
                ),
            },
        ),
        _span(
            "b",
            "a",
            1,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "geocode",
                "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            },
        ),
        _span(
            "c",
            "a",
            3,
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "weather",
                "traceloop.entity.input": '{"args": [], "kwargs": {"lat": 48.9, "lon": 2.35}}',
            },
        ),
        _span("d", "c", 4, {"openinference.span.kind": "TOOL", "tool.name": "weather", "input.value": '{"lat": 48.9}'}),
        _span("e", "a", 6, {"openinference.span.kind": "LLM", "output.value": "It is sunny."}),
    ]
    record = build_record(T, spans)
    assert [(c.name, c.args) for c in record.tools_called or []] == [
        ("geocode", {"city": "Paris"}),
        ("weather", {"lat": 48.9}),
    ]
    assert [c.name for c in record.reference_tool_calls or []] == ["geocode", "weather"]
    record = RagRecord.model_validate_json(record.model_dump_json())  # as the queue carries it
    opts = ScoringOptions(tool_correctness_arguments=True, tool_correctness_ordering=True)
    [r] = await evaluate_record(record, ["tool_correctness"], None, opts)  # type: ignore[arg-type]
    assert r.status == "scored" and r.score == 1.0
    no_tools = build_record(T, [spans[0], spans[4]])
    assert no_tools.tools_called == []
    [r] = await evaluate_record(no_tools, ["tool_correctness"], None)  # type: ignore[arg-type]
    assert r.score == 0.0 and r.details["missing"] == ["geocode", "weather"]


def _run_tool_app(endpoint: str) -> str:
    """An agent traced with the SDK: ``@pipeline``, two ``@tool`` calls (one async), the expected tools annotated;
    exported as OTLP/HTTP to ``endpoint``. Returns the trace id."""
    import asyncio

    from opentelemetry.sdk.trace import TracerProvider

    import ragtrace

    handle = ragtrace.init(
        service_name="tool-agent",
        endpoint=endpoint,
        protocol="http/protobuf",
        tracer_provider=TracerProvider(),
        set_global=False,
    )

    @ragtrace.tool(description="Coordinates of a city")
    def geocode(city: str, country: str | None = None) -> dict:
        return {"lat": 48.86, "lon": 2.35}

    @ragtrace.tool(name="weather")
    async def forecast(lat: float, lon: float) -> str:
        return "sunny"

    @ragtrace.pipeline(name="agent")
    def handle_request(question: str) -> str:
        ragtrace.annotate(expected_tools=[{"name": "geocode", "args": {"city": "Paris"}}, "weather"])
        trace_id = ragtrace.current_trace_id()
        assert trace_id is not None
        handle_request.trace_id = trace_id  # type: ignore[attr-defined]
        where = geocode("Paris")
        return f"It is {asyncio.run(forecast(where['lat'], lon=where['lon']))}."

    try:
        assert handle_request("Weather in Paris?") == "It is sunny."
        assert handle.force_flush()
    finally:
        handle.shutdown()
    return str(handle_request.trace_id)  # type: ignore[attr-defined]


async def test_sdk_tool_spans_over_otlp_scored_end_to_end() -> None:
    """SDK → OTLP over loopback → the served receiver → the assembled record → tool correctness."""
    import asyncio

    from ragtrace import config
    from tests.support.receiver_stack import ServedStack
    from tests.support.sdk import reset_settings

    stack = await ServedStack().start()
    saved = config.SETTINGS.tracer
    try:
        endpoint = stack.url.removesuffix("/v1/traces")
        trace_id = await asyncio.to_thread(_run_tool_app, endpoint)
        assert stack.spans("http") == 3
        [record] = [r for r in stack.records() if r.trace_id == trace_id]
    finally:
        await stack.stop()
        reset_settings()
        config.SETTINGS.tracer = saved
    assert [(c.name, c.args) for c in record.tools_called or []] == [
        ("geocode", {"city": "Paris"}),
        ("weather", {"lat": 48.86, "lon": 2.35}),
    ]
    assert [(c.name, c.args) for c in record.reference_tool_calls or []] == [
        ("geocode", {"city": "Paris"}),
        ("weather", {}),
    ]
    record = RagRecord.model_validate_json(record.model_dump_json())  # as the queue carries it
    opts = ScoringOptions(tool_correctness_arguments=True, tool_correctness_ordering=True)
    [r] = await evaluate_record(record, ["tool_correctness"], None, opts)  # type: ignore[arg-type]
    assert r.status == "scored" and r.score == 1.0
    wrong_order = record.model_copy(update={"tools_called": list(reversed(record.tools_called or []))})
    [r] = await evaluate_record(wrong_order, ["tool_correctness"], None, opts)  # type: ignore[arg-type]
    assert r.status == "scored" and r.score == 0.5
