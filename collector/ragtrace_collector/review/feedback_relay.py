"""End-user feedback shared between hosts when the collector is scaled out on Redis.

Why: feedback is stored by whichever receiver took the SDK's feedback span (or whichever explorer took the API post),
but the record it is about is scored, and shown, by a worker on another host, whose results store is its own. Each
collector with a label store therefore runs a relay beside it (the service starts one when ``queue.url`` is Redis):

* **out**: what this host's intake stores goes, in the same SQLite transaction, into an outbox
  (``LabelStore.add_feedback(relay=True)``); the relay appends the outbox to one Redis stream, ``{prefix}:feedback``
  (``XADD ... MAXLEN ~ review.feedback_relay_max_entries``), and forgets what Redis took. While Redis is away the
  outbox keeps it, on disk, and it is sent once Redis is back, whatever happened to the process meanwhile.
* **in**: it reads the stream from where it left off (``XREAD``, every host reads every entry, no consumer group)
  and stores each item (``LabelStore.add_relayed``) with the stream position, in one transaction: a restart neither
  skips nor repeats an entry. An item seen before (its own, coming back; a re-sent span) is stored once: the
  feedback id. What others took is never sent on again.

Stream entries are read as untrusted: one that is not a well-formed feedback item is skipped and counted
(``ragtrace_feedback_relayed_total{direction="malformed"}``), never raised. A host down for longer than the stream
keeps entries misses the oldest of them; a stream that was deleted (its last id below the position) is read again
from its start.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import redis
from prometheus_client import CollectorRegistry, Counter, Gauge

from ragtrace_collector.config import ReviewConfig
from ragtrace_collector.internal.outcomes import Outcomes
from ragtrace_collector.internal.redis import StreamFollower, connect, key_prefix
from ragtrace_collector.review.labels import (
    MAX_COMMENT_CHARS,
    MAX_NAME_CHARS,
    BadLabel,
    Feedback,
    LabelStore,
    cut,
    feedback_value,
)

_REVIEW = ReviewConfig()  # the default bound is the config's (``review`` section), written once there

FIELD = "f"  # an entry's one field: the item as JSON
MAX_ENTRY_CHARS = 4 * MAX_COMMENT_CHARS  # an entry longer than any item we write is not ours
MAX_ID_CHARS = 256
MAX_SERVICE_CHARS = 256

SENT = "sent"
RECEIVED = "received"  # new here (an item seen before is not counted)
MALFORMED = "malformed"


def stream_key(url: str) -> str:
    """The feedback stream beside the queue's keys (``?prefix=`` of the queue URL)."""
    return f"{key_prefix(url)}:feedback"


def entry_of(item: Feedback) -> dict[str, str]:
    """The stream entry of one item (what :func:`feedback_of` reads back)."""
    return {FIELD: json.dumps(item.to_dict(), ensure_ascii=False, separators=(",", ":"))}


def feedback_of(fields: Any) -> Feedback | None:
    """The item a stream entry holds, or ``None`` when it is not a well-formed one (anyone with the Redis password
    can write to the stream)."""
    raw = fields.get(FIELD) if isinstance(fields, dict) else None
    if not isinstance(raw, str) or len(raw) > MAX_ENTRY_CHARS:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    trace_id, name, source = data.get("trace_id"), data.get("name"), data.get("source")
    feedback_id, comment, service = data.get("feedback_id"), data.get("comment"), data.get("service")
    received_at = data.get("received_at")
    if not (isinstance(trace_id, str) and len(trace_id) == 32 and all(c in "0123456789abcdef" for c in trace_id)):
        return None
    if not isinstance(name, str) or not name.strip() or source not in ("sdk", "api"):
        return None
    if not isinstance(feedback_id, str) or not feedback_id or len(feedback_id) > MAX_ID_CHARS:
        return None
    if not (comment is None or isinstance(comment, str)) or not (service is None or isinstance(service, str)):
        return None
    if isinstance(received_at, bool) or not isinstance(received_at, int | float) or not math.isfinite(received_at):
        return None
    try:
        value = feedback_value(data.get("value"))
    except BadLabel:
        return None
    return Feedback(
        trace_id=trace_id,
        value=value,
        name=str(cut(name.strip(), MAX_NAME_CHARS)),
        comment=cut(comment, MAX_COMMENT_CHARS) if comment else None,
        source=source,
        feedback_id=feedback_id,
        service=cut(service, MAX_SERVICE_CHARS) if service else None,
        received_at=float(received_at),
    )


class FeedbackRelay(StreamFollower):
    """Sends this host's feedback to the others and stores theirs, through one Redis stream (see the module
    docstring); a thread of its own every ``interval`` seconds, so the event loop never waits on Redis."""

    def __init__(
        self,
        store: LabelStore,
        url: str,
        registry: CollectorRegistry | None = None,
        *,
        max_entries: int = _REVIEW.feedback_relay_max_entries,
        interval: float = 0.5,
        client: redis.Redis | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            client if client is not None else connect(url),
            stream_key(url),
            "Redis (feedback relay)",
            "feedback waits in the outbox and is sent when Redis is back",
            interval=interval,
            clock=clock,
        )
        self.store = store
        self.max_entries = max_entries
        relayed = outbox = None
        if registry is not None:
            relayed = Counter(
                "ragtrace_feedback_relayed",
                "End-user feedback shared with the other hosts through Redis: sent (from this host's outbox),"
                " received (new here) and malformed (stream entries skipped).",
                ("direction",),
                registry=registry,
            )
            outbox = Gauge(
                "ragtrace_feedback_relay_outbox",
                "Feedback stored here and not yet sent to the other hosts (grows while Redis is unreachable).",
                registry=registry,
            )
        self._outcomes = Outcomes(relayed, SENT, RECEIVED, MALFORMED)
        self.counts = self._outcomes.counts
        self._outbox: Gauge | None = outbox

    def run_once(self) -> tuple[int, int]:
        """Send the outbox, then store what the others sent; ``(sent, received)``. Redis away: ``(0, 0)``, the
        outage logged once (and a reminder a minute)."""
        done = super().run_once()
        if self._outbox is not None:  # after an outage's round too: that is when it grows
            self._outbox.set(self.store.outbox_size())
        return done

    def send(self) -> int:
        sent = 0
        while True:
            batch = self.store.outbox(self.BATCH)
            if not batch:
                break
            pipe = self._r.pipeline(transaction=False)
            for _, item in batch:
                pipe.xadd(self.stream, entry_of(item), maxlen=self.max_entries, approximate=True)
            pipe.execute()
            self.store.outbox_sent(batch[-1][0])
            sent += len(batch)
            if len(batch) < self.BATCH:
                break
        self._outcomes.add(SENT, sent)
        return sent

    def position(self) -> str:
        return self.store.relay_position(self.stream)

    def take(self, entries: list[tuple[str, dict[str, str]]], last_id: str) -> int:
        items = []
        for _, fields in entries:
            item = feedback_of(fields)
            if item is None:
                self._outcomes.add(MALFORMED, 1)
            else:
                items.append(item)
        received = sum(self.store.add_relayed(items, self.stream, last_id))
        self._outcomes.add(RECEIVED, received)
        return received
