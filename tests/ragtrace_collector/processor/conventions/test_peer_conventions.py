"""Each peer convention's spans, encoded as OTLP and decoded by the receiver, become the same record."""

from __future__ import annotations

import pytest

from ragtrace_collector.processor.conventions import build_record
from ragtrace_collector.receiver.decode import extract_spans
from tests.support import span_fixtures as F


def record_of(specs, service="svc"):
    trace_id, request = F.to_request(specs, service)
    decoded = extract_spans(request)
    assert list(decoded.traces) == [trace_id]
    return trace_id, build_record(trace_id, decoded.traces[trace_id])


def test_openinference_langchain():
    trace_id, r = record_of(F.openinference_langchain())
    assert r.trace_id == trace_id and r.service == "svc"
    assert r.pipeline == "RetrievalQA"
    assert r.user_input == F.QUESTION  # from the chain's JSON input
    assert r.response == F.ANSWER  # from the chain's JSON output
    assert [c.content for c in r.retrieved_contexts] == [d[1] for d in F.DOCS]
    assert r.retrieved_contexts[0].metadata == {"source": "doc-1.md"}
    assert r.model == "gpt-4o-mini" and r.provider == "openai"
    assert (r.input_tokens, r.output_tokens) == (52, 11)
    assert (r.session_id, r.user_id) == ("sess-lc", "user-lc")
    assert r.metadata == {"tenant": "acme"}
    assert r.retrieval_duration_seconds >= 0.01 and r.generation_duration_seconds >= 0.02
    assert r.request_duration_seconds >= r.generation_duration_seconds + r.retrieval_duration_seconds
    assert r.error is None


def test_openinference_llamaindex_reranker_output_wins():
    _, r = record_of(F.openinference_llamaindex())
    assert r.user_input == F.QUESTION and r.response == F.ANSWER
    # contexts are the reranker's output, in its order, with its scores
    assert [c.id for c in r.retrieved_contexts] == ["doc-2", "doc-1"]
    assert [c.score for c in r.retrieved_contexts] == [5.0, 4.0]
    assert r.model == "gpt-4o" and (r.input_tokens, r.output_tokens) == (120, 12)


def test_openllmetry_traceloop():
    _, r = record_of(F.openllmetry())
    assert r.pipeline == "rag_answer"
    assert r.user_input == F.QUESTION  # from traceloop.entity.input args
    assert r.response == F.ANSWER  # from the workflow's JSON-encoded output
    assert [c.content for c in r.retrieved_contexts] == [d[1] for d in F.DOCS]
    assert [c.id for c in r.retrieved_contexts] == [d[0] for d in F.DOCS]
    assert r.model == "gpt-4o-mini-2024-07-18" and r.provider == "openai"
    assert (r.input_tokens, r.output_tokens) == (40, 9)
    assert (r.session_id, r.user_id) == ("sess-tl", "user-tl")
    assert r.retrieval_duration_seconds >= 0.01


def test_openlit_events_and_ttft():
    _, r = record_of(F.openlit())
    assert r.user_input == F.QUESTION  # "user: ..." prompt event
    assert r.response == F.ANSWER  # completion event
    assert r.ttft_seconds == pytest.approx(0.012)
    assert r.tpot_seconds is not None and r.tpot_seconds > 0  # derived: (duration - ttft) / (tokens - 1)
    assert (r.input_tokens, r.output_tokens) == (33, 10)
    assert r.retrieved_contexts == []  # OpenLIT's vector-DB spans carry no document text
    assert r.retrieval_duration_seconds >= 0.01


def test_ragtrace_shaped_spans_and_error():
    _, r = record_of(F.ragtrace_shaped(error="boom", reference="two years"), service="bot")
    assert r.service == "bot" and r.pipeline == "support"
    assert r.error == "RuntimeError: boom"
    assert r.reference == "two years"
    assert r.ttft_seconds == pytest.approx(0.004) and r.tpot_seconds == pytest.approx(0.001)
    assert r.streamed is True
    assert [c.score for c in r.retrieved_contexts] == [d[2] for d in F.DOCS]
    # the record is valid by the shared model's own rules
    type(r).model_validate(r.model_dump())


def test_spans_in_any_order_and_split_make_the_same_record():
    trace_id, request = F.to_request(F.ragtrace_shaped())
    spans = extract_spans(request).traces[trace_id]
    a = build_record(trace_id, spans)
    b = build_record(trace_id, list(reversed(spans)))
    assert a.model_dump() == b.model_dump()
