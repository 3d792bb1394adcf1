"""The embedded SQLite queue: bounded, durable across process death, leases that expire."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue import default_queue_url, open_queue
from ragtrace_collector.queue.sqlite import SQLiteQueue


def rec(i: int) -> RagRecord:
    return RagRecord(trace_id=f"{i:032x}", user_input=f"q{i}", response=f"a{i}", retrieved_contexts=[f"c{i}"])


def test_fifo_lease_ack(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=10)
    for i in range(3):
        assert q.put(rec(i))
    assert q.depth() == 3
    leased = q.lease(2, lease_seconds=30)
    assert [lease.record.trace_id for lease in leased] == [f"{0:032x}", f"{1:032x}"]
    assert leased[0].record.context_texts == ["c0"]
    assert all(lease.attempts == 1 for lease in leased)
    # leased records are hidden from other leases but still count in depth
    assert [lease.record.user_input for lease in q.lease(5, 30)] == ["q2"]
    assert q.lease(5, 30) == []
    assert q.depth() == 3
    for lease in leased:
        q.ack(lease.receipt)
    assert q.depth() == 1


def test_full_queue_drops_newest_and_counts(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=2)
    assert q.put(rec(1)) and q.put(rec(2))
    assert q.put(rec(3)) is False
    assert q.dropped == 1 and q.depth() == 2
    # the oldest are kept, the newest was refused
    assert [lease.record.user_input for lease in q.lease(10, 30)] == ["q1", "q2"]
    # leased records still occupy capacity until acked
    assert q.put(rec(4)) is False
    assert q.dropped == 2


def test_expired_lease_is_redelivered(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=10)
    q.put(rec(1))
    first = q.lease(1, lease_seconds=1.0)  # a second: a test process stalled half of one still asserts in time
    assert len(first) == 1 and q.lease(1, 1.0) == []
    time.sleep(1.2)
    again = q.lease(1, lease_seconds=30)
    assert len(again) == 1 and again[0].attempts == 2
    # a stale release (old receipt) does not cut the new lease short
    q.release(first[0].receipt)
    assert q.lease(1, 30) == []
    q.ack(again[0].receipt)
    assert q.depth() == 0


def test_release_with_delay(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=10)
    q.put(rec(1))
    (lease,) = q.lease(1, 30)
    q.release(lease.receipt, delay=0.3)
    assert q.lease(1, 30) == []
    time.sleep(0.35)
    (l2,) = q.lease(1, 30)
    assert l2.attempts == 2 and l2.receipt != lease.receipt


def test_oldest_age(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=10)
    assert q.oldest_age() is None
    q.put(rec(1))
    time.sleep(0.1)
    assert 0.1 <= q.oldest_age() < 5


def test_committed_records_survive_kill_9_and_depth_is_rebuilt(tmp_path):
    """A child puts records, then leases one and is SIGKILLed: all records are there after reopening,
    and the dead child's lease is taken back at once."""
    path = tmp_path / "q.sqlite"
    child = textwrap.dedent(
        f"""
        import os, signal, sys
        from ragtrace_collector.queue.sqlite import SQLiteQueue
        from ragtrace_collector.model.record import RagRecord
        q = SQLiteQueue({str(path)!r}, max_depth=100)
        for i in range(20):
            assert q.put(RagRecord(trace_id=f"{{i:032x}}", user_input=str(i)))
        q.lease(1, lease_seconds=60)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], cwd=str(__import__("pathlib").Path(__file__).parents[3]))
    assert proc.returncode == -9
    q = SQLiteQueue(path, max_depth=100)
    assert q.depth() == 20
    leased = q.lease(100, 30)
    # the dead process's lease (60 s) was taken back at once: all 20 are delivered now
    assert len(leased) == 20 and q.reclaimed == 1
    back = leased[0]
    assert back.record.user_input == "0" and back.attempts == 2


def test_leases_of_live_processes_are_not_taken_back(tmp_path):
    path = tmp_path / "q.sqlite"
    child = textwrap.dedent(
        f"""
        import sys, time
        from ragtrace_collector.queue.sqlite import SQLiteQueue
        from ragtrace_collector.model.record import RagRecord
        q = SQLiteQueue({str(path)!r}, max_depth=100)
        q.put(RagRecord(trace_id="a" * 32))
        assert len(q.lease(1, lease_seconds=60)) == 1
        print("leased", flush=True)
        time.sleep(30)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        cwd=str(__import__("pathlib").Path(__file__).parents[3]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "leased"
        q = SQLiteQueue(path, max_depth=100)
        assert q.lease(10, 30) == [] and q.reclaimed == 0
    finally:
        proc.kill()
        proc.wait()


def test_threads_never_exceed_capacity(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=50)
    accepted = []

    def producer(base):
        for i in range(40):
            accepted.append(q.put(rec(base + i)))

    threads = [threading.Thread(target=producer, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(accepted) == 50 and q.depth() == 50 and q.dropped == 110


def test_two_handles_on_one_file_share_capacity(tmp_path):
    a = SQLiteQueue(tmp_path / "q.sqlite", max_depth=3)
    b = SQLiteQueue(tmp_path / "q.sqlite", max_depth=3)
    assert a.put(rec(1)) and b.put(rec(2)) and a.put(rec(3))
    assert b.put(rec(4)) is False
    assert len(b.lease(10, 30)) == 3 and a.lease(10, 30) == []


def test_open_queue_urls(tmp_path):
    q = open_queue(default_queue_url(tmp_path / "data"), max_depth=7)
    assert isinstance(q, SQLiteQueue) and q.max_depth == 7
    assert (tmp_path / "data" / "queue.sqlite").exists()
    q2 = open_queue(f"sqlite:///{tmp_path}/x.sqlite?synchronous=full", 5)
    assert q2.put(rec(1)) and q2.depth() == 1
    with pytest.raises(ValueError):
        open_queue("ftp://nowhere", 5)
    with pytest.raises(ValueError):
        open_queue(f"sqlite:///{tmp_path}/y.sqlite?bogus=1", 5)
    with pytest.raises(ValueError):
        open_queue(f"sqlite:///{tmp_path}/z.sqlite?synchronous=maybe", 5)


def test_bad_receipt_is_a_clear_error(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite")
    with pytest.raises(ValueError, match="receipt"):
        q.ack("nonsense")


def test_unreadable_row_is_dropped_and_counted_not_redelivered_forever(tmp_path):
    import sqlite3

    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=10)
    q.put(rec(1))
    raw = sqlite3.connect(tmp_path / "q.sqlite")
    raw.execute("INSERT INTO records (record_key, payload, enqueued_at, visible_at) VALUES ('k', '{not json', 0, 0)")
    raw.commit()
    raw.close()
    q.put(rec(2))
    assert q.depth() == 3
    assert [lease.record.user_input for lease in q.lease(10, 30)] == ["q1", "q2"]
    assert q.corrupt == 1 and q.depth() == 2


def test_extend_keeps_a_lease_alive_and_fails_once_lost(tmp_path):
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=10)
    q.put(rec(1))
    (lease,) = q.lease(1, lease_seconds=1.0)
    time.sleep(0.6)
    assert q.extend(lease.receipt, 1.5)
    time.sleep(0.6)
    assert q.lease(1, 30) == []  # would have expired without the extension
    time.sleep(1.2)
    (taken,) = q.lease(1, 30)
    assert q.extend(lease.receipt, 30) is False  # the old delivery's lease is gone
    assert q.extend(taken.receipt, 30) is True


def test_a_previous_process_with_our_pid_counts_as_dead():
    import os
    import socket

    from ragtrace_collector.queue import sqlite as mod

    host = socket.gethostname()
    assert mod._dead_on_this_host(f"{host}:{os.getpid()}:not-this-process", host)
    assert not mod._dead_on_this_host(f"{host}:{os.getpid()}:{mod._PROCESS_NONCE}", host)
    assert not mod._dead_on_this_host(f"other-host:{os.getpid()}:x", host)
    assert not mod._dead_on_this_host("garbage", host)
