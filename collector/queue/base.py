"""The queue between sampling and scoring: durable, bounded, at-least-once delivery.

Contract for implementations (SQLite embedded default, Redis Streams for scale-out):

* ``put`` never blocks the receiver: when the queue is full it drops the *newest* record
  (the one being put) and returns ``False``; the caller counts the drop.
* ``lease`` hands out up to ``n`` records for ``lease_seconds``. A record leased and not
  acked before its lease expires (worker killed, crashed) is delivered again, to any worker.
* ``ack`` removes a record for good, after its result is recorded. Scoring is made
  idempotent by the results store (keyed by ``RagRecord.key`` and metric), so a record
  delivered twice still counts once.
* ``release`` returns a leased record untouched (judge outage, shutdown) so it is tried
  again after ``delay`` seconds without counting as a failure.
* Implementations are safe to call from several threads of one process.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from collector.record import RagRecord


@dataclass
class Leased:
    """A record handed to a worker; ``receipt`` identifies this delivery for ack/release."""

    receipt: str
    record: RagRecord
    attempts: int  # deliveries so far, including this one
    enqueued_at: float  # unix seconds


class RecordQueue(abc.ABC):
    """Durable FIFO of sampled records awaiting scoring."""

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
    def depth(self) -> int:
        """Records queued, leased or not."""

    @abc.abstractmethod
    def oldest_age(self) -> float | None:
        """Seconds since the oldest queued record was enqueued, ``None`` when empty."""

    def close(self) -> None:
        """Flush and release resources."""
