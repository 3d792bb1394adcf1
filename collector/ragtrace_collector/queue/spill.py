"""Where a receiver keeps sampled records while Redis is unreachable: a bounded FIFO, in a file or in memory.

Why a file by default: a receiver restarted or killed during a Redis outage (a deploy, an OOM kill, a node
drained) would otherwise lose every record it was holding; the OpenTelemetry Collector's persistent sending
queue (``file_storage``) answers the same need. :class:`SqliteSpill` commits each record before ``append``
returns (SQLite WAL, ``synchronous=NORMAL``: survives the process dying at any point), and whoever opens the
file next, this receiver restarted or another sharing its data directory, sends them on.

A file that refuses writes (a full disk, a lock held past the timeout) does not lose what arrives meanwhile:
:class:`TieredSpill` holds it in memory, bounded, and moves it into the file as soon as the file takes writes
again (what is still only in memory when the process stops is lost, and counted).

Several processes may share one file: each entry keeps the idempotency key of its put
(:class:`ragtrace_collector.queue.redis.RedisStreamQueue` refuses a key it has already seen for an hour), so
two flushers sending the same oldest entry enqueue it once.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MEMORY = "memory"  # the ``queue.spill`` value that keeps held records in process memory


@dataclass(frozen=True)
class Spilled:
    """One record waiting for Redis: its JSON, when it was put (``repr(time.time())``) and its put's key."""

    payload: str
    enqueued_at: str
    put_id: str


class SpillUnwritable(Exception):
    """The spill cannot take a change now (a full disk, a file locked past the timeout): what was held stays held."""


class Spill(ABC):
    """A bounded FIFO of :class:`Spilled` records, safe to call from several threads.

    ``append`` keeps an entry unless ``max_records`` are held (``False``: the caller counts it shed); ``append``
    and ``remove`` raise :class:`SpillUnwritable` when the store refuses the change (nothing is then changed);
    ``oldest`` returns up to ``limit`` of the oldest entries, oldest first, without taking them; ``remove``
    takes entries once they reached Redis (an entry another process sharing the store took first is skipped);
    ``len`` is the entries held.
    ``durable`` says whether held entries outlive the process; ``close`` releases the store and returns how
    many held entries it lost (those only in memory: all of them where not ``durable``).
    """

    durable: bool = False

    def __init__(self, max_records: int) -> None:
        self.max_records = int(max_records)

    @abstractmethod
    def append(self, entry: Spilled) -> bool: ...

    @abstractmethod
    def oldest(self, limit: int = 1) -> list[Spilled]: ...

    @abstractmethod
    def remove(self, entries: Sequence[Spilled]) -> None: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def close(self) -> int: ...


class MemorySpill(Spill):
    """Held in this process: lost if it stops before Redis returns (counted as shed at ``close``)."""

    def __init__(self, max_records: int) -> None:
        super().__init__(max_records)
        self._entries: deque[Spilled] = deque()
        self._lock = threading.Lock()

    def append(self, entry: Spilled) -> bool:
        with self._lock:
            if len(self._entries) >= self.max_records:
                return False
            self._entries.append(entry)
            return True

    def oldest(self, limit: int = 1) -> list[Spilled]:
        with self._lock:
            return [self._entries[k] for k in range(min(limit, len(self._entries)))]

    def remove(self, entries: Sequence[Spilled]) -> None:
        with self._lock:
            for entry in entries:
                if self._entries and self._entries[0] is entry:
                    self._entries.popleft()
                else:
                    try:
                        self._entries.remove(entry)
                    except ValueError:
                        pass

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> int:
        with self._lock:
            lost = len(self._entries)
            self._entries.clear()
            return lost


_SCHEMA = """
CREATE TABLE IF NOT EXISTS spilled (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    payload     TEXT NOT NULL,
    enqueued_at TEXT NOT NULL,
    put_id      TEXT NOT NULL UNIQUE
);
"""


class SqliteSpill(Spill):
    """Held in one SQLite file (created with its directory): survives the process; shareable between processes.

    A file that is not a readable spill (truncated, overwritten) is moved aside to ``<name>.unreadable-<unix
    time>`` with an error naming it, and a new one is started: the receiver keeps running, and what the old
    file held can still be recovered by hand.
    """

    durable = True

    def __init__(self, path: str | Path, max_records: int, timeout: float = 5.0) -> None:
        super().__init__(max_records)
        self.timeout = timeout  # how long a write waits on another process's lock before it is refused
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            self.path.rename(aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            log.error("redis spill file %s is unreadable (%s): moved to %s, starting a new one", self.path, exc, aside)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            db.execute("SELECT COUNT(*) FROM spilled").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def append(self, entry: Spilled) -> bool:
        with self._lock:
            try:
                cur = self._db.execute(
                    "INSERT INTO spilled (payload, enqueued_at, put_id) "
                    "SELECT ?, ?, ? WHERE (SELECT COUNT(*) FROM spilled) < ?",
                    (entry.payload, entry.enqueued_at, entry.put_id, self.max_records),
                )
            except sqlite3.OperationalError as exc:  # disk full, locked past the timeout, I/O error
                raise SpillUnwritable(f"{self.path}: {exc}") from exc
            return cur.rowcount == 1

    def oldest(self, limit: int = 1) -> list[Spilled]:
        with self._lock:
            rows = self._db.execute(
                "SELECT payload, enqueued_at, put_id FROM spilled ORDER BY id LIMIT ?", (limit,)
            ).fetchall()
        return [Spilled(*row) for row in rows]

    def remove(self, entries: Sequence[Spilled]) -> None:
        with self._lock:  # one transaction: one commit for the batch
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise SpillUnwritable(f"{self.path}: {exc}") from exc
            try:
                self._db.executemany("DELETE FROM spilled WHERE put_id = ?", [(e.put_id,) for e in entries])
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self._rollback()  # a full disk may already have rolled it back
                raise SpillUnwritable(f"{self.path}: {exc}") from exc
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM spilled").fetchone()[0])

    def close(self) -> int:
        with self._lock:
            self._db.close()
        return 0


class TieredSpill(Spill):
    """A file spill with a bounded memory tier for the time it refuses writes.

    Why: Redis down and the spill's disk full at once would otherwise shed every record until one of them
    recovers. While the file refuses writes, entries wait in memory (up to the same ``max_records``). The file
    is tried again after ``retry_interval`` seconds, or ten times as long as the last try took (a try may wait
    out the file's lock timeout); the first append it takes moves the memory tier in first, oldest first, so
    order and durability come back together. ``oldest`` lists the file's entries, then memory's; an entry sent
    from memory is removed there without touching the file. Only when memory is full too does ``append`` raise
    :class:`SpillUnwritable`.
    """

    durable = True

    def __init__(self, file: Spill, retry_interval: float = 1.0) -> None:
        super().__init__(file.max_records)
        self.file = file
        self.memory = MemorySpill(file.max_records)
        self.retry_interval = retry_interval
        self._retry_at = 0.0
        self._next_warning = 0.0
        self._lock = threading.Lock()

    def append(self, entry: Spilled) -> bool:
        with self._lock:
            if time.monotonic() >= self._retry_at:
                tried = time.monotonic()
                try:
                    self._move_in_locked()
                    return self.file.append(entry)
                except SpillUnwritable as exc:
                    self._refused_locked(exc, time.monotonic() - tried)
            if not self.memory.append(entry):
                raise SpillUnwritable(f"the spill refuses writes and its memory tier holds {len(self.memory)}")
            return True

    def _move_in_locked(self) -> None:
        """The memory tier into the file, oldest first (raises :class:`SpillUnwritable` as soon as it refuses)."""
        while waiting := self.memory.oldest(100):
            for k, entry in enumerate(waiting):
                if not self.file.append(entry):  # the file is full: the rest stays in memory
                    self.memory.remove(waiting[:k])
                    return
            self.memory.remove(waiting)

    def _refused_locked(self, exc: SpillUnwritable, took: float) -> None:
        # A try that waited on a lock is spaced out more, so appends spend at most ~10% of their time on it.
        self._retry_at = time.monotonic() + max(self.retry_interval, 10 * took)
        if time.monotonic() >= self._next_warning:  # once, then at most once a minute while it lasts
            self._next_warning = time.monotonic() + 60.0
            log.warning(
                "spill cannot be written (%s): holding records in memory (up to %d) until it can", exc, self.max_records
            )

    def oldest(self, limit: int = 1) -> list[Spilled]:
        with self._lock:
            out = self.file.oldest(limit)
            return out + self.memory.oldest(limit - len(out)) if len(out) < limit else out

    def remove(self, entries: Sequence[Spilled]) -> None:
        with self._lock:
            held = set(self.memory.oldest(len(self.memory)))
            self.memory.remove([e for e in entries if e in held])
            rest = [e for e in entries if e not in held]
            if rest:
                self.file.remove(rest)

    def __len__(self) -> int:
        with self._lock:
            return len(self.file) + len(self.memory)

    def close(self) -> int:
        """Move the memory tier into the file if it takes writes now; what stays only in memory is lost."""
        with self._lock:
            if len(self.memory):
                try:
                    self._move_in_locked()
                except SpillUnwritable as exc:
                    log.warning("spill cannot be written at close (%s)", exc)
            return self.file.close() + self.memory.close()


def open_spill(where: str | None, max_records: int) -> Spill:
    """The spill named by ``queue.spill``: a file path (with a memory tier for when it refuses writes), or
    :data:`MEMORY` (also for ``None``)."""
    if where is None or where == MEMORY:
        return MemorySpill(max_records)
    return TieredSpill(SqliteSpill(where, max_records))
