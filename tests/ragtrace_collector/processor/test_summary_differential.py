"""The summary every trace gets equals the full record on every field they share, on every peer capture.

The sweep builds the text-free :class:`RecordSummary` for every trace (latency metrics, sampling rules) and the
whole :class:`RagRecord` only for the sampled ones: were the two to disagree, the metrics and the sampling rules
would read another trace than the one scored. Each capture is replayed through the real decoder and assembly
(log events folded, joins made), as the receivers hand it over.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ragtrace_collector.config import AlwaysSampleConfig, SamplingConfig
from ragtrace_collector.model.record import RecordSummary
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.conventions import extractors
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.processor.records import record_of, summary_of
from ragtrace_collector.processor.sampling.sampler import LOW_SCORE, Sampler
from ragtrace_collector.receiver.decode import extract_log_events, extract_spans, parse_logs_protobuf, parse_protobuf

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
SETUPS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and any(p.glob("*.binpb")))
SHARED = [f.name for f in dataclasses.fields(RecordSummary) if f.name not in ("scores_source", "_scores")]


def completed_traces(setup: str) -> list:
    """The setup's traces as the pipeline completes them, every body decoded in the order it was sent."""
    pipeline = Pipeline(InMemoryAssemblyState(grace_seconds=0.0, max_wait_seconds=60.0))
    for path in sorted((FIXTURES / setup).glob("*.binpb"), key=lambda p: p.stem.rpartition("-")[2]):
        body = path.read_bytes()
        if path.name.startswith("logs-"):
            pipeline.add(extract_log_events(parse_logs_protobuf(body)))
        else:
            pipeline.add(extract_spans(parse_protobuf(body)))
    return pipeline.completed(everything=True)


def test_every_peer_setup_is_read():
    assert len(SETUPS) >= 15, SETUPS


@pytest.mark.parametrize("setup", SETUPS)
def test_summary_equals_the_full_record(setup):
    traces = completed_traces(setup)
    assert traces
    for trace in traces:
        summary, record = summary_of(trace), record_of(trace)
        assert {n: getattr(summary, n) for n in SHARED} == {n: getattr(record, n) for n in SHARED}, trace.trace_id
        # the low-score rule sees the scores every convention gives (GenAI, OpenLLMetry and Langfuse keep them in
        # documents' JSON, which only this read parses), as the full record does
        assert summary.context_scores == record.context_scores, (trace.trace_id, summary.context_scores)


def test_the_low_score_rule_selects_every_setup_whose_documents_carry_scores():
    """Before, four setups (Langfuse, OTel GenAI spans, OpenLLMetry decorators and LlamaIndex) kept their scores
    where the summary never read them, so ``sampling.always.top_score_below`` could never select their traces."""
    sampler = Sampler(
        SamplingConfig(
            rate=0.0, always=AlwaysSampleConfig(errors=False, with_reference=False, flagged=False, top_score_below=2.0)
        )
    )
    scored_setups = set()
    for setup in SETUPS:
        for trace in completed_traces(setup):
            if any(s is not None for s in record_of(trace).context_scores):
                scored_setups.add(setup)
                assert sampler.select(summary_of(trace)).reason == LOW_SCORE, (setup, trace.trace_id)
    assert {"langfuse_observe", "otel_genai_spans", "tl_decorators", "tl_llamaindex"} <= scored_setups


def test_the_summary_reads_no_document_unless_the_rule_asks(monkeypatch):
    """Every trace gets a summary; only a configured low-score rule reads its contexts' scores (the flattened ones,
    or the documents' JSON): with the default rules, no score and no document of any capture is read."""
    read: list[str] = []
    monkeypatch.setattr(extractors.documents, "document_scores", lambda *a: read.append("scores") or [])
    monkeypatch.setattr(extractors, "extract_contexts", lambda ts: read.append("contexts") or [])
    for setup in SETUPS:
        for trace in completed_traces(setup):
            summary = summary_of(trace)
            Sampler(SamplingConfig(rate=1.0)).select(summary)
            Sampler(SamplingConfig(rate=0.0)).select(summary)
            assert not read, (setup, read)
    low = Sampler(SamplingConfig(rate=0.0, always=AlwaysSampleConfig(top_score_below=0.5)))
    low.select(summary_of(completed_traces("langfuse_observe")[0]))
    assert set(read) == {"scores", "contexts"}  # the check above would see a read: the rule reads through these
