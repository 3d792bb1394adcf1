"""The embedded durable queue: one SQLite file in WAL mode.

Why SQLite: it ships with Python, a WAL-mode commit costs tens of microseconds (no fsync per
commit with ``synchronous=NORMAL``), and a committed row survives the process being killed -9.

Semantics (see :class:`ragtrace_collector.queue.base.RecordQueue`):

* **Accepted means committed.** :meth:`SQLiteQueue.put` inserts and commits in one short
  transaction before it returns ``True``; the capacity check happens inside that same statement,
  so concurrent writers (even from another process on the same file) cannot overshoot it.
  With the default ``synchronous=NORMAL`` a commit survives the process dying at any point;
  only an operating-system crash or power loss can lose the last commits. Pass
  ``?synchronous=full`` in the URL to fsync every commit and survive those too.
* **Leases expire.** Leasing stamps each row with a fresh token and hides it until
  ``now + lease_seconds``; a worker killed before acking simply lets the lease lapse and the
  row becomes visible again. Rows also record the leasing process (host, pid): a process
  restarted after a kill -9 takes back the leases of dead processes of its host at its first
  lease instead of waiting them out.
* **A full disk loses nothing accepted.** A put the file refuses (a full disk, an I/O error, a lock held past
  the timeout) is held in memory, in order, up to ``max_depth`` records with those in the file; ``writable`` is
  then ``False`` so the collector refuses new requests (what is held is bounded by what assembly held), and the
  file is tried again every ``retry_interval`` seconds (or ten times as long as the last try took), by the next
  put or :meth:`SQLiteQueue.write_held`. It logs once a minute while that lasts. What is still held when the
  queue closes is lost, counted in ``dropped`` (the same approach as :class:`ragtrace_collector.queue.spill.
  TieredSpill`, whose memory tier this reuses).
* ``extend`` (beyond the base interface) renews a lease while its record is still being scored.
* ``ack`` deletes by row id (whoever holds the lease: the result is recorded either way);
  ``release`` only acts when the receipt's token still holds the lease, so a stale release
  cannot cut short another worker's lease.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue.base import Leased, QueueUnwritable, RecordQueue
from ragtrace_collector.queue.spill import MemorySpill, Spilled

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    record_key  TEXT NOT NULL,
    payload     TEXT NOT NULL,
    enqueued_at REAL NOT NULL,
    visible_at  REAL NOT NULL,
    lease_token TEXT,
    lease_owner TEXT,
    attempts    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_visible ON records (visible_at, id);
CREATE TABLE IF NOT EXISTS queue_depth (one INTEGER PRIMARY KEY CHECK (one = 1), n INTEGER NOT NULL);
INSERT OR IGNORE INTO queue_depth (one, n) SELECT 1, COUNT(*) FROM records;
CREATE TRIGGER IF NOT EXISTS records_depth_up AFTER INSERT ON records
    BEGIN UPDATE queue_depth SET n = n + 1 WHERE one = 1; END;
CREATE TRIGGER IF NOT EXISTS records_depth_down AFTER DELETE ON records
    BEGIN UPDATE queue_depth SET n = n - 1 WHERE one = 1; END;
"""

_SYNCHRONOUS = {"off", "normal", "full", "extra"}
_PROCESS_NONCE = uuid.uuid4().hex[:12]  # tells this process from an earlier one with the same pid


class SQLiteQueue(RecordQueue):
    """A bounded, durable, at-least-once record queue in one SQLite file.

    ``dropped`` counts the puts this process refused because the queue was full (exported as
    ``ragtrace_queue_dropped_total``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_depth: int = 10000,
        synchronous: str = "normal",
        retry_interval: float = 1.0,
    ) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        synchronous = synchronous.lower()
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, got {synchronous!r}")
        self.path = str(path)
        self.max_depth = int(max_depth)
        self._dropped = 0
        self.corrupt = 0  # unreadable rows dropped at lease time
        self.retry_interval = retry_interval  # how often a file that refused writes is tried again
        self._held = MemorySpill(self.max_depth)  # puts the file refused, oldest first, until it takes writes
        self._retry_at = 0.0  # time.monotonic() before which a file that refused writes is not tried again
        self._next_warning = 0.0
        self._lock = threading.Lock()
        # One connection guarded by a lock: the callers are the receiver (event loop), the worker
        # and the /metrics scrape thread, all short statements.
        try:
            self._db = self._open(synchronous)
        except (OSError, sqlite3.OperationalError) as exc:  # (a file that is not SQLite: its own error)
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise QueueUnwritable(f"cannot write the queue at {self.path}: {cause}") from exc
        self._closed = False
        # Who holds a lease: host and pid, so a restarted process can take back at once the
        # leases of a process on this host that died (kill -9) instead of waiting them out.
        self._host = socket.gethostname()
        self._owner = f"{self._host}:{os.getpid()}:{_PROCESS_NONCE}"
        self._reclaimed_once = False
        self.reclaimed = 0  # leases taken back from dead processes

    def _open(self, synchronous: str) -> sqlite3.Connection:
        """Connect and create the schema: a directory or file that cannot be written fails here, at start."""
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            db.execute("PRAGMA busy_timeout=30000")
            try:
                db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
                columns = {row[1] for row in db.execute("PRAGMA table_info(records)")}
                if "lease_owner" not in columns:  # a file from before lease owners were recorded
                    db.execute("ALTER TABLE records ADD COLUMN lease_owner TEXT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except BaseException:
            db.close()
            raise
        return db

    # -- producer side ----------------------------------------------------------------------
    def put(self, record: RagRecord) -> bool:
        entry = Spilled(record.model_dump_json(exclude_defaults=True), repr(time.time()), record.key)
        with self._lock:
            if len(self._held) and not self._write_held_locked():
                return self._hold_locked(entry)  # keeps the order: nothing overtakes what waits
            tried = time.monotonic()
            try:
                accepted = self._insert_locked(entry)
            except sqlite3.OperationalError as exc:  # a full disk, an I/O error, locked past the timeout
                self._refused_locked(exc, time.monotonic() - tried)
                return self._hold_locked(entry)
            if not accepted:
                self._dropped += 1
        return accepted

    @property
    def writable(self) -> bool:
        """``False`` while records the file refused wait in memory (read without the lock: the event loop asks)."""
        return not len(self._held)

    def write_held(self) -> bool:
        """Write what waits in memory if the file takes writes again (tried at most every ``retry_interval``);
        ``True`` when nothing waits any more. The service's sweep calls it while puts are refused upstream."""
        with self._lock:
            return not len(self._held) or self._write_held_locked()

    def _insert_locked(self, entry: Spilled) -> bool:
        """One record in, unless the queue is full (checked in the same statement)."""
        enqueued_at = float(entry.enqueued_at)
        cur = self._db.execute(
            "INSERT INTO records (record_key, payload, enqueued_at, visible_at) "
            "SELECT ?, ?, ?, ? WHERE (SELECT n FROM queue_depth WHERE one = 1) < ?",
            (entry.put_id, entry.payload, enqueued_at, enqueued_at, self.max_depth),
        )
        return cur.rowcount == 1

    def _hold_locked(self, entry: Spilled) -> bool:
        """Keep a record the file refused, in memory, within ``max_depth`` counting the file's; else drop it."""
        try:
            stored = self._stored_depth_locked()
        except sqlite3.Error:
            stored = 0  # the file cannot even be read: memory's own bound (max_depth) still holds
        if stored + len(self._held) >= self.max_depth or not self._held.append(entry):
            self._dropped += 1
            return False
        return True

    def _write_held_locked(self) -> bool:
        """Move what waits in memory into the file, oldest first, a batch per transaction; ``False`` (and the
        rest still held) when it is not yet time to try again or the file refuses."""
        if time.monotonic() < self._retry_at:
            return False
        tried = time.monotonic()
        written = 0
        try:
            while batch := self._held.oldest(500):
                self._insert_batch_locked(batch)
                self._held.remove(batch)
                written += len(batch)
        except sqlite3.OperationalError as exc:
            self._refused_locked(exc, time.monotonic() - tried)
            return False
        if written:
            log.warning("queue %s takes writes again: %d record(s) held in memory written", self.path, written)
        self._next_warning = 0.0
        return True

    def _insert_batch_locked(self, batch: list[Spilled]) -> None:
        """Held records in one transaction, all or none (they were counted against ``max_depth`` when held)."""
        now = time.time()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(
                "INSERT INTO records (record_key, payload, enqueued_at, visible_at) VALUES (?, ?, ?, ?)",
                [(e.put_id, e.payload, float(e.enqueued_at), now) for e in batch],
            )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a full disk may already have rolled it back
                self._db.execute("ROLLBACK")
            raise

    def _refused_locked(self, exc: sqlite3.Error, took: float) -> None:
        # A try that waited on a lock is spaced out more, so puts spend at most ~10% of their time on it.
        self._retry_at = time.monotonic() + max(self.retry_interval, 10 * took)
        if time.monotonic() >= self._next_warning:  # once, then at most once a minute while it lasts
            self._next_warning = time.monotonic() + 60.0
            log.error(
                "queue %s cannot be written (%s): holding %d record(s) in memory, and refusing new requests, until"
                " it can (free space on its disk)",
                self.path,
                exc,
                len(self._held) + 1,
            )

    # -- consumer side ----------------------------------------------------------------------
    def lease(self, n: int, lease_seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        if not self._reclaimed_once:
            self._reclaimed_once = True
            self.reclaim_dead_leases()
        now = time.time()
        token = uuid.uuid4().hex
        with self._lock:
            rows = self._db.execute(
                "UPDATE records SET lease_token = ?, lease_owner = ?, visible_at = ?, attempts = attempts + 1 "
                "WHERE id IN (SELECT id FROM records WHERE visible_at <= ? ORDER BY id LIMIT ?) "
                "RETURNING id, payload, attempts, enqueued_at",
                (token, self._owner, now + lease_seconds, now, int(n)),
            ).fetchall()
        out = []
        for row_id, payload, attempts, enqueued_at in sorted(rows):
            try:
                record = RagRecord.model_validate_json(payload)
            except ValueError as exc:
                # An unreadable row would come back forever and block nothing but itself; drop it
                # once, loudly, and count it.
                log.error("dropping unreadable queued record (row %s): %s", row_id, exc)
                with self._lock:
                    self._db.execute("DELETE FROM records WHERE id = ?", (row_id,))
                    self.corrupt += 1
                continue
            out.append(Leased(receipt=f"{row_id}:{token}", record=record, attempts=attempts, enqueued_at=enqueued_at))
        return out

    def reclaim_dead_leases(self) -> int:
        """Make records leased by processes of this host that no longer exist visible now.

        Called before this object's first lease (a restart after kill -9). Leases of live
        processes, and of other hosts sharing the file, are left to expire normally."""
        now = time.time()
        with self._lock:
            owners = [
                row[0]
                for row in self._db.execute(
                    "SELECT DISTINCT lease_owner FROM records WHERE lease_token IS NOT NULL AND visible_at > ?",
                    (now,),
                )
                if row[0]
            ]
        dead = [o for o in owners if o != self._owner and _dead_on_this_host(o, self._host)]
        taken = 0
        for owner in dead:
            with self._lock:
                cur = self._db.execute(
                    "UPDATE records SET lease_token = NULL, lease_owner = NULL, visible_at = ? "
                    "WHERE lease_owner = ? AND lease_token IS NOT NULL",
                    (now, owner),
                )
            taken += cur.rowcount
        if taken:
            log.info("took back %d record(s) leased by dead process(es) %s", taken, ", ".join(dead))
        self.reclaimed += taken
        return taken

    def ack(self, receipt: str) -> None:
        row_id, _ = _parse_receipt(receipt)
        with self._lock:
            self._db.execute("DELETE FROM records WHERE id = ?", (row_id,))

    def release(self, receipt: str, delay: float = 0.0) -> None:
        row_id, token = _parse_receipt(receipt)
        with self._lock:
            self._db.execute(
                "UPDATE records SET lease_token = NULL, visible_at = ? WHERE id = ? AND lease_token = ?",
                (time.time() + max(0.0, delay), row_id, token),
            )

    @property
    def dropped(self) -> int:
        return self._dropped

    def extend(self, receipt: str, lease_seconds: float) -> bool:
        """Push this delivery's lease out to ``now + lease_seconds`` (a heartbeat while a slow judge
        works); ``False`` when the lease was already lost (expired and taken, acked, released)."""
        row_id, token = _parse_receipt(receipt)
        with self._lock:
            cur = self._db.execute(
                "UPDATE records SET visible_at = ? WHERE id = ? AND lease_token = ?",
                (time.time() + lease_seconds, row_id, token),
            )
        return cur.rowcount == 1

    # -- observation ------------------------------------------------------------------------
    def depth(self) -> int:
        """Records in the file and held in memory (waiting for the file to take writes)."""
        with self._lock:
            return self._stored_depth_locked() + len(self._held)

    def _stored_depth_locked(self) -> int:
        row = self._db.execute("SELECT n FROM queue_depth WHERE one = 1").fetchone()
        return int(row[0]) if row else 0

    def oldest_age(self) -> float | None:
        with self._lock:
            row = self._db.execute("SELECT enqueued_at FROM records ORDER BY id LIMIT 1").fetchone()
            held = self._held.oldest()
        oldest = row[0] if row is not None else float(held[0].enqueued_at) if held else None
        return None if oldest is None else max(0.0, time.time() - oldest)

    def close(self) -> None:
        """Write what is held in memory if the file takes it now (what it still refuses is lost, and counted)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._retry_at = 0.0
                if len(self._held) and not self._write_held_locked():
                    lost = self._held.close()
                    self._dropped += lost
                    log.error("queue %s still cannot be written at shutdown: %d held record(s) lost", self.path, lost)
                self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteQueue({self.path!r}, max_depth={self.max_depth})"


def _dead_on_this_host(owner: str, host: str) -> bool:
    """Whether ``owner`` ("host:pid:nonce") names a process of this host that has exited."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        # Same pid: this very process (alive), or an earlier one that had our pid (a container
        # restarted with the same pid 1), told apart by the per-process nonce.
        return parts[2] != _PROCESS_NONCE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # exists, owned by someone else
    return False


def _parse_receipt(receipt: str) -> tuple[int, str]:
    row_id, sep, token = receipt.partition(":")
    if not sep or not row_id.isdigit():
        raise ValueError(f"not a SQLite queue receipt: {receipt!r}")
    return int(row_id), token
