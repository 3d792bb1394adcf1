"""End-user feedback and reviewers' verdicts shared between hosts when the collector is scaled out on Redis.

Why: feedback is stored by whichever receiver took the SDK's feedback span (or whichever explorer took the API post),
but the record it is about is scored, and shown, by a worker on another host, whose results store is its own; a
review is stored by the explorer it was made on, while the review queue, the judge-vs-human agreement and
``dataset export --reviewed`` of every other explorer need it too. Each collector with a label store therefore runs
a relay beside it (the service starts one when ``queue.url`` is Redis):

* **out**: what this host's intake and explorer store goes, in the same SQLite transaction, into an outbox
  (``LabelStore.add_feedback(relay=True)``, ``LabelStore.add_review(relay=True)``); the relay appends the outboxes
  to one Redis stream, ``{prefix}:feedback`` (``XADD ... MAXLEN ~ review.feedback_relay_max_entries``), and forgets
  what Redis took. While Redis is away the outboxes keep it, on disk, and it is sent once Redis is back, whatever
  happened to the process meanwhile.
* **in**: it reads the stream from where it left off (``XREAD``, every host reads every entry, no consumer group)
  and stores each item (``LabelStore.add_relayed``) with the stream position, in one transaction: a restart neither
  skips nor repeats an entry. A feedback item seen before (its own, coming back; a re-sent span) is stored once: the
  feedback id. A review replaces the reviewer's verdict on that record's metric only if it was made later (the
  latest verdict is the reviewer's, as on one host; hosts' clocks decide between two made seconds apart). What
  others took is never sent on again.

Stream entries are read as untrusted: one that is not a well-formed item is skipped and counted
(``ragtrace_feedback_relayed_total{direction="malformed"}``, ``ragtrace_reviews_relayed_total{...}`` for reviews),
never raised. A host down for longer than the stream keeps entries misses the oldest of them; a stream that was
deleted (its last id below the position) is read again from its start.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from prometheus_client import CollectorRegistry, Counter, Gauge

from ragtrace_collector.config import ReviewConfig
from ragtrace_collector.internal.json_input import loads, lone_surrogate
from ragtrace_collector.internal.outcomes import Outcomes
from ragtrace_collector.internal.redis import StreamFollower, connect, key_prefix
from ragtrace_collector.review.labels import (
    MAX_CLAIMS,
    MAX_COMMENT_CHARS,
    MAX_NAME_CHARS,
    MAX_REFERENCE_CHARS,
    MAX_STATEMENT_CHARS,
    BadLabel,
    Feedback,
    LabelStore,
    Review,
    cut,
    feedback_value,
    review_from_json,
)

T = TypeVar("T")

_REVIEW = ReviewConfig()  # the default bound is the config's (``review`` section), written once there

FIELD = "f"  # a feedback entry's one field: the item as JSON
REVIEW_FIELD = "r"  # a review entry's one field: the review as JSON
MAX_ENTRY_CHARS = 4 * MAX_COMMENT_CHARS  # an entry longer than any item we write is not ours
# A review holds a reference answer, a comment and up to MAX_CLAIMS claims; JSON may escape each character in six.
MAX_REVIEW_ENTRY_CHARS = 6 * (MAX_REFERENCE_CHARS + MAX_COMMENT_CHARS + MAX_CLAIMS * (MAX_STATEMENT_CHARS + 64)) + 4096
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


def _object_in(fields: Any, field: str, max_chars: int) -> dict[str, Any] | None:
    """The JSON object in an entry's ``field``; ``None`` for anything else, or one longer than we ever write."""
    raw = fields.get(field) if isinstance(fields, dict) else None
    if not isinstance(raw, str) or len(raw) > max_chars:
        return None
    try:
        data = loads(raw)
    except ValueError:
        return None
    # a lone surrogate ("\ud800" in the JSON) is no text: SQLite refused it and the relay stuck on the entry
    return data if isinstance(data, dict) and lone_surrogate(data) is None else None


def feedback_of(fields: Any) -> Feedback | None:
    """The item a stream entry holds, or ``None`` when it is not a well-formed one (anyone with the Redis password
    can write to the stream)."""
    data = _object_in(fields, FIELD, MAX_ENTRY_CHARS)
    if data is None:
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


def review_entry_of(review: Review) -> dict[str, str]:
    """The stream entry of one review (what :func:`review_of` reads back)."""
    return {REVIEW_FIELD: json.dumps(review.to_dict(), ensure_ascii=False, separators=(",", ":"))}


def review_of(fields: Any) -> Review | None:
    """The review a stream entry holds, or ``None`` when it is not a well-formed one: checked as the explorer's API
    checks a review (``review_from_json``), with the time it was made."""
    data = _object_in(fields, REVIEW_FIELD, MAX_REVIEW_ENTRY_CHARS)
    if data is None:
        return None
    trace_id, reviewed_at = data.get("trace_id"), data.get("reviewed_at")
    if not isinstance(trace_id, str) or not trace_id or len(trace_id) > MAX_ID_CHARS:
        return None
    if isinstance(reviewed_at, bool) or not isinstance(reviewed_at, int | float) or not math.isfinite(reviewed_at):
        return None
    try:
        return dataclasses.replace(review_from_json(trace_id, data), reviewed_at=float(reviewed_at))
    except BadLabel:
        return None


class FeedbackRelay(StreamFollower):
    """Sends this host's feedback and reviews to the others and stores theirs, through one Redis stream (see the
    module docstring); a thread of its own every ``interval`` seconds, so the event loop never waits on Redis."""

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
        relayed = reviews = outbox = None
        if registry is not None:
            relayed = Counter(
                "ragtrace_feedback_relayed",
                "End-user feedback shared with the other hosts through Redis: sent (from this host's outbox),"
                " received (new here) and malformed (stream entries skipped).",
                ("direction",),
                registry=registry,
            )
            reviews = Counter(
                "ragtrace_reviews_relayed",
                "Reviewers' verdicts shared with the other hosts through Redis: sent (from this host's outbox),"
                " received (new here, or later than the one kept) and malformed (stream entries skipped).",
                ("direction",),
                registry=registry,
            )
            outbox = Gauge(
                "ragtrace_feedback_relay_outbox",
                "Feedback and reviews stored here and not yet sent to the other hosts (grows while Redis is"
                " unreachable).",
                registry=registry,
            )
        self._outcomes = Outcomes(relayed, SENT, RECEIVED, MALFORMED)
        self.counts = self._outcomes.counts
        self._review_outcomes = Outcomes(reviews, SENT, RECEIVED, MALFORMED)
        self.review_counts = self._review_outcomes.counts
        self._outbox: Gauge | None = outbox

    def run_once(self) -> tuple[int, int]:
        """Send the outbox, then store what the others sent; ``(sent, received)``. Redis away: ``(0, 0)``, the
        outage logged once (and a reminder a minute)."""
        done = super().run_once()
        if self._outbox is not None:  # after an outage's round too: that is when it grows
            self._outbox.set(self.store.outbox_size())
        return done

    def send(self) -> int:
        sent = self._send_outbox(self.store.outbox, self.store.outbox_sent, entry_of)
        self._outcomes.add(SENT, sent)
        reviews = self._send_outbox(self.store.review_outbox, self.store.review_outbox_sent, review_entry_of)
        self._review_outcomes.add(SENT, reviews)
        return sent + reviews

    def _send_outbox(
        self,
        read: Callable[[int], list[tuple[int, T]]],
        sent_up_to: Callable[[int], None],
        entry: Callable[[T], dict[str, str]],
    ) -> int:
        """Append one outbox to the stream a batch at a time, forgetting each batch once Redis took it."""
        sent = 0
        while True:
            batch = read(self.BATCH)
            if not batch:
                break
            pipe = self._r.pipeline(transaction=False)
            for _, item in batch:
                pipe.xadd(self.stream, entry(item), maxlen=self.max_entries, approximate=True)
            pipe.execute()
            sent_up_to(batch[-1][0])
            sent += len(batch)
            if len(batch) < self.BATCH:
                break
        return sent

    def position(self) -> str:
        return self.store.relay_position(self.stream)

    def take(self, entries: list[tuple[str, dict[str, str]]], last_id: str) -> int:
        items: list[Feedback] = []
        reviews: list[Review] = []
        for _, fields in entries:
            if isinstance(fields, dict) and REVIEW_FIELD in fields:
                review = review_of(fields)
                if review is None:
                    self._review_outcomes.add(MALFORMED, 1)
                else:
                    reviews.append(review)
                continue
            item = feedback_of(fields)
            if item is None:
                self._outcomes.add(MALFORMED, 1)
            else:
                items.append(item)
        added, taken = self.store.add_relayed(items, self.stream, last_id, reviews)
        received, reviewed = sum(added), sum(taken)
        self._outcomes.add(RECEIVED, received)
        self._review_outcomes.add(RECEIVED, reviewed)
        return received + reviewed
