"""Peers' ``gen_ai.evaluation.result`` events in the record: bounded, the key the collector's alone.

The real capture (OpenLIT's ``log_score``, span event and log event both) is replayed in
``tests/ragtrace_collector/receiver/test_peer_captures.py``; these are the edges it does not reach.
"""

from __future__ import annotations

import json

from ragtrace_collector.processor.conventions import build_record
from ragtrace_collector.processor.conventions.evaluations import MAX_EVALUATIONS, MAX_TEXT, PEER_EVALUATIONS
from ragtrace_collector.receiver.decode import extract_spans
from tests.support import span_fixtures as F
from tests.support.span_fixtures import Spec

RESULT = "gen_ai.evaluation.result"


def record_of(specs: list[Spec]):
    trace_id, request = F.to_request(specs)
    return build_record(trace_id, extract_spans(request).traces[trace_id])


def with_events(events: list[tuple[str, dict]], chain_metadata: dict | None = None) -> list[Spec]:
    """The OpenInference LangChain chain, its LLM span carrying ``events``."""
    chain, retriever, llm = F.openinference_langchain()
    if chain_metadata is not None:
        chain.attributes["metadata"] = json.dumps(chain_metadata)
    return [chain, retriever, Spec(llm.name, 0, llm.attributes, events=events, duration=llm.duration)]


def test_a_span_cannot_write_the_peer_evaluations_key():
    """The key is filled from events only: a span's ``metadata`` naming it is dropped, its other keys kept."""
    record = record_of(with_events([], {"tenant": "acme", PEER_EVALUATIONS: [{"name": "forged", "score": 1.0}]}))
    assert record.metadata.get("tenant") == "acme"
    assert PEER_EVALUATIONS not in record.metadata


def test_verdicts_are_bounded_and_empty_ones_skipped():
    """At most MAX_EVALUATIONS verdicts, texts capped; an event naming and concluding nothing is no verdict; a
    label-only verdict keeps its label with no score."""
    events = [(RESULT, {"gen_ai.evaluation.name": f"check-{i}", "gen_ai.evaluation.score.value": i}) for i in range(80)]
    events.insert(0, (RESULT, {"gen_ai.evaluation.explanation": "x" * (MAX_TEXT + 50)}))  # no name, score, label
    events.insert(1, (RESULT, {"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.label": "y" * 2000}))
    verdicts = record_of(with_events(events)).metadata[PEER_EVALUATIONS]
    assert len(verdicts) == MAX_EVALUATIONS
    assert verdicts[0]["name"] == "tone" and verdicts[0]["score"] is None and len(verdicts[0]["label"]) == MAX_TEXT
    assert [v["name"] for v in verdicts[1:3]] == ["check-0", "check-1"] and verdicts[2]["score"] == 1.0


def test_other_events_are_not_verdicts():
    record = record_of(with_events([("gen_ai.choice", {"gen_ai.evaluation.name": "not-a-result"})]))
    assert PEER_EVALUATIONS not in record.metadata
