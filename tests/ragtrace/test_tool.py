"""``@ragtrace.tool`` (GenAI ``execute_tool``, OpenInference TOOL) and ``annotate(expected_tools=...)``."""

from __future__ import annotations

import asyncio
import json

import pytest

import ragtrace
from ragtrace import attributes as A
from ragtrace import safety
from tests.support.sdk import Spans


def test_sync_tool_span_under_the_pipeline(spans: Spans) -> None:
    @ragtrace.tool(description="Coordinates of a city")
    def geocode(city: str, country: str | None = None, *, exact: bool = False) -> dict:
        return {"lat": 48.86, "lon": 2.35}

    @ragtrace.pipeline(name="agent")
    def handle(question: str) -> dict:
        return geocode("Paris", exact=True)

    assert handle("where?") == {"lat": 48.86, "lon": 2.35}
    span = spans.named("execute_tool geocode")
    a = dict(span.attributes)
    assert span.parent.span_id == spans.named("agent").context.span_id
    assert a[A.GEN_AI_OPERATION_NAME] == "execute_tool" and a[A.OPENINFERENCE_SPAN_KIND] == "TOOL"
    assert a[A.GEN_AI_TOOL_NAME] == a[A.TOOL_NAME] == "geocode" and a[A.RAGTRACE_SPAN_ROLE] == "tool"
    assert a[A.GEN_AI_TOOL_DESCRIPTION] == a[A.TOOL_DESCRIPTION] == "Coordinates of a city"
    assert a[A.GEN_AI_TOOL_TYPE] == "function"
    assert json.loads(a[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"city": "Paris", "exact": True}  # as passed
    assert a[A.INPUT_VALUE] == a[A.GEN_AI_TOOL_CALL_ARGUMENTS] and a[A.INPUT_MIME_TYPE] == A.MIME_JSON
    assert json.loads(a[A.GEN_AI_TOOL_CALL_RESULT]) == {"lat": 48.86, "lon": 2.35}
    assert a[A.OUTPUT_MIME_TYPE] == A.MIME_JSON
    assert json.loads(a[A.TOOL_PARAMETERS]) == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {}, "exact": {"type": "boolean"}},
        "required": ["city"],
    }


def test_async_tool_method_and_text_result(spans: Spans) -> None:
    class Agent:
        @ragtrace.tool(name="weather")
        async def forecast(self, lat: float, *rest: float, unit: str = "C") -> str:
            return f"sunny at {lat}"

    assert asyncio.run(Agent().forecast(1.5, 2.0, 3.0, unit="F")) == "sunny at 1.5"
    a = spans.attrs("execute_tool weather")
    assert json.loads(a[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"lat": 1.5, "unit": "F", "args": [2.0, 3.0]}
    assert a[A.GEN_AI_TOOL_CALL_RESULT] == '"sunny at 1.5"'
    assert a[A.OUTPUT_VALUE] == "sunny at 1.5" and A.OUTPUT_MIME_TYPE not in a
    assert "self" not in json.loads(a[A.TOOL_PARAMETERS])["properties"]


def test_app_exception_propagates_and_is_recorded(spans: Spans) -> None:
    boom = LookupError("no such city")

    @ragtrace.tool
    def geocode(city: str) -> dict:
        raise boom

    with pytest.raises(LookupError) as info:
        geocode("Atlantis")
    assert info.value is boom
    span = spans.named("execute_tool geocode")
    assert span.status.status_code.name == "ERROR" and span.attributes[A.ERROR_TYPE] == "LookupError"
    assert json.loads(span.attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"city": "Atlantis"}
    assert A.GEN_AI_TOOL_CALL_RESULT not in span.attributes


def test_hostile_arguments_and_results_never_break_the_call(spans: Spans) -> None:
    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no str")

    @ragtrace.tool
    def use(thing: object) -> object:
        return thing

    h = Hostile()
    assert use(h) is h
    a = spans.attrs("execute_tool use")
    assert a[A.GEN_AI_TOOL_NAME] == "use"  # the span is kept, with what could be read
    assert A.GEN_AI_TOOL_CALL_ARGUMENTS not in a and A.GEN_AI_TOOL_CALL_RESULT not in a
    assert safety.internal_errors() == {"inputs": 1, "finish": 1}


def test_content_capture_off_records_names_only(spans: Spans, provider) -> None:
    ragtrace.init(tracer_provider=provider[0], set_global=False, capture_content=False)

    @ragtrace.tool
    def lookup(account: str) -> str:
        return "balance 100"

    @ragtrace.pipeline(name="agent")
    def handle(question: str) -> str:
        assert ragtrace.annotate(expected_tools=[{"name": "lookup", "args": {"account": "secret-1"}}])
        return lookup("secret-1")

    handle("q")
    for span in spans.all():
        assert "secret" not in json.dumps(dict(span.attributes)) and "balance" not in json.dumps(dict(span.attributes))
    a = spans.attrs("execute_tool lookup")
    assert a[A.GEN_AI_TOOL_NAME] == "lookup" and A.GEN_AI_TOOL_CALL_ARGUMENTS not in a
    assert json.loads(spans.attrs("agent")[A.RAGTRACE_REFERENCE_TOOL_CALLS]) == [{"name": "lookup"}]


def test_redaction_runs_on_arguments_and_results(spans: Spans, provider) -> None:
    ragtrace.init(tracer_provider=provider[0], set_global=False, redact=[r"\d{4}-\d{4}"])

    @ragtrace.tool
    def card(number: str, meta: dict) -> list:
        return [number, {"n": number}]

    card("1234-5678", {"nested": ["1234-5678"]})
    a = spans.attrs("execute_tool card")
    assert "1234-5678" not in a[A.GEN_AI_TOOL_CALL_ARGUMENTS] + a[A.GEN_AI_TOOL_CALL_RESULT]
    assert json.loads(a[A.GEN_AI_TOOL_CALL_ARGUMENTS])["meta"]["nested"] == [
        json.loads(a[A.GEN_AI_TOOL_CALL_ARGUMENTS])["number"]
    ]


def test_annotate_expected_tools(spans: Spans) -> None:
    @ragtrace.pipeline(name="agent")
    def handle(question: str) -> None:
        assert ragtrace.annotate(
            expected_tools=[
                "search",
                {"name": "weather", "args": {"city": "Paris"}},
                {"name": "calc", "arguments": "{}"},
            ]
        )

    handle("q")
    assert json.loads(spans.attrs("agent")[A.RAGTRACE_REFERENCE_TOOL_CALLS]) == [
        {"name": "search"},
        {"name": "weather", "args": {"city": "Paris"}},
        {"name": "calc"},
    ]


def test_malformed_expected_tools_are_left_out_and_the_rest_kept(spans: Spans) -> None:
    @ragtrace.pipeline(name="agent")
    def handle(question: str) -> None:
        assert ragtrace.annotate(session_id="s1", expected_tools=[{"args": {}}])  # no name

    handle("q")
    a = spans.attrs("agent")
    assert a[A.SESSION_ID] == "s1" and A.RAGTRACE_REFERENCE_TOOL_CALLS not in a
    assert safety.internal_errors() == {"annotate.expected_tools": 1}
