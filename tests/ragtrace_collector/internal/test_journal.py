"""The assembly journal: durable appends, group commit, replay up to a torn record, truncation by watermark."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ragtrace_collector.internal.journal import JSON, MARGIN, PROTOBUF, Journal, JournalError, read_segment


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_appends_come_back_on_replay_in_order(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await asyncio.gather(*(journal.append(PROTOBUF, f"req-{i}".encode()) for i in range(50)))
    await journal.append(JSON, b'{"resourceSpans": []}')
    journal.close()
    again = Journal(tmp_path)
    replayed = list(again.replay())
    again.close()
    assert replayed[-1] == (JSON, b'{"resourceSpans": []}')
    assert sorted(p for _, p in replayed[:-1]) == sorted(f"req-{i}".encode() for i in range(50))


async def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await asyncio.gather(*(journal.append(PROTOBUF, b"x" * 1000) for _ in range(200)))
    assert journal.appended == 200 and journal.batches < 200  # group commit
    journal.close()


async def test_a_torn_last_record_ends_its_segment(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    for i in range(3):
        await journal.append(PROTOBUF, f"whole-{i}".encode())
    journal.close()
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
    journal.close()
    assert [p for p in tmp_path.glob("segment-*.log")] == [journal._current.path]


async def test_replayed_segments_are_kept_until_the_watermark_passes_the_replay(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    await journal.append(PROTOBUF, b"left-behind")
    journal.close()
    clock = Clock()
    again = Journal(tmp_path, clock=clock)
    assert list(again.replay()) == [(PROTOBUF, b"left-behind")]
    assert again.truncate(watermark=clock.now) == 0  # replayed spans are in assembly now, first seen now
    assert again.truncate(watermark=clock.now + MARGIN + 1) == 1
    again.close()


async def test_an_append_that_cannot_be_durable_fails(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal._fh.close()  # a file that refuses writes (what a full disk does to the next write)
    with pytest.raises(JournalError, match="cannot journal"):
        await journal.append(PROTOBUF, b"lost?")
    await journal.append(PROTOBUF, b"after")  # a new segment takes appends again
    journal.close()
    again = Journal(tmp_path)
    assert [p for _, p in again.replay()] == [b"after"]
    again.close()


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
    journal.close()
    again = Journal(tmp_path)
    assert list(again.replay()) == []
    again.close()
