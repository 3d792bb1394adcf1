"""The ``RecordQueue`` contract (``queue/base.py``), run against every backend: the embedded SQLite queue and Redis
Streams on Debian's real ``redis-server``. A new backend joins ``BACKENDS`` and must pass the same tests.

Backend-specific behaviour (SQLite's full disk, Redis's spill during an outage, consumer groups) stays in each
backend's own tests; what is here is what the scoring worker and the sweeper rely on whatever the URL.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue import RecordQueue, open_queue
from tests.support.binaries import require
from tests.support.redis_server import RedisServer

BACKENDS = ("sqlite", "redis")
Factory = Callable[..., RecordQueue]


def rec(i: int) -> RagRecord:
    return RagRecord(trace_id=f"{i:032x}", user_input=f"q{i}", response=f"a{i}", retrieved_contexts=[f"c{i}"])


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    require("redis-server", "redis-server")
    server = RedisServer().start()
    yield server.url
    server.cleanup()


@pytest.fixture(params=BACKENDS)
def make_queue(request: pytest.FixtureRequest, tmp_path) -> Iterator[Factory]:
    """Opens queues of one backend sharing one store (a second call is a second process's view of it)."""
    opened: list[RecordQueue] = []
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'queue.sqlite'}"
    else:
        url = f"{request.getfixturevalue('redis_url')}?prefix=c{uuid.uuid4().hex[:8]}"

    def make(max_depth: int = 100) -> RecordQueue:
        q = open_queue(url, max_depth=max_depth)
        opened.append(q)
        return q

    yield make
    for q in opened:
        q.close()


def test_fifo_lease_ack_depth_and_age(make_queue):
    q = make_queue()
    assert q.depth() == 0 and q.oldest_age() is None
    for i in range(4):
        assert q.put(rec(i))
    assert q.depth() == 4 and q.oldest_age() is not None and q.oldest_age() >= 0.0
    first = q.lease(3, lease_seconds=30)
    assert [x.record.trace_id for x in first] == [f"{i:032x}" for i in range(3)]  # oldest first
    assert first[0].record.context_texts == ["c0"] and all(x.attempts == 1 for x in first)
    assert [x.record.user_input for x in q.lease(10, 30)] == ["q3"]  # leased ones are not handed out again
    assert q.lease(10, 30) == []
    assert q.depth() == 4  # leased records still count until acked
    for x in first:
        q.ack(x.receipt)
    assert q.depth() == 1


def test_a_full_queue_refuses_the_newest_and_counts_it(make_queue):
    q = make_queue(max_depth=3)
    assert [q.put(rec(i)) for i in range(5)] == [True, True, True, False, False]
    assert q.dropped == 2 and q.depth() == 3
    assert [x.record.user_input for x in q.lease(10, 30)] == ["q0", "q1", "q2"]  # the oldest were kept


def test_an_expired_lease_is_delivered_again_to_another_worker(make_queue):
    # every worker of a queue leases for the same time (scoring.lease_seconds): Redis measures an entry's expiry
    # with the claiming worker's lease, SQLite with the holder's, and the two agree only then
    dead, alive = make_queue(), make_queue()
    dead.put(rec(7))
    (first,) = dead.lease(1, lease_seconds=1.0)  # leases of a second: a host stalling a test for half one passes
    assert alive.lease(1, lease_seconds=1.0) == []  # still leased
    time.sleep(1.2)
    (again,) = alive.lease(1, lease_seconds=1.0)
    assert again.record.trace_id == first.record.trace_id and again.attempts == 2
    alive.ack(again.receipt)
    assert alive.depth() == 0


def test_release_gives_a_record_back_after_its_delay_keeping_its_age(make_queue):
    q = make_queue()
    q.put(rec(1))
    (leased,) = q.lease(1, lease_seconds=30)
    q.release(leased.receipt, delay=1.0)
    assert q.depth() == 1 and q.lease(1, 30) == []  # hidden until due
    time.sleep(1.2)
    (again,) = make_queue().lease(1, lease_seconds=30)
    assert again.record.trace_id == leased.record.trace_id and again.attempts == 2
    assert abs(again.enqueued_at - leased.enqueued_at) < 1e-3


def test_extend_keeps_a_slow_workers_lease_and_says_when_it_was_lost(make_queue):
    slow, other = make_queue(), make_queue()
    slow.put(rec(1))
    (leased,) = slow.lease(1, lease_seconds=1.0)
    for _ in range(3):  # a heartbeat well inside the lease: never delivered elsewhere
        time.sleep(0.5)
        assert slow.extend(leased.receipt, 1.0)
        assert other.lease(1, lease_seconds=1.0) == []
    time.sleep(1.3)  # the heartbeat stopped: the lease expires and another worker takes it
    (taken,) = other.lease(1, lease_seconds=1.0)
    assert taken.record.trace_id == leased.record.trace_id
    assert slow.extend(leased.receipt, 30) is False


def test_puts_from_many_threads_are_each_delivered_once(make_queue):
    q = make_queue(max_depth=1000)

    def put_range(start: int) -> None:
        for i in range(start, start + 50):
            assert q.put(rec(i))

    threads = [threading.Thread(target=put_range, args=(n * 50,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen: list[str] = []
    while batch := q.lease(37, lease_seconds=30):
        seen += [x.record.trace_id for x in batch]
        for x in batch:
            q.ack(x.receipt)
    assert sorted(seen) == [f"{i:032x}" for i in range(200)]
    assert q.depth() == 0 and q.dropped == 0
