"""The SQLite queue on a real full disk (a small tmpfs, filled): puts it refuses are held in memory, in order and
within ``max_depth``, and written once it has room; ``writable`` says when to shed (issue 33, D6)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue.sqlite import SQLiteQueue
from tests.support.full_disk import small_disk


def rec(i: int) -> RagRecord:
    return RagRecord(trace_id=f"{i:032x}", user_input=f"q{i}" * 200, response=f"a{i}", pipeline="p")


def _written(q: SQLiteQueue, timeout: float = 10.0) -> None:
    """Until what ``q`` holds is written (it retries every ``retry_interval``), or fail."""
    deadline = time.monotonic() + timeout
    while not q.write_held():
        assert time.monotonic() < deadline, "the held records were not written once the disk had room"
        time.sleep(0.02)


def test_held_while_full_then_written_in_order(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with small_disk(tmp_path / "disk") as disk:
        q = SQLiteQueue(disk.path / "queue.sqlite", retry_interval=0.05)
        assert q.put(rec(0)) and q.writable
        disk.fill()
        with caplog.at_level(logging.ERROR, logger="ragtrace_collector.queue.sqlite"):
            assert all(q.put(rec(i)) for i in range(1, 40))
        assert not q.writable and q.dropped == 0
        assert q.depth() == 40
        assert len([r for r in caplog.records if "cannot be written" in r.getMessage()]) == 1  # not one per put
        assert not q.write_held()  # still full
        disk.free()
        _written(q)
        assert q.writable and q.depth() == 40
        leased = q.lease(100, 30)
        assert [item.record.trace_id for item in leased] == [f"{i:032x}" for i in range(40)]
        q.close()


def test_held_within_max_depth(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        q = SQLiteQueue(disk.path / "queue.sqlite", max_depth=5, retry_interval=0.05)
        assert q.put(rec(0)) and q.put(rec(1))
        disk.fill()
        assert [q.put(rec(i)) for i in range(2, 7)] == [True, True, True, False, False]
        assert q.dropped == 2 and q.depth() == 5
        disk.free()
        _written(q)
        assert len(q.lease(10, 30)) == 5
        q.close()


def test_held_records_written_at_close_or_counted_lost(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        path = disk.path / "queue.sqlite"
        q = SQLiteQueue(path, retry_interval=60)
        disk.fill()
        assert q.put(rec(1)) and q.put(rec(2)) and not q.writable
        disk.free()
        q.close()  # not waiting for the next try: the disk has room now
        again = SQLiteQueue(path)
        assert again.depth() == 2
        disk.fill()
        assert again.put(rec(3)) and not again.writable
        again.close()  # still full: lost, and counted
        assert again.dropped == 1
        disk.free()
