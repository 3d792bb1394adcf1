"""The spills a receiver holds records in while Redis is unreachable: bound, order, and what outlives the process."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ragtrace_collector.queue.spill import (
    MEMORY,
    MemorySpill,
    Spill,
    Spilled,
    SpillUnwritable,
    SqliteSpill,
    TieredSpill,
    open_spill,
)

REPO = Path(__file__).resolve().parents[3]


def entry(i: int) -> Spilled:
    return Spilled(f'{{"trace_id": "{i}"}}', repr(1000.0 + i), f"put-{i}")


@pytest.fixture(params=["memory", "file", "file_with_memory_tier"])
def spill(request, tmp_path) -> Spill:
    path = tmp_path / "d" / "spill.sqlite"
    made: Spill = {
        "memory": lambda: MemorySpill(3),
        "file": lambda: SqliteSpill(path, 3),
        "file_with_memory_tier": lambda: TieredSpill(SqliteSpill(path, 3)),
    }[request.param]()
    yield made
    made.close()


def test_first_in_first_out_within_the_bound(spill):
    assert [spill.append(entry(i)) for i in range(5)] == [True, True, True, False, False]
    assert len(spill) == 3
    out = []
    while oldest := spill.oldest():
        out += oldest
        spill.remove(oldest)
    assert out == [entry(0), entry(1), entry(2)]
    assert len(spill) == 0 and spill.append(entry(9))  # room again


def test_removing_an_entry_already_taken_is_a_no_op(spill):
    spill.append(entry(1))
    spill.append(entry(2))
    first = spill.oldest()
    spill.remove(first)
    spill.remove(first)  # another flusher sharing the store took it too
    assert spill.oldest() == [entry(2)] and len(spill) == 1


def test_oldest_reads_a_batch_in_order_and_remove_takes_it_whole(spill):
    for i in range(3):
        spill.append(entry(i))
    assert spill.oldest(2) == [entry(0), entry(1)] and spill.oldest(10) == [entry(0), entry(1), entry(2)]
    spill.remove([entry(1), entry(0)])  # a batch, some of it maybe taken already: the rest goes
    assert spill.oldest(10) == [entry(2)] and len(spill) == 1


def test_a_file_outlives_the_object(tmp_path):
    path = tmp_path / "spill.sqlite"
    first = SqliteSpill(path, 10)
    for i in range(4):
        first.append(entry(i))
    first.close()
    again = SqliteSpill(path, 10)
    assert len(again) == 4 and again.oldest() == [entry(0)]
    again.close()


def test_committed_entries_survive_the_writer_being_killed(tmp_path):
    """Each append is committed before it returns: SIGKILL the writing process, and every acknowledged entry is
    there when the file is opened again."""
    path = tmp_path / "spill.sqlite"
    script = textwrap.dedent(
        f"""
        import sys, time
        from ragtrace_collector.queue.spill import Spilled, SqliteSpill
        spill = SqliteSpill({str(path)!r}, 100000)
        for i in range(100000):
            assert spill.append(Spilled("{{}}", repr(time.time()), f"put-{{i}}"))
            print(i, flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "collector")},
    )
    acknowledged = -1
    assert proc.stdout is not None
    for line in proc.stdout:
        acknowledged = int(line)
        if acknowledged >= 500:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    reopened = SqliteSpill(path, 100000)
    assert len(reopened) >= acknowledged + 1  # every entry the writer saw appended (maybe one more)
    assert [e.put_id for e in reopened.oldest()] == ["put-0"]
    reopened.close()


def test_an_unreadable_file_is_moved_aside_and_a_new_one_started(tmp_path, caplog):
    path = tmp_path / "spill.sqlite"
    path.write_bytes(b"not a database, " * 512)
    with caplog.at_level("ERROR", logger="ragtrace_collector.queue.spill"):
        spill = SqliteSpill(path, 10)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("spill.sqlite.unreadable-")]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"not a database")
    assert str(aside[0]) in caplog.text
    assert spill.append(entry(1)) and len(spill) == 1
    spill.close()


def test_open_spill_names(tmp_path):
    assert isinstance(open_spill(None, 5), MemorySpill)
    assert isinstance(open_spill(MEMORY, 5), MemorySpill)
    made = open_spill(str(tmp_path / "x" / "spill.sqlite"), 5)
    assert isinstance(made, TieredSpill) and made.durable and made.max_records == 5
    assert made.close() == 0


def _lock(path: Path) -> sqlite3.Connection:
    """Another process's write transaction on the spill file: it refuses writes as a full disk would."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_a_file_refusing_writes_holds_entries_in_memory_then_moves_them_in_order(tmp_path, caplog):
    """The file refuses writes (a full disk; here a lock past the timeout): entries wait in memory, one warning
    says so; once the file takes writes again the next append moves them in first, so they outlive the process."""
    path = tmp_path / "spill.sqlite"
    spill = TieredSpill(SqliteSpill(path, 10, timeout=0.05), retry_interval=0.0)
    assert spill.append(entry(0))
    holder = _lock(path)
    with caplog.at_level(logging.WARNING, logger="ragtrace_collector.queue.spill"):
        assert spill.append(entry(1)) and spill.append(entry(2))
    assert [r.getMessage().count("memory") > 0 for r in caplog.records] == [True]
    assert len(spill) == 3 and spill.oldest(10) == [entry(0), entry(1), entry(2)]
    holder.execute("ROLLBACK")
    holder.close()
    assert spill.append(entry(3))
    assert spill.close() == 0  # nothing only in memory
    again = SqliteSpill(path, 10)
    assert again.oldest(10) == [entry(i) for i in range(4)]
    again.close()


def test_the_memory_tier_is_bounded_and_what_it_holds_at_close_is_reported_lost(tmp_path):
    path = tmp_path / "spill.sqlite"
    spill = TieredSpill(SqliteSpill(path, 2, timeout=0.05), retry_interval=0.0)
    holder = _lock(path)
    assert spill.append(entry(0)) and spill.append(entry(1))
    with pytest.raises(SpillUnwritable):  # the file refuses it and memory holds its bound
        spill.append(entry(2))
    spill.remove([entry(0)])  # sent from memory: the locked file is not touched
    assert spill.oldest(10) == [entry(1)]
    assert spill.close() == 1  # still refused at close: the one held in memory is lost, and said so
    holder.execute("ROLLBACK")
    holder.close()


def test_a_file_refusing_writes_is_retried_after_the_interval_not_on_every_append(tmp_path):
    """Each try at a locked file waits out SQLite's timeout: between tries, appends go straight to memory."""
    path = tmp_path / "spill.sqlite"
    spill = TieredSpill(SqliteSpill(path, 100, timeout=0.3), retry_interval=60.0)
    holder = _lock(path)
    assert spill.append(entry(0))  # waits 0.3 s on the lock, then memory
    start = time.monotonic()
    assert all(spill.append(entry(i)) for i in range(1, 20))
    assert time.monotonic() - start < 0.3
    assert len(spill.memory) == 20  # never retried: all in memory
    holder.execute("ROLLBACK")
    holder.close()
    assert spill.close() == 0  # close tries the file once more: it takes them, nothing lost
    again = SqliteSpill(path, 100)
    assert len(again) == 20
    again.close()
