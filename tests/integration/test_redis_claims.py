"""Popped traces are leased, not forgotten: a receiver killed between ``pop_due`` and its queue put loses nothing.

Against a real redis-server. Before the lease, ``pop_due`` deleted a due trace from Redis: the receiver that popped
it and died before its put took the trace with it, although every receiver had answered 200 for its spans.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from ragtrace_collector.config import SamplingConfig
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.assembly.redis_state import RedisAssemblyState
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.processor.sampling.sampler import Sampler
from ragtrace_collector.processor.sweep import Sweeper

pytestmark = pytest.mark.integration

LEASE = 0.5


def receiver(redis_server, prefix: str, **kw) -> RedisAssemblyState:
    """One receiver's view of the shared state (its own connection and claim owner)."""
    kw.setdefault("grace_seconds", 0.0)
    kw.setdefault("max_wait_seconds", 5.0)
    kw.setdefault("claim_lease_seconds", LEASE)
    return RedisAssemblyState(f"{redis_server.url}?prefix={prefix}", **kw)


def tid(i: int) -> str:
    return f"{i:032x}"


def root(trace: str) -> list[SpanData]:
    return [SpanData(trace, "00000000000000r1", "", "root", 1_000, 2_000, service="svc", nbytes=10)]


def add(state: RedisAssemblyState, n: int) -> list[str]:
    traces = [tid(i) for i in range(n)]
    for t in traces:
        state.add(t, root(t), 10, True, 0)
    return traces


def ids(state: RedisAssemblyState, limit: int | None = None) -> list[str]:
    return sorted(c.trace_id for c in state.pop_due(0, limit))


def test_a_trace_popped_by_a_receiver_that_died_is_popped_again_after_the_lease(redis_server):
    prefix = uuid.uuid4().hex[:8]
    dead, alive = receiver(redis_server, prefix), receiver(redis_server, prefix)
    traces = add(dead, 20)
    popped = dead.pop_due(0)
    assert sorted(c.trace_id for c in popped) == traces and all(c.reason == "root" for c in popped)
    dead.close()  # kill -9: popped, never settled
    assert ids(alive) == []  # within the lease the dead receiver may still be putting them
    time.sleep(LEASE + 0.2)
    again = alive.pop_due(0)
    lost = set(traces) - {c.trace_id for c in again}
    print(f"{len(traces)} traces popped by a receiver killed before its put: {len(lost)} lost")
    assert not lost
    assert all(c.reason == "root" and [s.name for s in c.spans] == ["root"] for c in again)
    alive.settle(traces)
    time.sleep(LEASE + 0.2)
    assert ids(alive) == [] and alive.claimed() == 0 and alive.inflight() == (0, 0)


def test_a_settled_trace_is_never_popped_again(redis_server):
    prefix = uuid.uuid4().hex[:8]
    a, b = receiver(redis_server, prefix), receiver(redis_server, prefix)
    traces = add(a, 10)
    assert ids(a) == traces
    a.settle(traces[:6])
    time.sleep(LEASE + 0.2)
    assert ids(b) == traces[6:]  # the unsettled ones only, now b's
    b.settle(traces[6:])
    time.sleep(LEASE + 0.2)
    assert ids(a) == [] and ids(b) == [] and a.claimed() == 0
    # spans arriving after completion stay late, settled or not
    assert a.add(traces[0], root(traces[0]), 10, True, 0).late_spans == 1


def test_a_receiver_settles_only_its_own_claims(redis_server):
    """A slow receiver whose lease ran out (another took the trace over) must not drop the new owner's claim."""
    prefix = uuid.uuid4().hex[:8]
    slow, other, third = (receiver(redis_server, prefix) for _ in range(3))
    traces = add(slow, 3)
    assert ids(slow) == traces
    time.sleep(LEASE + 0.2)
    assert ids(other) == traces
    slow.settle(traces)  # too late: the claims are other's now
    time.sleep(LEASE + 0.2)
    assert ids(third) == traces


def test_reclaims_count_against_the_limit_and_evictions_are_claimed_too(redis_server):
    prefix = uuid.uuid4().hex[:8]
    a, b = receiver(redis_server, prefix, max_traces=2), receiver(redis_server, prefix, max_traces=2)
    a.add(tid(1), [SpanData(tid(1), "0000000000000001", "00000000000000ff", "s", 1, 2, nbytes=10)], 10, False, 0)
    a.add(tid(2), [SpanData(tid(2), "0000000000000001", "00000000000000ff", "s", 1, 2, nbytes=10)], 10, False, 0)
    evicted = a.add(tid(3), root(tid(3)), 10, True, 0).evicted
    assert [c.trace_id for c in evicted] == [tid(1)]
    assert ids(a) == [tid(3)]  # evicted tid(1) was claimed by a, tid(3) popped now
    time.sleep(LEASE + 0.2)
    first = b.pop_due(0, limit=1)
    assert len(first) == 1 and ids(b) == sorted({tid(1), tid(3)} - {first[0].trace_id})
    assert {c.reason for c in first} <= {"evicted", "root"}


def test_unsettled_claims_expire(redis_server):
    """The safety net: a claim nobody settles is given up after claim_ttl (10 leases), so Redis never fills."""
    prefix = uuid.uuid4().hex[:8]
    s = receiver(redis_server, prefix, claim_lease_seconds=0.1)  # claim_ttl: 1 s
    traces = add(s, 5)
    assert ids(s) == traces
    time.sleep(1.3)
    assert ids(s) == [] and s.claimed() == 0
    keys = s._r.keys(f"{prefix}:asm:claim*")
    assert keys == [], keys


class _Queue:
    """A queue that keeps what it is given; ``writable`` False plays a full disk (records held in memory)."""

    def __init__(self, writable: bool = True) -> None:
        self.records: list[RagRecord] = []
        self.writable = writable

    def put(self, record: RagRecord) -> bool:
        self.records.append(record)
        return True

    def write_held(self) -> None:
        return None


class _Observer:
    def observe_records(self, records: list[RagRecord]) -> None:
        return None

    def dropped(self, pipeline: str | None, reason: str) -> None:
        return None


def _sweep(state: RedisAssemblyState, queue: _Queue, rate: float = 1.0) -> Sweeper:
    sweeper = Sweeper(Pipeline(state), Sampler(SamplingConfig(rate=rate)), queue, _Observer())  # type: ignore[arg-type]
    asyncio.run(sweeper.run_once())
    sweeper.close()
    return sweeper


def test_the_sweep_settles_what_it_queued_or_decided_and_not_what_it_holds_in_memory(redis_server):
    prefix = uuid.uuid4().hex[:8]
    state = receiver(redis_server, prefix)
    traces = add(state, 8)
    queued = _Queue()
    _sweep(state, queued)
    assert sorted(str(r.trace_id) for r in queued.records) == traces and state.claimed() == 0
    # not sampled: decided, settled too
    unsampled_state = receiver(redis_server, uuid.uuid4().hex[:8])
    add(unsampled_state, 4)
    _sweep(unsampled_state, _Queue(), rate=0.0)
    assert unsampled_state.claimed() == 0
    # the queue cannot write: claims stay, and another receiver completes them after the lease
    stuck_state = receiver(redis_server, uuid.uuid4().hex[:8])
    traces = add(stuck_state, 4)
    _sweep(stuck_state, _Queue(writable=False))
    assert stuck_state.claimed() == 4
    time.sleep(LEASE + 0.2)
    other = _Queue()
    _sweep(receiver(redis_server, stuck_state.prefix), other)
    assert sorted(str(r.trace_id) for r in other.records) == traces and stuck_state.claimed() == 0
