"""The assembly journal: what OTLP acknowledged survives a ``kill -9`` while its trace is still being assembled.

A receiver answers 200 once a request's spans are in assembly, and assembly is memory: a trace waits there for
its root span and a grace period (seconds) before it becomes a record on the durable queue. Without a journal,
a crash in that window loses every trace the exporters were told was delivered (184 of 399 under kills every
3-6 s at 20 requests/s). The OpenTelemetry Collector's persistent queue keeps what it acknowledged; so does this.

* **Append before the 200.** Each request body (decompressed, as received) is appended to the current segment
  file and made durable (``fsync``) before the receiver answers. Appends arriving while a write is under way
  are written and synced together by one writer thread (group commit): one ``fsync`` per batch, not per request.
  An append that cannot be made durable (a full disk) fails, and the receiver answers 503 so the client retries.
* **Replay on start.** The segments a previous process left are read back (a torn last record, from a crash
  mid-write, ends its segment) and their requests ingested again before the receivers open.
* **Truncate once queued.** A segment is deleted once nothing appended to it can still be waiting outside the
  queue: the service passes the *watermark*, the earliest time a span of an unsettled trace (in assembly, held
  for pairing, or built but not yet queued) can have been added (:meth:`Journal.truncate`). A trace queued
  twice (replayed after it was queued, before its segment went) is scored once: the results store and the
  worker skip metrics already stored for a record key.

Record format, little-endian: payload length (u32), CRC-32 of kind + payload (u32), kind (u8: 0 protobuf,
1 JSON trace requests; 4 protobuf, 5 JSON log requests, whose GenAI events wait in assembly like spans), payload. Segment files are ``<data_dir>/journal/segment-<n>.log``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import queue
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ragtrace_collector.internal.component import Component

log = logging.getLogger(__name__)

PROTOBUF, JSON = 0, 1
HEARTBEAT = 2  # an empty record :meth:`Journal.probe` writes to learn whether the disk takes writes again
_ROTATE = 3  # not a record: asks the writer to close the current segment (so truncation can delete it)
LOGS_PROTOBUF, LOGS_JSON = 4, 5  # OTLP log requests (their GenAI events are acknowledged like spans)
_HEADER = struct.Struct("<IIB")
_MAX_RECORD = 256 * 1024 * 1024  # a length beyond any request: a torn or foreign header
MARGIN = 0.5  # seconds: an acknowledged append reaches assembly well within this
SHUTDOWN_SECONDS = 10.0  # the writer's last batch, when a shutdown gives no bound


class JournalError(OSError):
    """An append could not be made durable (the request must not be acknowledged)."""


@dataclass
class _Segment:
    number: int
    path: Path
    closed_at: float | None = None  # clock time it stopped taking appends (None: the current one)
    size: int = 0


@dataclass
class _Append:
    kind: int
    payload: bytes
    done: Callable[[BaseException | None], None]


def _segment_path(directory: Path, number: int) -> Path:
    return directory / f"segment-{number:012d}.log"


def _checksum(kind: int, payload: bytes) -> int:
    """CRC-32 of the kind byte then the payload, without copying the payload to prepend the byte."""
    return zlib.crc32(payload, _KIND_CRC[kind])


_KIND_CRC = tuple(zlib.crc32(bytes([kind])) for kind in range(256))  # the CRC of each kind byte (a u8)


def read_segment(path: Path) -> Iterator[tuple[int, bytes]]:
    """The ``(kind, payload)`` records of a segment, up to the first torn or corrupt one."""
    with open(path, "rb") as fh:
        while True:
            header = fh.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            length, crc, kind = _HEADER.unpack(header)
            if length > _MAX_RECORD:
                return
            payload = fh.read(length)
            if len(payload) < length or _checksum(kind, payload) != crc:
                return
            yield kind, payload


class Journal(Component):
    """Append-only segments in ``directory`` (see the module docstring). Appends come from the event loop
    (:meth:`append`), truncation from the service's sweep; one writer thread does the file work. A component ready
    once built (replay comes before the receivers start); :meth:`shutdown` writes what was appended, then closes."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        segment_bytes: int = 16 * 1024 * 1024,
        segment_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sync: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self.clock = clock
        self.sync = sync
        found = sorted(self.directory.glob("segment-*.log"))
        self._left: list[Path] = found  # a previous process's segments, replayed by replay()
        numbers = [int(p.stem.split("-")[1]) for p in found]
        self._segments: list[_Segment] = []  # closed segments, oldest first, then the current one
        self._next = max(numbers, default=0) + 1
        self._current = self._open_segment()
        self._fh = _open_for_appends(self._current.path)
        self._opened_at = self.clock()
        self._pending: queue.SimpleQueue[_Append | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # segments list: the writer rotates, the sweep truncates
        self._writer = threading.Thread(target=self._write_loop, name="ragtrace-journal", daemon=True)
        self._writer.start()
        self.appended = 0  # records made durable (for the metrics)
        self.batches = 0  # fsyncs
        # False from a failed write until one succeeds: the receivers refuse requests meanwhile (not ready)
        self.writable = True
        self._probing = False
        self._rotating = False
        self._last_append_at = -math.inf  # clock time of the last durable append
        self._shut = False

    # --- the hot path ---
    async def append(self, kind: int, payload: bytes) -> None:
        """Return once ``payload`` is durable; :class:`JournalError` when it cannot be."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, error)

        self._pending.put(_Append(kind, payload, done))
        await future

    def probe(self) -> None:
        """While appends fail, try a heartbeat record (called each sweep: nobody appends while requests are
        refused, so nothing else would notice the disk has room again). Returns at once."""
        if self.writable or self._probing:
            return
        self._probing = True

        def done(error: BaseException | None) -> None:
            self._probing = False

        self._pending.put(_Append(HEARTBEAT, b"", done))

    # --- start ---
    def replay(self) -> Iterator[tuple[int, bytes]]:
        """The records a previous process left, oldest first; their segments are kept (as closed now) until
        :meth:`truncate` lets them go."""
        left, self._left = self._left, []
        now = self.clock()
        for path in left:
            yield from ((kind, payload) for kind, payload in read_segment(path) if kind != HEARTBEAT)
            with self._lock:
                self._segments.insert(len(self._segments) - 1, _Segment(-1, path, closed_at=now))

    # --- truncation ---
    def truncate(self, watermark: float) -> int:
        """Delete the closed segments whose appends all came before ``watermark`` (nothing appended to them can
        still be waiting outside the queue); how many were deleted. :data:`MARGIN` covers the moment between an
        append being durable and its spans reaching assembly."""
        self._close_idle_current(watermark)
        with self._lock:
            gone = [s for s in self._segments if s.closed_at is not None and s.closed_at < watermark - MARGIN]
            self._segments = [s for s in self._segments if s not in gone]
        for segment in gone:
            try:
                segment.path.unlink()
            except FileNotFoundError:
                pass
        return len(gone)

    def _close_idle_current(self, watermark: float) -> None:
        """Traffic that stops leaves its last appends in the current segment, which is never deleted: once those
        are behind the watermark too, have the writer close it (so the next truncation can delete it)."""
        if self._rotating or self._current.size == 0 or self._last_append_at >= watermark - MARGIN:
            return
        self._rotating = True

        def done(error: BaseException | None) -> None:
            self._rotating = False

        self._pending.put(_Append(_ROTATE, b"", done))

    def segments(self) -> int:
        with self._lock:
            return len(self._segments)

    def shutdown(self, timeout: float | None = None) -> None:
        """Have the writer write and sync every append already made, then close the segment, within ``timeout``
        seconds (None: :data:`SHUTDOWN_SECONDS`). A writer still syncing then (a stalled disk) finishes alone and
        closes the file itself; this raises, reporting it (what it holds was not acknowledged yet)."""
        if self._shut:
            return
        self._shut = True
        self._pending.put(None)  # after every append queued so far: they are written first
        bound = SHUTDOWN_SECONDS if timeout is None else max(0.0, timeout)
        self._writer.join(bound)
        if self._writer.is_alive():
            raise JournalError(f"the journal writer is still syncing {self._current.path} after {bound:g} s")

    # --- the writer thread ---
    def _open_segment(self) -> _Segment:
        segment = _Segment(self._next, _segment_path(self.directory, self._next))
        self._next += 1
        self._segments.append(segment)
        return segment

    def _write_loop(self) -> None:
        try:
            self._write_until_shutdown()
        finally:  # the writer closes the file it writes: a shutdown that stopped waiting never closes it under it
            self._fh.close()

    def _write_until_shutdown(self) -> None:
        while True:
            first = self._pending.get()
            if first is None:
                return
            batch = [first]
            while True:  # everything that arrived meanwhile goes in the same write and fsync
                try:
                    more = self._pending.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._write(batch)
                    return
                batch.append(more)
            self._write(batch)

    def _write(self, batch: list[_Append]) -> None:
        rotate = [a for a in batch if a.kind == _ROTATE]
        if rotate:
            batch = [a for a in batch if a.kind != _ROTATE]
            if not batch:
                self._rotate_now()
                for a in rotate:
                    a.done(None)
                return
        error: BaseException | None = None
        try:
            self._rotate_if_due()
            parts: list[bytes] = []
            for a in batch:  # one copy of each payload, into the batch's one write
                parts += (_HEADER.pack(len(a.payload), _checksum(a.kind, a.payload), a.kind), a.payload)
            data = b"".join(parts)
            self._fh.write(data)
            if self.sync:
                os.fsync(self._fh.fileno())
            self._current.size += len(data)
            self.appended += sum(a.kind != HEARTBEAT for a in batch)
            self.batches += 1
            self.writable = True
            self._last_append_at = self.clock()
        except (OSError, ValueError) as exc:  # ValueError: the file could not be reopened after an earlier failure
            error = JournalError(f"cannot journal at {self._current.path}: {getattr(exc, 'strerror', None) or exc}")
            self.writable = False
            self._recover()
        for a in (*batch, *rotate):
            a.done(error)

    def _rotate_now(self) -> None:
        """Close the current segment if it holds anything (the writer thread only)."""
        if self._current.size == 0:
            return
        try:
            self._fh.close()
        except OSError:
            pass
        now = self.clock()
        with self._lock:
            self._current.closed_at = now
            self._current = self._open_segment()
        try:
            self._fh = _open_for_appends(self._current.path)
        except OSError:
            log.warning("cannot open a new journal segment at %s", self._current.path)
        self._opened_at = now

    def _rotate_if_due(self) -> None:
        now = self.clock()
        if self._current.size < self.segment_bytes and now - self._opened_at < self.segment_seconds:
            return
        if self._current.size == 0:
            self._opened_at = now
            return
        self._fh.close()
        with self._lock:
            self._current.closed_at = now
            self._current = self._open_segment()
        self._fh = _open_for_appends(self._current.path)
        self._opened_at = now

    def _recover(self) -> None:
        """After a failed write the segment may end in part of a record: cut it back to what was durable (replay
        stops at a torn record, so appends after it would be lost); shrinking a file works on a full disk."""
        try:
            self._fh.truncate(self._current.size)
        except (OSError, ValueError):
            try:
                self._fh.close()
            except OSError:
                pass
            with self._lock:
                self._current.closed_at = self.clock()
                self._current = self._open_segment()
            try:
                self._fh = _open_for_appends(self._current.path)
            except OSError:
                log.warning("cannot open a new journal segment at %s", self._current.path)
            self._opened_at = self.clock()


def _open_for_appends(path: Path) -> BinaryIO:
    """The segment file, unbuffered: held open across appends, closed on rotation and by :meth:`Journal.shutdown`."""
    return open(path, "ab", buffering=0)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
