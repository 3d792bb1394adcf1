"""Hostile inputs: arguments, results, documents, usage, chunks and hooks that misbehave.

The contract under test: a failure inside ragtrace never reaches the app (same result, same
exception object), is counted in :func:`ragtrace.internal_errors`, and the span still ends
with whatever could be read.
"""

from __future__ import annotations

import json
import threading

import pytest

import ragtrace
from ragtrace import attributes as A
from ragtrace import safety
from ragtrace.config import SETTINGS
from tests.support.otlp_sink import OtlpSink


@pytest.fixture
def sink():
    s = OtlpSink()
    yield s
    s.stop()


class Exploding:
    """Every attribute read raises something other than AttributeError."""

    def __getattr__(self, name):
        raise RuntimeError(f"no {name} for you")

    def __str__(self):
        raise RuntimeError("no str either")

    def __repr__(self):
        return "<Exploding>"


def test_document_objects_whose_attributes_raise(spans):
    docs = [Exploding(), "fine"]

    @ragtrace.retriever
    def retrieve(query):
        return docs

    assert retrieve("who?") is docs
    span = spans.named("retrieve")
    assert span.end_time is not None
    assert dict(span.attributes)[A.INPUT_VALUE] == "who?"  # the inputs survive the failed output read
    assert safety.internal_errors().get("finish", 0) == 1


def test_query_argument_whose_attributes_raise(spans):
    @ragtrace.pipeline(name="hostile-query")
    def handle(question):
        return "ok"

    assert handle(Exploding()) == "ok"
    span = spans.named("hostile-query")  # traced, and ended: not left open by the failed input read
    assert span.end_time is not None
    assert dict(span.attributes)[A.OUTPUT_VALUE] == "ok"
    assert safety.internal_errors().get("inputs", 0) == 1


def test_usage_with_weird_types(spans):
    class BadInt:
        def __int__(self):
            raise OverflowError("nope")

    @ragtrace.generator
    def answer(prompt):
        return {
            "answer": "x",
            "usage": {"prompt_tokens": float("inf"), "completion_tokens": "7", "total_tokens": BadInt()},
        }

    answer("p")
    a = spans.attrs("answer")
    assert A.GEN_AI_USAGE_INPUT_TOKENS not in a and A.LLM_TOKEN_COUNT_TOTAL not in a
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 7 and a[A.OUTPUT_VALUE] == "x"
    assert safety.internal_errors() == {}


def test_values_otlp_cannot_carry_do_not_lose_the_export_batch(sink, monkeypatch):
    """An int beyond int64 or a dict with tuple keys once made the OTLP encoder drop the whole batch."""
    from tests.support.sdk import reset_settings

    for k in ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "RAGTRACE_CAPTURE_CONTENT"):
        monkeypatch.delenv(k, raising=False)
    port = sink.start_http()
    handle = ragtrace.init(endpoint=f"http://127.0.0.1:{port}", set_global=False, schedule_delay_ms=20)

    @ragtrace.generator
    def answer(prompt):
        return {"answer": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 10**30}}

    @ragtrace.reranker
    def rerank(query, documents, top_k=10**20):
        return [{"content": "d", "metadata": {("tuple", "key"): 1, "ok": 2}}]

    try:
        answer("p")
        rerank("q", ["d"], top_k=10**20)
        assert handle.force_flush(10.0)
        got = {s["name"]: s["attributes"] for s in sink.wait_for_spans(2)}
    finally:
        handle.shutdown(5.0)
        reset_settings()
    assert got["answer"][A.GEN_AI_USAGE_INPUT_TOKENS] == 3
    assert A.GEN_AI_USAGE_OUTPUT_TOKENS not in got["answer"]
    assert A.RERANKER_TOP_K not in got["rerank"]
    assert json.loads(got["rerank"][A.document_attr(0, "metadata", A.RERANKER_OUTPUT_DOCUMENTS)]) == {"ok": 2}


class BadDict(dict):
    def get(self, *args):
        raise RuntimeError("get blew up")


def test_stream_chunks_whose_attributes_raise(spans):
    @ragtrace.generator
    def tokens(prompt):
        yield "a"
        yield Exploding()
        yield "b"

    out = list(tokens("p"))
    assert out[0] == "a" and out[2] == "b"
    a = spans.attrs("tokens")
    assert a[A.RAGTRACE_CHUNK_COUNT] == 3 and a[A.OUTPUT_VALUE] == "ab"  # the odd chunk is skipped
    assert safety.internal_errors() == {}


def test_stream_chunks_that_break_the_reader(spans):
    @ragtrace.generator
    def tokens(prompt):
        yield "a"
        yield BadDict(x=1)
        yield "b"

    out = list(tokens("p"))
    assert out[0] == "a" and out[2] == "b"
    a = spans.attrs("tokens")
    assert a[A.message_attr(0, "content")] == "p"  # inputs and timing kept though the output could not be read
    assert a[A.RAGTRACE_CHUNK_COUNT] == 3 and A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in a
    assert safety.internal_errors().get("stream.output", 0) == 1


def test_app_error_inside_a_hostile_stream_is_still_recorded(spans):
    err = KeyError("app's own")

    @ragtrace.generator
    def tokens(prompt):
        yield BadDict()
        raise err

    with pytest.raises(KeyError) as ei:
        list(tokens("p"))
    assert ei.value is err
    span = spans.named("tokens")
    assert span.status.status_code.name == "ERROR" and dict(span.attributes)[A.ERROR_TYPE] == "KeyError"


def test_redaction_hook_returning_a_non_string_leaks_nothing(spans):
    ragtrace.init(tracer_provider=SETTINGS._handle.provider, set_global=False, redact=lambda s: None)

    @ragtrace.generator
    def answer(question, contexts):
        return "secret answer"

    assert answer("secret q", ["secret ctx"]) == "secret answer"
    a = spans.attrs("answer")
    assert not any("secret" in str(v) for v in a.values()), a
    assert a[A.RAGTRACE_TRUNCATED] is True
    assert safety.internal_errors().get("redact", 0) >= 3


def test_redaction_covers_the_apps_exception_text(spans):
    ragtrace.init(tracer_provider=SETTINGS._handle.provider, set_global=False, redact=[r"\d{4}-\d{4}"])
    err = ValueError("card 1234-5678 declined")

    @ragtrace.pipeline(name="pay")
    def pay(question):
        raise err

    with pytest.raises(ValueError) as ei:
        pay("q")
    assert ei.value is err and str(err) == "card 1234-5678 declined"  # the app's object is untouched
    span = spans.named("pay")
    (event,) = [e for e in span.events if e.name == "exception"]
    assert event.attributes["exception.message"] == "card [REDACTED] declined"
    assert "1234-5678" not in event.attributes["exception.stacktrace"]
    assert "1234-5678" not in span.status.description


def test_exception_with_a_raising_str_propagates_unchanged(spans):
    class Nasty(Exception):
        def __str__(self):
            raise RuntimeError("str of the error fails")

    err = Nasty()

    @ragtrace.retriever
    def retrieve(query):
        raise err

    with pytest.raises(Nasty) as ei:
        retrieve("q")
    assert ei.value is err
    assert spans.named("retrieve").end_time is not None


def test_metadata_that_json_cannot_hold(spans):
    cyclic: dict = {"name": "loop"}
    cyclic["self"] = cyclic

    @ragtrace.retriever
    def retrieve(query):
        return [{"content": "a", "metadata": cyclic}, {"content": "b", "metadata": {(1, 2): "tuple key", "k": "v"}}]

    retrieve("q")
    a = spans.attrs("retrieve")
    assert isinstance(a[A.document_attr(0, "metadata")], str)
    assert json.loads(a[A.document_attr(1, "metadata")]) == {"k": "v"}
    assert safety.internal_errors() == {}


def test_json_of_shared_metadata_from_many_threads(spans):
    """One metadata dict returned by every request, encoded concurrently: no false cycles, no errors."""

    class Yielding:  # its str() runs Python code, so threads switch in the middle of encoding
        def __str__(self):
            threading.Event().wait(0)
            return "y"

    shared = {"source": "kb", "tags": ["a", "b"], "obj": Yielding(), "nested": {"x": [Yielding()] * 3}}
    expected = {"source": "kb", "tags": ["a", "b"], "obj": "y", "nested": {"x": ["y", "y", "y"]}}

    @ragtrace.retriever
    def retrieve(query):
        return [{"content": "c", "metadata": shared}]

    def work():
        for _ in range(150):
            retrieve("q")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans_ = [s for s in spans.all() if s.name == "retrieve"]
    assert len(spans_) == 900
    assert all(json.loads(dict(s.attributes)[A.document_attr(0, "metadata")]) == expected for s in spans_)
    assert safety.internal_errors() == {}


def test_a_callable_ragtrace_cannot_read_is_left_untraced_at_import_time(spans):
    class Looping:
        """Its ``__wrapped__`` points at itself: ``inspect.unwrap`` gives up with ValueError."""

        def __call__(self, query):
            return [query]

    f = Looping()
    f.__wrapped__ = f
    traced = ragtrace.retriever(f)  # must not raise in the app's module body
    assert traced("q") == ["q"]
    assert safety.internal_errors().get("decorate", 0) == 1
