"""The joins as a stage of their own: their one order, and the contract each keeps (``processor/joins/join.py``).

The peer captures (``tests/fixtures/peers``) are replayed through the real decoder and the pipeline, so each join
sees what real instrumentations send: OpenLIT's LangChain requests traced in two (split requests), OpenInference's
LangChain tracer with the OpenAI instrumentation tracing each model call twice (duplicate calls), GenAI log events.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.joins.duplicate_calls import REASON_DUPLICATE_CALL, DuplicateCallsJoin
from ragtrace_collector.processor.joins.log_events import LogEventsJoin
from ragtrace_collector.processor.joins.pairing import InMemoryPairingState
from ragtrace_collector.processor.joins.requests_only import RequestsOnly
from ragtrace_collector.processor.joins.split_requests import REASON_SPLIT_REQUEST, SplitRequestsJoin
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.processor.records import record_of
from ragtrace_collector.receiver.decode import extract_log_events, extract_spans, parse_logs_protobuf, parse_protobuf
from tests.support.assembly import ManualClock, RecordingObserver

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
SETUPS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and any(p.glob("*.binpb")))
QUESTIONS = 6  # every peer app asks six questions


def replay(pipeline: Pipeline, setup: str, clock: ManualClock | None = None) -> list[CompletedTrace]:
    """Every captured body of ``setup`` added in the order it was sent (a sweep after each when ``clock`` is
    given, half a second apart), then everything taken; what the pipeline completed, in order."""
    out: list[CompletedTrace] = []
    for path in sorted((FIXTURES / setup).glob("*.binpb"), key=lambda p: p.stem.rpartition("-")[2]):
        body = path.read_bytes()
        if path.name.startswith("logs-"):
            pipeline.add(extract_log_events(parse_logs_protobuf(body)))
        else:
            pipeline.add(extract_spans(parse_protobuf(body)))
        if clock is not None:
            clock.t += 0.5
            out += pipeline.completed()
    return out + pipeline.completed(everything=True)


def test_the_pipeline_runs_the_joins_in_their_written_order():
    """Log events first (every later step reads them as span data), then only requests are paired."""
    joins = Pipeline(InMemoryAssemblyState()).joins
    assert [type(j) for j in joins] == [LogEventsJoin, RequestsOnly, DuplicateCallsJoin, SplitRequestsJoin]


@pytest.mark.parametrize("swept", [False, True], ids=["at_shutdown", "swept"])
@pytest.mark.parametrize("setup", SETUPS)
def test_every_join_returns_each_trace_once_and_holds_nothing_after_shutdown(setup, swept):
    clock = ManualClock()
    state = InMemoryAssemblyState(grace_seconds=0.2, max_wait_seconds=60.0)
    pipeline = Pipeline(state, clock=clock, pairing=InMemoryPairingState(window=3.0))
    traces = replay(pipeline, setup, clock if swept else None)
    ids = [c.trace_id for c in traces]
    assert traces and len(ids) == len(set(ids))
    for join in pipeline.joins:
        assert not join.held() and join.oldest_first_seen() is None, type(join).__name__
    assert pipeline.oldest_first_seen() is None


@pytest.mark.parametrize(
    ("setup", "reason"), [("openlit_langchain", REASON_SPLIT_REQUEST), ("oi_langchain_openai", REASON_DUPLICATE_CALL)]
)
def test_a_request_traced_twice_makes_one_record_in_one_process(setup, reason):
    obs = RecordingObserver()
    pipeline = Pipeline(InMemoryAssemblyState(grace_seconds=0.0), observer=obs)
    records = [record_of(c) for c in replay(pipeline, setup)]
    assert len(records) == QUESTIONS and Counter(obs.completed)[reason] == QUESTIONS
    assert all(r.user_input and r.response and r.retrieved_contexts for r in records)
