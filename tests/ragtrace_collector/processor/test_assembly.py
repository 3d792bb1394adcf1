"""Assembly policy through the pipeline: grouping across batches, root + grace, max wait, late spans, bounds and
eviction."""

from __future__ import annotations

from ragtrace_collector.model.spans import DecodedRequest, SpanData
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.state import REASON_EVICTED, REASON_MAX_WAIT, REASON_ROOT, REASON_SHUTDOWN
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.processor.records import record_of
from ragtrace_collector.receiver.decode import extract_spans
from tests.support import span_fixtures as F
from tests.support.assembly import ManualClock, RecordingObserver


def span(trace: str, sid: str, parent: str = "", nbytes: int = 100) -> SpanData:
    return SpanData(trace, sid, parent, f"s{sid}", 1, 2, nbytes=nbytes)


def batch(*spans: SpanData) -> DecodedRequest:
    d = DecodedRequest()
    for s in spans:
        d.traces.setdefault(s.trace_id, []).append(s)
        d.accepted += 1
    return d


def make(**kw):
    clock, obs = ManualClock(), RecordingObserver()
    state = InMemoryAssemblyState(**{"grace_seconds": 2.0, "max_wait_seconds": 60.0, **kw})
    return Pipeline(state, observer=obs, clock=clock), clock, obs


def test_spans_of_one_trace_across_requests_make_one_record():
    trace_id, request = F.to_request(F.ragtrace_shaped())
    spans = extract_spans(request).traces[trace_id]
    asm, clock, obs = make()
    child_spans = [s for s in spans if s.parent_id]
    root = [s for s in spans if not s.parent_id]
    asm.add(batch(child_spans[0]))
    clock.t += 1
    asm.add(batch(child_spans[1]))
    assert asm.collect() == []  # no root yet
    clock.t += 1
    asm.add(batch(*root))
    clock.t += 1.9
    assert asm.collect() == []  # inside the grace period
    clock.t += 0.2
    records = asm.collect()
    assert len(records) == 1 and records[0].trace_id == trace_id
    assert records[0].response == F.ANSWER and len(records[0].retrieved_contexts) == 3
    assert obs.completed == [REASON_ROOT]
    assert obs.inflight_seen == (0, 0)


def test_straggler_within_grace_is_included_and_late_span_counted():
    asm, clock, obs = make()
    asm.add(batch(span("a" * 32, "1"), span("a" * 32, "2", parent="1")))
    clock.t += 1.0
    asm.add(batch(span("a" * 32, "3", parent="1")))  # within grace
    clock.t += 1.5
    completed = asm.completed()
    assert [len(c.spans) for c in completed] == [3]
    asm.add(batch(span("a" * 32, "4", parent="1"), span("a" * 32, "5", parent="1")))
    assert obs.late == 2
    assert asm.completed() == []


def test_trace_without_root_completes_at_max_wait():
    asm, clock, _obs = make(max_wait_seconds=10)
    asm.add(batch(span("b" * 32, "2", parent="1")))
    clock.t += 9.9
    assert asm.completed() == []
    clock.t += 0.2
    done = asm.completed()
    assert [c.reason for c in done] == [REASON_MAX_WAIT]
    records = asm.collect()
    assert records == []
    record = record_of(done[0])
    assert record.metadata["ragtrace.assembly"] == REASON_MAX_WAIT


def test_bounds_evict_oldest_first_by_count_and_bytes():
    asm, clock, obs = make(max_traces=2, max_bytes=10_000)
    for i in range(3):
        asm.add(batch(span(f"{i:032x}", "2", parent="1")))
        clock.t += 0.1
    done = asm.completed()
    assert [(c.trace_id, c.reason) for c in done] == [(f"{0:032x}", REASON_EVICTED)]
    assert asm.state.inflight() == (2, 200)

    asm2, _clock2, _ = make(max_traces=100, max_bytes=250)
    for i in range(3):
        asm2.add(batch(span(f"{i:032x}", "2", parent="1", nbytes=100)))
    assert [c.trace_id for c in asm2.completed()] == [f"{0:032x}"]
    assert asm2.state.inflight() == (2, 200)
    # an evicted trace's later spans are late, not a new trace
    asm.add(batch(span(f"{0:032x}", "3", parent="1")))
    assert obs.late == 1


def test_shutdown_takes_everything_in_flight():
    asm, _clock, _obs = make()
    asm.add(batch(span("c" * 32, "1"), span("d" * 32, "2", parent="9")))
    done = asm.completed(everything=True)
    assert sorted(c.reason for c in done) == [REASON_SHUTDOWN, REASON_SHUTDOWN]
    assert asm.state.inflight() == (0, 0)


def test_completed_memory_is_bounded():
    state = InMemoryAssemblyState(grace_seconds=0, completed_memory=3)
    for i in range(10):
        state.add(f"{i:032x}", [span(f"{i:032x}", "1")], 10, True, 0.0)
    assert len(state.pop_due(1.0)) == 10
    assert len(state._completed) == 3


def test_span_data_round_trips_through_dict():
    s = SpanData("e" * 32, "1" * 16, "", "n", 1, 2, 2, "bad", {"a": [1, 2]}, [("exception", {"x": 1})], "svc", 42)
    again = SpanData.from_dict(s.to_dict())
    assert again.to_dict() == s.to_dict()


def test_deadline_heap_stays_proportional_to_traces_in_flight():
    state = InMemoryAssemblyState(grace_seconds=0.0, max_wait_seconds=60.0)
    now = 0.0
    for i in range(5000):
        tid = f"{i:032x}"
        state.add(tid, [span(tid, "2", parent="1")], 10, False, now)
        state.add(tid, [span(tid, "1")], 10, True, now)  # root: an earlier deadline supersedes max-wait
        now += 0.001
        state.pop_due(now)
    assert state.inflight() == (0, 0)
    assert len(state._heap) <= 2 * 1 + 1024


def test_pipeline_span_with_a_remote_parent_completes_like_a_root():
    """A RAG service called by a gateway: the trace's root is exported elsewhere, the @pipeline span is ours."""
    asm, clock, _obs = make()
    tid = "e" * 32
    pipeline = SpanData(tid, "2", "gateway0", "support", 1, 2, attrs={"ragtrace.span.role": "pipeline"})
    asm.add(batch(span(tid, "3", parent="2"), pipeline))
    clock.t += 2.1
    assert [c.reason for c in asm.completed()] == [REASON_ROOT]
