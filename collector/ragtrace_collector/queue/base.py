"""The queue between sampling and scoring: durable, bounded, at-least-once delivery.

Contract for implementations (SQLite embedded default, Redis Streams for scale-out):

* ``put`` never blocks the receiver: when the queue is full it drops the *newest* record
  (the one being put) and returns ``False``; the caller counts the drop.
* ``lease`` hands out up to ``n`` records for ``lease_seconds``. A record leased and not
  acked before its lease expires (worker killed, crashed) is delivered again, to any worker. The workers of
  one queue lease for the same time (``scoring.lease_seconds``): Redis measures an entry's expiry with the
  claiming worker's lease, SQLite with the holder's.
* ``ack`` removes a record for good, after its result is recorded. Scoring is made
  idempotent by the results store (keyed by ``RagRecord.key`` and metric), so a record
  delivered twice still counts once.
* ``release`` returns a leased record untouched (judge outage, shutdown) so it is tried
  again after ``delay`` seconds without counting as a failure.
* ``extend`` renews a lease while a worker is still scoring (its heartbeat), so a slow judge does
  not get the record delivered again mid-scoring.
* ``writable`` is ``False`` while the queue cannot store what it is given (a full disk): an implementation that
  can then holds what is put in memory, bounded, and writes it (``write_held``) once it can; admission refuses
  new requests meanwhile. Opening one that cannot be written raises :class:`QueueUnwritable`.
* ``dropped`` and ``corrupt`` count, for this process, the puts refused and the unreadable records
  dropped at lease time; the collector exports them as ``ragtrace_queue_{dropped,corrupt}_total``.
* Implementations are safe to call from several threads of one process.

Optional capabilities are declared as protocols below and checked with ``isinstance``:
:class:`SharedQueue` (several worker processes; results counted once cluster-wide through its
marks) and :class:`ReportsMetrics` (a backend with metrics of its own).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry

from ragtrace_collector.internal.component import Component
from ragtrace_collector.model.record import RagRecord


class QueueUnwritable(OSError):
    """The queue cannot be opened for writing (a read-only or missing directory, a read-only file): says which
    file and why, and the service adds what to set, so ``serve`` can refuse to start with one line."""


@dataclass
class Leased:
    """A record handed to a worker; ``receipt`` identifies this delivery for ack/release."""

    receipt: str
    record: RagRecord
    attempts: int  # deliveries so far, including this one
    enqueued_at: float  # unix seconds


class RecordQueue(Component):
    """Durable FIFO of sampled records awaiting scoring."""

    corrupt: int = 0  # unreadable records dropped at lease time (this process)

    @abc.abstractmethod
    def put(self, record: RagRecord) -> bool:
        """Enqueue; ``False`` (and nothing stored) when the queue is at capacity."""

    @abc.abstractmethod
    def lease(self, n: int, lease_seconds: float) -> list[Leased]:
        """Up to ``n`` records not currently leased, oldest first."""

    @abc.abstractmethod
    def ack(self, receipt: str) -> None:
        """Done with this record: remove it."""

    @abc.abstractmethod
    def release(self, receipt: str, delay: float = 0.0) -> None:
        """Give the record back to be delivered again after ``delay`` seconds."""

    @abc.abstractmethod
    def extend(self, receipt: str, lease_seconds: float) -> bool:
        """Renew a lease for ``lease_seconds`` from now; ``False`` when it was already lost."""

    @property
    @abc.abstractmethod
    def dropped(self) -> int:
        """Records this process's puts lost: refused (queue full); for Redis also shed while Redis was down and the
        spill full, and spilled records Redis later answered with an error."""

    @abc.abstractmethod
    def depth(self) -> int:
        """Records queued, leased or not."""

    @abc.abstractmethod
    def oldest_age(self) -> float | None:
        """Seconds since the oldest queued record was enqueued, ``None`` when empty."""

    @property
    def writable(self) -> bool:
        """``False`` while what is put cannot be stored (held in memory instead): admission sheds meanwhile."""
        return True

    def write_held(self) -> bool:
        """Store what was held while the queue could not write, if it can now; ``True`` when nothing waits."""
        return True

    def close(self) -> None:
        """Flush and release resources."""

    def shutdown(self, timeout: float | None = None) -> None:
        """The component contract (:class:`~ragtrace_collector.internal.component.Component`): :meth:`close`, which
        stores what is held if it can (a queue never drops what it was given to wait for a deadline)."""
        self.close()


class ScoredMarks(Protocol):
    """Cluster-wide "was this (record, metric) already counted?" marks."""

    def first(self, record_key: str, metric: str) -> bool:
        """Claim the pair; ``True`` for exactly one claimant ever (the same owner asking again included)."""
        ...

    def owner_of(self, record_key: str, metric: str) -> str | None:
        """Who claimed the pair, ``None`` if nobody has."""
        ...


@runtime_checkable
class SharedQueue(Protocol):
    """A queue consumed by several worker processes: a result is counted by whoever claims its mark first,
    so a record redelivered to another worker is counted once cluster-wide."""

    scored_marks: ScoredMarks


@runtime_checkable
class ReportsMetrics(Protocol):
    """A backend with metrics of its own (e.g. Redis: local buffer, shed, reclaimed records)."""

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Register this queue's collectors on ``registry`` (once)."""
        ...
