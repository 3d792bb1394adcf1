"""Value shapes the real peers write (seen in tests/fixtures/peers/), read by the conventions' small readers."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragtrace_collector.processor.conventions import documents, halves, roles
from ragtrace_collector.processor.conventions.values import ANSWER_KEYS, QUERY_KEYS, text_of
from ragtrace_collector.receiver.decode import extract_spans

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "peers"
Q = "When did the Halvard Bridge open?"


def test_openllmetry_langchain_callback_inputs_and_outputs():
    chain = {"inputs": Q, "tags": [], "metadata": {}, "kwargs": {"name": "RunnableSequence"}}
    retriever = {"query": Q, "tags": ["seq:step:1"], "metadata": {}, "kwargs": {"name": "VectorStoreRetriever"}}
    assert text_of(json.dumps(chain), QUERY_KEYS) == Q
    assert text_of(json.dumps(retriever), QUERY_KEYS) == Q
    assert text_of(json.dumps({"outputs": "It opened in 1911.", "kwargs": {"tags": []}}), ANSWER_KEYS) == (
        "It opened in 1911."
    )


def test_openllmetry_task_arguments_still_read():
    assert text_of({"args": [Q], "kwargs": {}}, QUERY_KEYS) == Q
    assert text_of({"args": [], "kwargs": {"question": Q, "stream": True}}, QUERY_KEYS) == Q


def test_openllmetry_llamaindex_query_bundles():
    assert text_of({"str_or_query_bundle": Q}, QUERY_KEYS) == Q
    bundle = {"query_str": Q, "image_path": None, "embedding": None}
    assert text_of({"str_or_query_bundle": bundle}, QUERY_KEYS) == Q
    assert text_of({"query_bundle": bundle}, QUERY_KEYS) == Q


def test_openllmetry_llamaindex_nodes_are_json_strings():
    node = {"node": {"id_": "n-1", "text": "The bridge opened in 1911.", "metadata": {}}, "score": 0.5}
    (doc,) = documents.documents_from_json(json.dumps([json.dumps(node)]))
    assert (doc["content"], doc["id"], doc["score"]) == ("The bridge opened in 1911.", "n-1", 0.5)


def test_openllmetry_langchain_retriever_role():
    assert roles.span_role({"gen_ai.operation.name": "vector_db_retrieve", "traceloop.span.kind": "task"}) == (
        roles.RETRIEVER
    )


def _traces(setup: str, n: int) -> dict[str, list]:
    req = ExportTraceServiceRequest()
    req.ParseFromString((FIXTURES / setup / f"requests-{n:03d}.binpb").read_bytes())
    return extract_spans(req).traces


def test_openlit_langchain_halves_pair_only_with_the_call_they_fed():
    first, second = _traces("openlit_langchain", 0), _traces("openlit_langchain", 2)
    retrieval = next(h for t, s in first.items() if (h := halves.retrieval_half(t, s)))
    answer = next(h for t, s in first.items() if (h := halves.answer_half(t, s)))
    other = next(h for t, s in second.items() if (h := halves.answer_half(t, s)))
    assert halves.fed(retrieval, answer)
    assert not halves.fed(retrieval, other)  # another request's call: other passages, later
    assert halves.answer_half(retrieval.trace_id, first[retrieval.trace_id]) is None
    assert halves.retrieval_half(answer.trace_id, first[answer.trace_id]) is None
