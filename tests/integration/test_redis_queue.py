"""RedisStreamQueue against Debian's real redis-server (started per module on a free loopback port)."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
import redis

from ragtrace_collector.internal.redis import UNAVAILABLE
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue import open_queue
from ragtrace_collector.queue.redis import RedisStreamQueue, ScoredMarks
from tests.support.full_disk import small_disk
from tests.support.redis_server import REFUSALS, RedisServer, refuse_writes, take_writes_again

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def rec(i: int) -> RagRecord:
    return RagRecord(trace_id=f"{i:032x}", user_input=f"q{i}", response=f"a{i}", pipeline="p")


def wait_spill_sent(q: RedisStreamQueue, timeout: float = 10.0) -> None:
    """Until ``q``'s spill is empty (sent to Redis) or ``timeout`` passes; the caller asserts what arrived."""
    deadline = time.monotonic() + timeout
    while q.buffered and time.monotonic() < deadline:
        time.sleep(0.05)


def lease_patiently(q: RedisStreamQueue, n: int, lease_seconds: float = 30, timeout: float = 15.0) -> list:
    """``q.lease`` retried while Redis cannot answer, as the scoring worker's loop does.

    A Redis just restarted with ``appendfsync always`` on a busy host (CI runs the suite in parallel) may take longer
    than the client's 2 s to answer its first write (``XGROUP CREATE``); that is an outage for the worker, not a loss.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.lease(n, lease_seconds)
        except UNAVAILABLE:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def make(redis_server, prefix, **kw) -> RedisStreamQueue:
    return RedisStreamQueue(f"{redis_server.url}?prefix={prefix}", **kw)


def test_put_lease_ack_roundtrip(redis_server, prefix):
    q = make(redis_server, prefix)
    assert q.depth() == 0 and q.oldest_age() is None
    for i in range(5):
        assert q.put(rec(i))
    assert q.depth() == 5
    assert q.oldest_age() >= 0.0
    got = q.lease(3, lease_seconds=30)
    assert [g.record.trace_id for g in got] == [f"{i:032x}" for i in range(3)]
    assert all(g.attempts == 1 for g in got)
    assert got[0].record.user_input == "q0" and got[0].enqueued_at <= time.time()
    for g in got:
        q.ack(g.receipt)
    assert q.depth() == 2
    rest = q.lease(10, lease_seconds=30)
    assert [g.record.user_input for g in rest] == ["q3", "q4"]
    assert q.lease(10, lease_seconds=30) == []  # leased records are not handed out twice
    for g in rest:
        q.ack(g.receipt)
    assert q.depth() == 0 and q.oldest_age() is None
    q.close()


def test_open_queue_redis_url(redis_server, prefix):
    q = open_queue(f"{redis_server.url}?prefix={prefix}", max_depth=7)
    assert isinstance(q, RedisStreamQueue) and q.max_depth == 7 and q.stream == f"{prefix}:records"
    q.close()


def test_consumers_share_work_without_duplicates(redis_server, prefix):
    producer = make(redis_server, prefix)
    for i in range(200):
        producer.put(rec(i))
    workers = [make(redis_server, prefix) for _ in range(3)]
    seen: list[str] = []
    lock = threading.Lock()

    def drain(q: RedisStreamQueue) -> None:
        while True:
            batch = q.lease(7, lease_seconds=30)
            if not batch:
                return
            for leased in batch:
                with lock:
                    seen.append(leased.record.trace_id)
                q.ack(leased.receipt)

    threads = [threading.Thread(target=drain, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == sorted(f"{i:032x}" for i in range(200))
    assert producer.depth() == 0


def test_dead_consumers_entries_are_reclaimed_after_lease(redis_server, prefix):
    q = make(redis_server, prefix)
    q.put(rec(1))
    dead = make(redis_server, prefix, consumer="dead-worker")
    first = dead.lease(1, lease_seconds=1.0)
    assert len(first) == 1 and first[0].attempts == 1
    alive = make(redis_server, prefix, consumer="alive-worker")
    assert alive.lease(1, lease_seconds=1.0) == []  # lease not yet expired
    time.sleep(1.2)
    again = alive.lease(1, lease_seconds=1.0)
    assert len(again) == 1 and again[0].record.trace_id == f"{1:032x}"
    assert again[0].attempts == 2 and alive.reclaimed == 1
    # The dead worker's late release must not undo the takeover; its late ack would be harmless.
    dead.release(first[0].receipt)
    assert alive.lease(1, lease_seconds=30) == []
    alive.ack(again[0].receipt)
    assert q.depth() == 0


def test_release_with_delay_hides_record_until_due(redis_server, prefix):
    q = make(redis_server, prefix)
    q.put(rec(1))
    (leased,) = q.lease(1, lease_seconds=30)
    q.release(leased.receipt, delay=1.0)
    assert q.depth() == 1
    assert q.oldest_age() >= 0.0
    assert q.lease(1, lease_seconds=30) == []
    time.sleep(1.2)
    other = make(redis_server, prefix)
    (again,) = other.lease(1, lease_seconds=30)
    assert again.record.trace_id == leased.record.trace_id
    assert again.attempts == 2  # deliveries so far, as in the SQLite queue
    assert abs(again.enqueued_at - leased.enqueued_at) < 1e-3  # age is kept across releases
    other.ack(again.receipt)
    assert q.depth() == 0


def test_full_stream_drops_newest_and_counts(redis_server, prefix):
    q = make(redis_server, prefix, max_depth=3)
    assert [q.put(rec(i)) for i in range(5)] == [True, True, True, False, False]
    assert q.depth() == 3 and q.overflowed == 2 and q.dropped == 2
    assert q.overflow_total() == 2  # cluster-wide counter in Redis
    ids = [g.record.trace_id for g in q.lease(10, 30)]
    assert ids == [f"{i:032x}" for i in range(3)]  # the oldest were kept


def test_unreadable_entry_is_dropped_not_redelivered(redis_server, prefix):
    q = make(redis_server, prefix)
    r = redis.Redis.from_url(redis_server.url, decode_responses=True)
    q.lease(1, 30)  # creates the group
    r.xadd(q.stream, {"r": "{not json", "t": "0", "a": "0"})
    q.put(rec(2))
    got = q.lease(5, 30)
    assert [g.record.trace_id for g in got] == [f"{2:032x}"]
    assert q.corrupt == 1 and r.xlen(q.stream) == 1


def test_scored_marks_count_once_across_workers(redis_server, prefix):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    marks = [ScoredMarks(client, prefix, owner=f"w{i}") for i in range(4)]
    wins: list[str] = []
    lock = threading.Lock()

    def race(m: ScoredMarks) -> None:
        for k in range(50):
            if m.first(f"trace{k}", "faithfulness"):
                with lock:
                    wins.append(m.owner)

    threads = [threading.Thread(target=race, args=(m,)) for m in marks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 50
    assert marks[0].owner_of("trace0", "faithfulness") in {"w0", "w1", "w2", "w3"}
    assert marks[0].first("trace0", "answer_relevancy")  # per metric


def test_redis_down_buffers_locally_sheds_beyond_bound_and_recovers(tmp_path, prefix):
    srv = RedisServer(data_dir=tmp_path).start()
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", buffer_size=5, retry_interval=0.1)
        assert q.put(rec(0))
        srv.stop()
        t0 = time.monotonic()
        results = [q.put(rec(i)) for i in range(1, 9)]
        assert time.monotonic() - t0 < 2.0  # receivers never hang on a dead Redis
        assert results == [True] * 5 + [False] * 3
        assert q.buffered == 5 and q.shed == 3 and q.dropped == 3
        assert q.depth() == 5 and q.oldest_age() is not None
        srv.start()  # AOF: the record put before the outage survived the restart
        wait_spill_sent(q)
        assert q.buffered == 0
        assert q.put(rec(9))
        got = lease_patiently(q, 20, 30)
        assert [g.record.trace_id for g in got] == [f"{i:032x}" for i in [0, 1, 2, 3, 4, 5, 9]]
        q.close()
    finally:
        srv.cleanup()


def test_close_with_redis_still_down_reports_what_the_buffer_loses(tmp_path, prefix, caplog):
    srv = RedisServer(data_dir=tmp_path).start()
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", buffer_size=5, retry_interval=0.1)
        srv.stop()
        assert q.put(rec(1)) and q.put(rec(2)) and q.buffered == 2
        with caplog.at_level("ERROR", logger="ragtrace_collector.queue.redis"):
            q.close()
        assert q.shed == 2 and q.dropped == 2
        assert "2 record(s) held in memory not delivered" in caplog.text
    finally:
        srv.cleanup()


def test_a_spill_file_keeps_what_a_shutdown_during_the_outage_held(tmp_path, prefix, caplog):
    """Closed while Redis is down, a queue with a spill file loses nothing: the next queue opened on that file
    sends the records, in their order, before anything put after them."""
    srv = RedisServer(data_dir=tmp_path).start()
    spill = str(tmp_path / "receiver" / "redis-spill.sqlite")
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", buffer_size=5, retry_interval=0.1, spill=spill)
        srv.stop()
        assert [q.put(rec(i)) for i in range(7)] == [True] * 5 + [False] * 2  # the bound holds on disk too
        with caplog.at_level("WARNING", logger="ragtrace_collector.queue.redis"):
            q.close()
        assert q.shed == 2  # only the two refused at the bound
        assert "5 record(s) kept in the spill file" in caplog.text
        srv.start()
        again = RedisStreamQueue(f"{srv.url}?prefix={prefix}", buffer_size=10, retry_interval=0.1, spill=spill)
        assert again.put(rec(99))  # queued behind the held records
        wait_spill_sent(again)
        assert again.buffered == 0
        got = [g.record.trace_id for g in lease_patiently(again, 20, 30)]
        assert got == [f"{i:032x}" for i in [0, 1, 2, 3, 4, 99]]
        again.close()
    finally:
        srv.cleanup()


def test_receivers_sharing_a_spill_file_enqueue_each_record_once(tmp_path, prefix):
    """Two receivers on one data directory flush one spill file at once; each record reaches the stream once
    (a second send of the same held record carries the same put key and is refused as a duplicate)."""
    srv = RedisServer(data_dir=tmp_path).start()
    spill = str(tmp_path / "shared" / "redis-spill.sqlite")
    try:
        a = RedisStreamQueue(f"{srv.url}?prefix={prefix}", retry_interval=0.05, spill=spill)
        b = RedisStreamQueue(f"{srv.url}?prefix={prefix}", retry_interval=0.05, spill=spill)
        srv.stop()
        for i in range(200):
            assert (a if i % 2 else b).put(rec(i))
        assert a.buffered == b.buffered == 200  # one file: each sees what both hold
        srv.start()
        deadline = time.monotonic() + 15
        while (a.buffered or b.buffered) and time.monotonic() < deadline:
            time.sleep(0.05)
        got = [g.record.trace_id for g in lease_patiently(a, 1000, 30)]
        assert sorted(got) == sorted(f"{i:032x}" for i in range(200))  # none lost, none twice
        a.close()
        b.close()
    finally:
        srv.cleanup()


def test_a_receiver_sends_on_what_another_left_in_their_shared_spill_file(tmp_path, prefix):
    """A receiver that never lost Redis itself still finds, within ``spill_check_interval``, the records a
    sibling on the same data directory left in the file when it stopped during an outage."""
    srv = RedisServer(data_dir=tmp_path).start()
    spill = str(tmp_path / "shared" / "redis-spill.sqlite")
    try:
        live = RedisStreamQueue(
            f"{srv.url}?prefix={prefix}", retry_interval=0.05, spill=spill, spill_check_interval=0.2
        )
        stopped = RedisStreamQueue(f"{srv.url}?prefix={prefix}", retry_interval=0.05, spill=spill)
        srv.stop()
        assert all(stopped.put(rec(i)) for i in range(5))
        stopped.close()  # kept in the file
        srv.start()
        deadline = time.monotonic() + 10
        i = 100
        while live.buffered and time.monotonic() < deadline:
            assert live.put(rec(i))  # straight to Redis: this receiver is not spilling
            i += 1
            time.sleep(0.05)
        assert live.buffered == 0
        got = {g.record.trace_id for g in lease_patiently(live, 1000, 30)}
        assert got == {f"{k:032x}" for k in [*range(5), *range(100, i)]}
        live.close()
    finally:
        srv.cleanup()


def test_a_flush_into_a_full_stream_counts_what_it_refuses(tmp_path, prefix):
    srv = RedisServer(data_dir=tmp_path).start()
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", max_depth=3, buffer_size=10, retry_interval=0.05)
        srv.stop()
        assert all(q.put(rec(i)) for i in range(5))
        srv.start()
        wait_spill_sent(q)
        assert q.buffered == 0 and q.overflowed == 2 and q.overflow_total() == 2
        assert [g.record.trace_id for g in lease_patiently(q, 10, 30)] == [f"{i:032x}" for i in range(3)]
        q.close()
    finally:
        srv.cleanup()


def test_spilled_records_redis_answers_with_an_error_are_counted_and_the_flusher_goes_on(tmp_path, prefix):
    """Redis answering the flush with an error that is no outage (the stream's key overwritten: WRONGTYPE) loses
    those records, counted as a direct put's error is; the flusher neither dies with them nor stalls behind them."""
    from prometheus_client import CollectorRegistry

    srv = RedisServer(data_dir=tmp_path).start()
    admin = redis.Redis.from_url(srv.url)
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", retry_interval=0.5, spill=str(tmp_path / "s.sqlite"))
        reg = CollectorRegistry()
        q.register_metrics(reg)
        srv.stop()
        assert all(q.put(rec(i)) for i in range(5))
        srv.start()
        admin.set(q.stream, "overwritten by someone")  # before the flusher's next try, 0.5 s on
        wait_spill_sent(q)
        assert q.buffered == 0 and q.refused == 5
        assert reg.get_sample_value("ragtrace_queue_shed_total", {"reason": "redis_error"}) == 5
        admin.delete(q.stream)
        srv.stop()
        assert all(q.put(rec(i)) for i in range(5, 8))
        srv.start()  # no put after this one: the flusher alone must send them
        wait_spill_sent(q)
        assert [g.record.trace_id for g in lease_patiently(q, 10, 30)] == [f"{i:032x}" for i in range(5, 8)]
        q.close()
    finally:
        admin.close()
        srv.cleanup()


def test_a_spill_file_that_cannot_be_written_holds_records_in_memory_and_loses_none(tmp_path, prefix, caplog):
    """Redis down and the spill file refusing writes at once (here locked by another process past SQLite's
    timeout, as a full disk refuses them): records wait in memory with one warning, none raised or shed, and
    reach Redis when it returns, the file still locked. Past the memory tier's bound they are shed and counted;
    what memory still holds when the receiver stops is counted lost, with an error."""
    import sqlite3

    from prometheus_client import CollectorRegistry

    srv = RedisServer(data_dir=tmp_path).start()
    spill = tmp_path / "s.sqlite"
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", buffer_size=3, retry_interval=0.05, spill=str(spill))
        reg = CollectorRegistry()
        q.register_metrics(reg)
        srv.stop()
        holder = sqlite3.connect(spill, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        with caplog.at_level(logging.WARNING, logger="ragtrace_collector.queue"):
            assert q.put(rec(0)) and q.put(rec(1))
        assert q.buffered == 2 and q.dropped == 0
        assert sum("spill" in r.getMessage() and "memory" in r.getMessage() for r in caplog.records) == 1
        srv.start()  # the file still locked
        wait_spill_sent(q)
        assert [g.record.trace_id for g in lease_patiently(q, 10, 30)] == [f"{i:032x}" for i in (0, 1)]
        srv.stop()
        assert q.put(rec(2)) and q.put(rec(3)) and q.put(rec(4))
        assert q.put(rec(5)) is False  # memory holds its bound (buffer_size) too
        assert reg.get_sample_value("ragtrace_queue_shed_total", {"reason": "spill_unwritable"}) == 1
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="ragtrace_collector.queue.redis"):
            q.close()
        assert q.dropped == 1 + 3  # the three in memory at close, counted as lost
        assert any("3 record(s) held in memory not delivered" in r.getMessage() for r in caplog.records)
        holder.execute("ROLLBACK")
        holder.close()
    finally:
        srv.cleanup()


def test_records_held_in_memory_move_into_the_spill_file_once_the_disk_has_room(tmp_path, prefix):
    """A real full disk (a small tmpfs, filled) under the spill file during an outage: records wait in memory;
    once the disk has room again they move into the file, in order, and outlive the receiver: the next receiver
    on the file sends them."""
    (tmp_path / "redis").mkdir()
    srv = RedisServer(data_dir=tmp_path / "redis").start()
    try:
        with small_disk(tmp_path / "disk") as disk:
            spill = disk.path / "s.sqlite"
            q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", retry_interval=0.05, spill=str(spill))
            srv.stop()
            disk.fill()
            assert all(q.put(rec(i)) for i in range(50))  # ~2 KB each: the file cannot take them
            assert q.buffered == 50 and q.dropped == 0
            disk.free()
            time.sleep(1.1)  # the file is tried again after a second
            assert q.put(rec(50))
            q.close()  # Redis still down: all kept in the file
            assert q.dropped == 0
            srv.start()
            again = RedisStreamQueue(f"{srv.url}?prefix={prefix}", retry_interval=0.05, spill=str(spill))
            wait_spill_sent(again)
            assert [g.record.trace_id for g in lease_patiently(again, 100, 30)] == [f"{i:032x}" for i in range(51)]
            again.close()
    finally:
        srv.cleanup()


def test_redis_stopped_in_the_middle_of_a_flush_loses_and_doubles_nothing(tmp_path, prefix):
    """The spill goes out in pipelined batches; a batch cut off by Redis stopping is sent again whole once it
    is back, and the puts of it that had landed are refused by their keys."""
    srv = RedisServer(data_dir=tmp_path).start()
    n = 20_000  # well over what is sent while Redis shuts down (~13,000 records/s)
    try:
        q = RedisStreamQueue(
            f"{srv.url}?prefix={prefix}",
            max_depth=n,
            buffer_size=n,
            retry_interval=0.05,
            spill=str(tmp_path / "s.sqlite"),
        )
        srv.stop()
        assert all(q.put(rec(i)) for i in range(n))
        srv.start()
        deadline = time.monotonic() + 10
        while q.buffered > n - 500 and time.monotonic() < deadline:
            time.sleep(0.001)
        srv.stop()  # mid-flush
        assert 0 < q.buffered < n
        srv.start()
        wait_spill_sent(q, timeout=30)
        assert q.buffered == 0
        got = [g.record.trace_id for g in lease_patiently(q, 2 * n, 30)]
        assert q.overflowed == 0
        assert got == [f"{i:032x}" for i in range(n)]  # all, once each, in order
        q.close()
    finally:
        srv.cleanup()


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_redis_refusing_writes_is_an_outage_not_an_error(tmp_path, prefix, refusal):
    """Redis full (``maxmemory`` with ``noeviction``: OOM), a replica after a failover (READONLY) or unable to write
    its snapshot (MISCONF: disk full) refuses the put: the receiver spills the records as for an unreachable Redis
    and sends them once Redis takes writes again, instead of raising on every put (each then counted lost)."""
    srv = RedisServer(data_dir=tmp_path, args=("--enable-protected-configs", "yes")).start()  # CONFIG SET dir
    admin = redis.Redis.from_url(srv.url)
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", retry_interval=0.05, spill=str(tmp_path / "s.sqlite"))
        assert q.put(rec(0))
        refuse_writes(admin, refusal, tmp_path)
        assert all(q.put(rec(i)) for i in range(1, 21))  # none raises, none is refused
        assert q.buffered == 20 and q.shed == 0
        take_writes_again(admin, refusal, tmp_path)
        wait_spill_sent(q)
        # Every record once. Not always in order: Redis may begin taking writes in the middle of a flushed batch (the
        # promotion or the CONFIG SET lands between two of its pipelined puts), and the batch is then sent again
        # whole, its landed puts refused by their keys, so those few stand before the ones that failed.
        sent = [g.record.trace_id for g in q.lease(50, 30)]
        assert sorted(sent) == [f"{i:032x}" for i in range(21)] and sent[0] == f"{0:032x}"
        q.close()
    finally:
        admin.close()
        srv.cleanup()


def test_metrics_registered_on_registry(redis_server, prefix):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry()
    q = make(redis_server, prefix, max_depth=1)
    q.register_metrics(reg)
    q.put(rec(1))
    q.put(rec(2))
    assert reg.get_sample_value("ragtrace_queue_shed_total", {"reason": "stream_full"}) == 1
    assert reg.get_sample_value("ragtrace_queue_local_buffer_records") == 0


def test_idle_consumers_without_pending_entries_are_forgotten(redis_server, prefix):
    gone = make(redis_server, prefix, consumer="old-process")
    gone.put(rec(1))
    holding = make(redis_server, prefix, consumer="holding-process")
    (_leased,) = holding.lease(1, 30)
    gone.lease(1, 30)  # registers the consumer, gets nothing
    q = make(redis_server, prefix, consumer="new-process")
    q.reap_idle_ms = 0
    q.lease(1, 30)
    names = {c["name"] for c in q._r.xinfo_consumers(q.stream, q.group)}
    assert "old-process" not in names and "holding-process" in names  # the one holding an entry stays


def test_extend_keeps_a_slow_workers_lease_and_fails_once_lost(redis_server, prefix):
    q = make(redis_server, prefix)
    q.put(rec(1))
    slow = make(redis_server, prefix, consumer="slow")
    # A 1 s lease renewed every 0.5 s: a host that stalls a test process for up to half a second (CI's two cores
    # shared by parallel workers did, for 0.4 s) still renews in time.
    (leased,) = slow.lease(1, lease_seconds=1.0)
    other = make(redis_server, prefix, consumer="other")
    for _ in range(3):  # 1.5 s in all, longer than the lease
        time.sleep(0.5)
        assert slow.extend(leased.receipt, 1.0)
        assert other.lease(1, lease_seconds=1.0) == []
    time.sleep(1.3)  # heartbeat stops (worker died): the lease lapses
    (taken,) = other.lease(1, lease_seconds=1.0)
    assert taken.record.trace_id == leased.record.trace_id
    assert slow.extend(leased.receipt, 1.0) is False  # lost: the old holder cannot take it back
    assert other.lease(1, lease_seconds=30) == [] and slow.lease(1, lease_seconds=30) == []


def test_outage_under_concurrent_puts_loses_and_duplicates_nothing(tmp_path, prefix):
    srv = RedisServer(data_dir=tmp_path).start()
    try:
        q = RedisStreamQueue(f"{srv.url}?prefix={prefix}", buffer_size=10_000, retry_interval=0.05)
        errors: list[BaseException] = []

        def writer(base: int) -> None:
            try:
                for i in range(100):
                    assert q.put(rec(base + i))
                    if i == 30 and base == 0:
                        srv.stop()  # Redis dies while three threads are writing
                    time.sleep(0.001)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(b,)) for b in (0, 1000, 2000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert q.buffered > 0
        srv.start()
        wait_spill_sent(q)
        got = [g.record.trace_id for g in lease_patiently(q, 1000, 30)]
        assert sorted(got) == sorted(f"{b + i:032x}" for b in (0, 1000, 2000) for i in range(100))
        for b in (0, 1000, 2000):  # each writer's records keep their order
            mine = [t for t in got if b <= int(t, 16) < b + 1000]
            assert mine == [f"{b + i:032x}" for i in range(100)]
        q.close()
    finally:
        srv.cleanup()


def test_killed_consumers_entries_are_taken_over_before_the_lease_ends(redis_server, prefix):
    q = make(redis_server, prefix)
    for i in range(3):
        q.put(rec(i))
    kw = {"alive_interval": 0.2, "alive_ttl": 1.0}
    dead = make(redis_server, prefix, consumer="killed", **kw)
    alive = make(redis_server, prefix, consumer="slow-but-alive", **kw)
    assert len(dead.lease(2, lease_seconds=60)) == 2
    assert len(alive.lease(1, lease_seconds=60)) == 1
    dead._closing.set()  # its heartbeat stops, as when the process is killed (no close(), no cleanup)
    taker = make(redis_server, prefix, consumer="taker", **kw)
    assert taker.lease(5, lease_seconds=60) == []  # still alive as far as anyone can tell
    time.sleep(1.3)
    got = taker.lease(5, lease_seconds=60)  # 60 s lease, taken over after ~1 s
    assert sorted(g.record.trace_id for g in got) == [f"{0:032x}", f"{1:032x}"]
    assert all(g.attempts == 2 for g in got) and taker.reclaimed == 2
    other = make(redis_server, prefix, consumer="other", **kw)
    time.sleep(1.1)
    assert other.lease(5, lease_seconds=60) == []  # the live holder keeps its entry; no second taker
    alive.close()
    taker.close()
