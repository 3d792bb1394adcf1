"""The assembly journal: durable appends, group commit, replay up to a torn record, truncation by watermark."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from ragtrace_collector.internal.component import Lifecycle
from ragtrace_collector.internal.journal import JSON, MARGIN, PROTOBUF, Journal, JournalError, read_segment
from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support import span_fixtures as F
from tests.support.receiver_stack import Stack

PB = {"Content-Type": "application/x-protobuf"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_appends_come_back_on_replay_in_order(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await asyncio.gather(*(journal.append(PROTOBUF, f"req-{i}".encode()) for i in range(50)))
    await journal.append(JSON, b'{"resourceSpans": []}')
    journal.shutdown()
    again = Journal(tmp_path)
    replayed = list(again.replay())
    again.shutdown()
    assert replayed[-1] == (JSON, b'{"resourceSpans": []}')
    assert sorted(p for _, p in replayed[:-1]) == sorted(f"req-{i}".encode() for i in range(50))


async def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await asyncio.gather(*(journal.append(PROTOBUF, b"x" * 1000) for _ in range(200)))
    assert journal.appended == 200 and journal.batches < 200  # group commit
    journal.shutdown()


async def test_a_torn_last_record_ends_its_segment(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    for i in range(3):
        await journal.append(PROTOBUF, f"whole-{i}".encode())
    journal.shutdown()
    (segment,) = [p for p in tmp_path.glob("segment-*.log") if p.stat().st_size]
    with open(segment, "ab") as fh:  # a crash mid-write: a header and half a payload
        fh.write(b"\x10\x00\x00\x00\x00\x00\x00\x00\x00half")
    assert [p for _, p in read_segment(segment)] == [b"whole-0", b"whole-1", b"whole-2"]
    corrupt = bytearray(segment.read_bytes())
    corrupt[12] ^= 0xFF  # a flipped byte in the first payload: its CRC fails, nothing after it is trusted
    segment.write_bytes(bytes(corrupt))
    assert list(read_segment(segment)) == []


async def test_segments_rotate_and_go_once_the_watermark_passes(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path, segment_seconds=1.0, clock=clock)
    await journal.append(PROTOBUF, b"a")
    clock.now += 2
    await journal.append(PROTOBUF, b"b")  # rotates: the first segment closes at 1002
    clock.now += 2
    await journal.append(PROTOBUF, b"c")  # the second closes at 1004
    assert journal.segments() == 3
    assert journal.truncate(watermark=1002.0) == 0  # a trace first seen at 1002 may have spans in the first
    assert journal.truncate(watermark=1002.0 + MARGIN + 0.1) == 1
    assert journal.truncate(watermark=10_000.0) == 1  # the current one is not deleted while it takes appends...
    deadline = asyncio.get_running_loop().time() + 5
    while journal.segments() < 2 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert journal.truncate(watermark=10_000.0) == 1  # ...but closed once idle behind the watermark, then deleted
    journal.shutdown()
    assert [p for p in tmp_path.glob("segment-*.log")] == [journal._current.path]


async def test_replayed_segments_are_kept_until_the_watermark_passes_the_replay(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await journal.append(PROTOBUF, b"left-behind")
    journal.shutdown()
    clock = Clock()
    again = Journal(tmp_path, clock=clock)
    assert list(again.replay()) == [(PROTOBUF, b"left-behind")]
    assert again.truncate(watermark=clock.now) == 0  # replayed spans are in assembly now, first seen now
    assert again.truncate(watermark=clock.now + MARGIN + 1) == 1
    again.shutdown()


async def test_an_append_that_cannot_be_durable_fails(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal._fh.close()  # a file that refuses writes (what a full disk does to the next write)
    with pytest.raises(JournalError, match="cannot journal"):
        await journal.append(PROTOBUF, b"lost?")
    await journal.append(PROTOBUF, b"after")  # a new segment takes appends again
    journal.shutdown()
    again = Journal(tmp_path)
    assert [p for _, p in again.replay()] == [b"after"]
    again.shutdown()


async def test_an_idle_current_segment_is_closed_and_then_deleted(tmp_path: Path) -> None:
    """Traffic that stops must not leave its last appends for ever (a crash would replay them again)."""
    clock = Clock()
    journal = Journal(tmp_path, segment_seconds=3600, clock=clock)
    await journal.append(PROTOBUF, b"last")
    assert journal.truncate(watermark=clock.now) == 0  # just appended: kept
    clock.now += 10
    journal.truncate(watermark=clock.now)  # asks the writer to close it
    deadline = asyncio.get_running_loop().time() + 5
    while journal.segments() < 2 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    clock.now += 1
    assert journal.truncate(watermark=clock.now) == 1
    journal.shutdown()
    again = Journal(tmp_path)
    assert list(again.replay()) == []
    again.shutdown()


class StallingClock:
    """The writer's clock, which holds the writer thread once armed: what a disk that stopped answering mid-batch
    does to it (the append waits, undurable)."""

    def __init__(self) -> None:
        self.armed = False
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> float:
        if self.armed and threading.current_thread().name == "ragtrace-journal":
            self.held.set()
            self.release.wait(30)
        return time.monotonic()


async def test_a_stalled_writer_is_reported_and_stops_no_other_component(tmp_path: Path) -> None:
    """A request over a real socket waits on a stalled journal: the receiver still stops (its grace), the journal's
    shutdown is bounded and reported, the store after it still closes; once the disk answers, the writer finishes the
    append and closes the file itself, and the append replays."""
    clock = StallingClock()
    journal = Journal(tmp_path / "journal", clock=clock)
    stack = Stack(journal=journal)
    store = ResultsStore(tmp_path / "results.sqlite")
    receiver = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0, grace_seconds=0.2)
    parts = Lifecycle()
    await parts.start("results store", store)
    await parts.start("assembly journal", journal)
    await parts.start("otlp/http receiver", receiver)
    _, request = F.to_request(F.ragtrace_shaped())
    body = request.SerializeToString()
    clock.armed = True

    async def post() -> int:
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"http://127.0.0.1:{receiver.port}/v1/traces", data=body, headers=PB) as r,
        ):
            return r.status

    sending = asyncio.create_task(post())
    try:
        assert await asyncio.to_thread(clock.held.wait, 10)  # the request's append is with the stalled writer
        started = time.monotonic()
        failures = await parts.shutdown(1.5)
        assert time.monotonic() - started < 1.5 + 1.5
        assert [f.component for f in failures] == ["assembly journal"]
        assert "still syncing" in str(failures[0])
        with pytest.raises(sqlite3.ProgrammingError):
            store.metrics_done("k")  # closed after the journal
        with pytest.raises(aiohttp.ClientError):
            await sending  # never acknowledged: its connection closed after the grace
    finally:
        clock.release.set()
    deadline = time.monotonic() + 10
    while journal.appended < 1:  # the writer makes it durable once the disk answers
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    again = Journal(tmp_path / "journal")
    assert list(again.replay()) == [(PROTOBUF, body)]  # durable after all: a restart ingests it once more
    again.shutdown()
