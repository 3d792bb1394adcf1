"""RedisAssemblyState: two receivers' assemblers sharing in-flight traces through a real redis-redis_server."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from ragtrace_collector.config import AssemblyConfig
from ragtrace_collector.model.spans import DecodedRequest, SpanData
from ragtrace_collector.processor.assembly.redis_state import RedisAssemblyState
from ragtrace_collector.processor.pipeline import Pipeline
from tests.support.redis_server import REFUSALS, RedisServer, refuse_writes, take_writes_again

pytestmark = pytest.mark.integration


def state(redis_server, prefix, **kw) -> RedisAssemblyState:
    kw.setdefault("grace_seconds", 0.2)
    kw.setdefault("max_wait_seconds", 5.0)
    return RedisAssemblyState(f"{redis_server.url}?prefix={prefix}", **kw)


def span(trace: str, sid: str, parent: str = "", name: str = "s", **attrs) -> SpanData:
    return SpanData(trace, sid, parent, name, 1_000, 2_000, attrs=attrs, service="svc", nbytes=100)


def tid(i: int) -> str:
    return f"{i:032x}"


def test_spans_split_across_receivers_complete_once(redis_server):
    prefix = uuid.uuid4().hex[:8]
    a, b = state(redis_server, prefix), state(redis_server, prefix)
    t = tid(1)
    a.add(
        t,
        [
            span(
                t, "00000000000000a1", "00000000000000r1", "retrieve", **{"retrieval.documents.0.document.content": "x"}
            )
        ],
        100,
        False,
        0,
    )
    b.add(
        t,
        [span(t, "00000000000000g1", "00000000000000r1", "generate"), span(t, "00000000000000r1", "", "root")],
        200,
        True,
        0,
    )
    assert a.inflight() == (1, 300)
    assert a.pop_due(0) == [] and b.pop_due(0) == []  # grace not over
    time.sleep(0.3)
    got_a, got_b = a.pop_due(0), b.pop_due(0)
    done = got_a + got_b
    assert len(done) == 1 and done[0].reason == "root"
    assert sorted(s.name for s in done[0].spans) == ["generate", "retrieve", "root"]
    retrieve = next(s for s in done[0].spans if s.name == "retrieve")
    assert retrieve.attrs == {"retrieval.documents.0.document.content": "x"} and retrieve.service == "svc"
    assert a.inflight() == (0, 0)
    # A straggler after completion is late, whichever receiver gets it.
    assert b.add(t, [span(t, "00000000000000z1", "00000000000000r1")], 50, False, 0).late_spans == 1
    assert a.inflight() == (0, 0)


def test_concurrent_sweeps_never_complete_a_trace_twice(redis_server):
    prefix = uuid.uuid4().hex[:8]
    states = [state(redis_server, prefix, grace_seconds=0.0) for _ in range(3)]
    n = 300
    for i in range(n):
        states[i % 3].add(tid(i), [span(tid(i), "0000000000000001")], 10, True, 0)
    got: list[str] = []
    lock = threading.Lock()

    def sweep(s: RedisAssemblyState) -> None:
        for _ in range(50):
            for c in s.pop_due(0, limit=7):
                with lock:
                    got.append(c.trace_id)

    threads = [threading.Thread(target=sweep, args=(s,)) for s in states]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(got) == sorted(tid(i) for i in range(n))


def test_max_wait_and_eviction(redis_server):
    prefix = uuid.uuid4().hex[:8]
    s = state(redis_server, prefix, max_wait_seconds=0.3, max_traces=2)
    s.add(tid(1), [span(tid(1), "0000000000000001", "00000000000000ff")], 10, False, 0)
    s.add(tid(2), [span(tid(2), "0000000000000001", "00000000000000ff")], 10, False, 0)
    res = s.add(tid(3), [span(tid(3), "0000000000000001", "00000000000000ff")], 10, False, 0)
    assert [(c.trace_id, c.reason, len(c.spans)) for c in res.evicted] == [(tid(1), "evicted", 1)]
    assert s.inflight() == (2, 20)
    time.sleep(0.4)
    done = s.pop_due(0)
    assert sorted((c.trace_id, c.reason) for c in done) == [(tid(2), "max_wait"), (tid(3), "max_wait")]
    bytes_bound = state(redis_server, uuid.uuid4().hex[:8], max_bytes=150)
    bytes_bound.add(tid(1), [span(tid(1), "0000000000000001", "00000000000000ff")], 100, False, 0)
    res = bytes_bound.add(tid(2), [span(tid(2), "0000000000000001", "00000000000000ff")], 100, False, 0)
    assert [c.trace_id for c in res.evicted] == [tid(1)] and bytes_bound.inflight() == (1, 100)


def test_redis_down_assembles_locally_and_recovers(tmp_path):
    srv = RedisServer(data_dir=tmp_path).start()
    try:
        s = RedisAssemblyState(f"{srv.url}?prefix=x", grace_seconds=0.0, retry_interval=0.1)
        s.add(tid(1), [span(tid(1), "0000000000000001")], 10, True, time.monotonic())
        srv.stop()
        t0 = time.monotonic()
        s.add(tid(2), [span(tid(2), "0000000000000001")], 10, True, time.monotonic())
        assert time.monotonic() - t0 < 2.0
        assert s.fallback_traces == 1
        assert [c.trace_id for c in s.pop_due(time.monotonic())] == [tid(2)]
        srv.start()  # AOF kept trace 1 in Redis
        time.sleep(0.15)
        assert [c.trace_id for c in s.pop_due(time.monotonic())] == [tid(1)]
        s.add(tid(3), [span(tid(3), "0000000000000001")], 10, True, time.monotonic())
        assert s.fallback_traces == 1  # back on Redis
        assert [c.trace_id for c in s.pop_due(time.monotonic())] == [tid(3)]
    finally:
        srv.cleanup()


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_redis_refusing_writes_assembles_locally_and_recovers(tmp_path, refusal):
    """Full (OOM), read-only (a replica after a failover) or unable to persist (MISCONF): spans are assembled
    locally, as with Redis down, instead of raising out of the receiver; shared again once writes are taken."""
    srv = RedisServer(data_dir=tmp_path, args=("--enable-protected-configs", "yes")).start()
    admin = redis.Redis.from_url(srv.url)
    try:
        s = RedisAssemblyState(f"{srv.url}?prefix=x", grace_seconds=0.0, retry_interval=0.1)
        s.add(tid(1), [span(tid(1), "0000000000000001")], 10, True, time.monotonic())
        assert [c.trace_id for c in s.pop_due(time.monotonic())] == [tid(1)]
        refuse_writes(admin, refusal, tmp_path)
        s.add(tid(2), [span(tid(2), "0000000000000001")], 10, True, time.monotonic())
        assert s.fallback_traces == 1
        assert [c.trace_id for c in s.pop_due(time.monotonic())] == [tid(2)]
        take_writes_again(admin, refusal, tmp_path)
        time.sleep(0.15)
        s.add(tid(3), [span(tid(3), "0000000000000001")], 10, True, time.monotonic())
        assert s.fallback_traces == 1  # back on Redis
        assert [c.trace_id for c in s.pop_due(time.monotonic())] == [tid(3)]
    finally:
        admin.close()
        srv.cleanup()


def test_assembler_over_shared_state_builds_one_record(redis_server):
    """The ingest helper's Pipeline, unchanged, on top of the shared state of two receivers."""

    cfg = AssemblyConfig(grace_seconds=0.0, max_wait_seconds=5.0, max_inflight_traces=100, max_inflight_bytes=1 << 20)
    prefix = uuid.uuid4().hex[:8]
    url = f"{redis_server.url}?prefix={prefix}"
    asm_a, asm_b = (
        Pipeline(RedisAssemblyState.from_config(url, cfg)),
        Pipeline(RedisAssemblyState.from_config(url, cfg)),
    )
    t = tid(42)
    ra, rb = DecodedRequest(), DecodedRequest()
    ra.traces[t] = [span(t, "00000000000000a1", "00000000000000b1", "retrieve")]
    rb.traces[t] = [span(t, "00000000000000b1", "", "rag")]
    asm_a.add(ra)
    asm_b.add(rb)
    records = asm_a.collect() + asm_b.collect()
    assert len(records) == 1 and records[0].trace_id == t


def test_shutdown_of_one_receiver_leaves_shared_traces_to_the_others(redis_server):
    prefix = uuid.uuid4().hex[:8]
    leaving, staying = state(redis_server, prefix, grace_seconds=0.3), state(redis_server, prefix, grace_seconds=0.3)
    t = tid(7)
    leaving.add(t, [span(t, "0000000000000001")], 10, True, 0)
    assert leaving.pop_all() == []  # not due yet: another receiver may still get its spans
    time.sleep(0.35)
    (done,) = staying.pop_due(0)
    assert done.trace_id == t and done.reason == "root"
