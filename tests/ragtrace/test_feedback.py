"""``ragtrace.feedback()`` over a real OTLP/HTTP export to the test sink: in the request, later with a saved trace id,
and every call that must send nothing (without raising)."""

from __future__ import annotations

import importlib
import logging
import math
import uuid

import pytest
from opentelemetry import trace

import ragtrace
from ragtrace import attributes as A
from ragtrace import config
from ragtrace.feedback import MAX_COMMENT_CHARS
from tests.support.otlp_sink import OtlpSink

feedback_module = importlib.import_module("ragtrace.feedback")  # ``ragtrace.feedback`` is the function


@ragtrace.retriever
def search(query):
    return [{"id": "d1", "content": "Refunds take 5 days."}]


@ragtrace.pipeline(name="support")
def answer(question, thumbs=None):
    """The app: answers, remembers the trace id for later, and (in some tests) records feedback in the request."""
    search(question)
    if thumbs is not None:
        ragtrace.feedback(thumbs)
    return ragtrace.current_trace_id()


@pytest.fixture
def export(restore_settings, monkeypatch):
    """The real SDK exporting over OTLP/HTTP to a sink; each test starts with no warning given yet."""
    monkeypatch.setattr(feedback_module, "_warned", set())
    sink = OtlpSink()
    handle = ragtrace.init(
        service_name="fb-app", endpoint=f"http://127.0.0.1:{sink.start_http()}", set_global=False, schedule_delay_ms=20
    )
    yield sink, handle
    handle.shutdown(5.0)
    sink.stop()


def feedback_spans(sink, handle, n):
    assert handle.force_flush(10.0)
    spans = sink.wait_for_spans(n)
    return [s for s in spans if s["name"] == A.RAGTRACE_FEEDBACK_SPAN]


def test_feedback_in_the_request_is_a_span_of_its_trace_under_the_root(export):
    sink, handle = export
    trace_id = answer("how long do refunds take?", thumbs=True)
    spans = sink.wait_for_spans(3) if handle.force_flush(10.0) else []
    by_name = {s["name"]: s for s in spans}
    fb, root = by_name[A.RAGTRACE_FEEDBACK_SPAN], by_name["support"]
    assert fb["trace_id"] == root["trace_id"] == trace_id
    assert fb["parent_span_id"] == root["span_id"]
    assert fb["resource"]["service.name"] == "fb-app"
    assert fb["attributes"] == {
        A.RAGTRACE_SPAN_ROLE: "feedback",
        A.RAGTRACE_FEEDBACK_NAME: "user_feedback",
        A.RAGTRACE_FEEDBACK_VALUE: 1.0,
        A.RAGTRACE_PIPELINE_NAME: "support",
    }


def test_feedback_later_with_a_saved_trace_id(export):
    sink, handle = export
    saved = answer("q1")
    handle.force_flush(10.0)
    root = next(s for s in sink.wait_for_spans(2) if s["name"] == "support")
    sink.clear()
    # outside any request, as a feedback endpoint of the app would call it hours later
    ragtrace.feedback(0.75, trace_id=saved, name="helpfulness", comment="x" * 10_000)
    ragtrace.feedback(False, trace_id=saved.upper(), name="thumbs")
    spans = feedback_spans(sink, handle, 2)
    assert len(spans) == 2
    helpful, thumbs = sorted(spans, key=lambda s: s["attributes"][A.RAGTRACE_FEEDBACK_NAME])
    assert helpful["trace_id"] == thumbs["trace_id"] == saved
    assert helpful["parent_span_id"] == root["span_id"]  # the root remembered by this process
    assert helpful["attributes"][A.RAGTRACE_FEEDBACK_VALUE] == 0.75
    assert helpful["attributes"][A.RAGTRACE_PIPELINE_NAME] == "support"
    comment = helpful["attributes"][A.RAGTRACE_FEEDBACK_COMMENT]
    assert len(comment) == MAX_COMMENT_CHARS and comment.endswith("…")
    assert thumbs["attributes"][A.RAGTRACE_FEEDBACK_VALUE] == 0.0


def test_feedback_for_a_trace_this_process_never_saw(export):
    """Another process's (or a restarted one's) trace id: sent, under a made-up parent, with no pipeline name."""
    sink, handle = export
    other = uuid.uuid4().hex
    ragtrace.feedback(1, trace_id=other)
    (span,) = feedback_spans(sink, handle, 1)
    assert span["trace_id"] == other
    assert span["parent_span_id"] and span["parent_span_id"] != "0" * 16
    assert A.RAGTRACE_PIPELINE_NAME not in span["attributes"]
    assert span["attributes"][A.RAGTRACE_FEEDBACK_VALUE] == 1.0


class Hostile:
    def __str__(self):
        raise RuntimeError("no str for you")

    def __float__(self):
        raise RuntimeError("no float for you")


def test_bad_calls_send_nothing_raise_nothing_and_warn_once_per_kind(export, caplog):
    sink, handle = export
    saved = answer("q")
    handle.force_flush(10.0)
    sink.wait_for_spans(2)
    sink.clear()
    caplog.set_level(logging.WARNING, logger="ragtrace")
    for bad in ("yes", 1.5, -0.1, math.nan, math.inf, None, Hostile(), [1]):
        assert ragtrace.feedback(bad, trace_id=saved) is None
        ragtrace.feedback(bad, trace_id=saved)
    for bad_id in ("xyz", "0" * 32, saved[:-1], 123, saved + "0"):
        ragtrace.feedback(True, trace_id=bad_id)
    ragtrace.feedback(True)  # no current trace
    ragtrace.feedback(True, trace_id=saved, name="")
    ragtrace.feedback(True, trace_id=saved, name=Hostile())
    ragtrace.feedback(True, trace_id=saved, comment=Hostile())  # contained like any hostile value: not sent
    ragtrace.feedback(0.5, trace_id=saved, name="sentinel")  # the one good call
    spans = feedback_spans(sink, handle, 1)
    assert [s["attributes"][A.RAGTRACE_FEEDBACK_NAME] for s in spans] == ["sentinel"]
    assert sink.span_count() == 1
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ragtrace.feedback")]
    assert len(warnings) == 4, warnings  # value, trace_id, no current trace, name: once each
    assert sum("value must be" in w for w in warnings) == 1


def test_comment_follows_the_content_rules(restore_settings, monkeypatch):
    monkeypatch.setattr(feedback_module, "_warned", set())
    sink = OtlpSink()
    endpoint = f"http://127.0.0.1:{sink.start_http()}"
    saved = uuid.uuid4().hex
    try:
        handle = ragtrace.init(endpoint=endpoint, set_global=False, schedule_delay_ms=20, redact=[r"\d{4}-\d{4}"])
        ragtrace.feedback(True, trace_id=saved, comment="my card 1234-5678 was charged twice")
        (span,) = feedback_spans(sink, handle, 1)
        assert span["attributes"][A.RAGTRACE_FEEDBACK_COMMENT] == f"my card {config.REDACTED} was charged twice"
        handle.shutdown(5.0)
        sink.clear()
        handle = ragtrace.init(endpoint=endpoint, set_global=False, schedule_delay_ms=20, capture_content=False)
        ragtrace.feedback(True, trace_id=saved, comment="private words")
        (span,) = feedback_spans(sink, handle, 1)
        assert A.RAGTRACE_FEEDBACK_COMMENT not in span["attributes"]
        handle.shutdown(5.0)
    finally:
        sink.stop()


def test_without_tracing_set_up_it_warns_and_sends_nothing(restore_settings, monkeypatch, caplog):
    """Before init() and with no provider of the app's, the SDK's tracer is OpenTelemetry's no-op one."""
    monkeypatch.setattr(feedback_module, "_warned", set())
    monkeypatch.setattr(config.SETTINGS, "tracer", trace.NoOpTracer())
    caplog.set_level(logging.WARNING, logger="ragtrace")
    ragtrace.feedback(True, trace_id=uuid.uuid4().hex)
    ragtrace.feedback(True, trace_id=uuid.uuid4().hex)
    assert [r.getMessage() for r in caplog.records].count(
        "ragtrace.feedback: tracing is not set up (call ragtrace.init()); not sent"
    ) == 1
