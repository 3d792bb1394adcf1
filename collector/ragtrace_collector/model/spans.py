"""The spans that cross stages: what the receivers keep of each span, grouped by trace.

The receivers make them (:mod:`ragtrace_collector.receiver.decode`), assembly holds them until a
trace completes (in memory, or as JSON in Redis) and the conventions read them into a record.
"""

from __future__ import annotations

from typing import Any

STATUS_ERROR = 2  # OTLP Status.code of a span that failed
# The longest a span, or any time a span reports (TTFT, time per token), may last: past it, a broken clock or a hostile
# client. A RAG request lasts seconds; the receivers refuse longer spans, the conventions ignore longer timings.
MAX_SPAN_SECONDS = 24 * 3600
# Key under which the receivers keep a span event's own timestamp (unix ns) in its attributes dict: the
# conventions read first-token times from events (peer conventions issue); no OTel attribute has this name.
EVENT_TIME = "@time_unix_nano"
# Name of a log-event carrier: a SpanData standing for OTLP log records (GenAI events) that belong to span
# ``span_id`` of ``trace_id``. It waits in assembly with the trace's spans (``parent_id == span_id``: never a root)
# and is folded into its span when the trace completes (``processor.conventions.log_events``).
LOG_EVENTS = "@log events"


class SpanData:
    """What the collector keeps of one span. Plain fields so it serialises to JSON for shared state."""

    __slots__ = (
        "attrs",
        "end",
        "events",
        "name",
        "nbytes",
        "parent_id",
        "service",
        "span_id",
        "start",
        "status_code",
        "status_message",
        "trace_id",
    )

    def __init__(
        self,
        trace_id: str,
        span_id: str,
        parent_id: str,
        name: str,
        start: int,
        end: int,
        status_code: int = 0,
        status_message: str = "",
        attrs: dict[str, Any] | None = None,
        events: list[tuple[str, dict[str, Any]]] | None = None,
        service: str | None = None,
        nbytes: int = 0,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id  # "" for a root span
        self.name = name
        self.start = start  # unix nanoseconds
        self.end = end
        self.status_code = status_code  # 0 unset, 1 ok, 2 error
        self.status_message = status_message
        self.attrs = attrs if attrs is not None else {}
        self.events = events if events is not None else []
        self.service = service
        # Approximate Python memory held: the text of every kept field (name, status message, service,
        # attributes, events) plus fixed overheads; what ``max_inflight_bytes`` bounds, so nothing kept is free.
        self.nbytes = nbytes

    @property
    def is_root(self) -> bool:
        return not self.parent_id

    @property
    def is_log_carrier(self) -> bool:
        """A carrier of log events for span ``span_id`` (see :data:`LOG_EVENTS`), not a span."""
        return self.name == LOG_EVENTS and self.span_id == self.parent_id

    @property
    def duration_seconds(self) -> float | None:
        if self.start and self.end and self.end >= self.start:
            return (self.end - self.start) / 1e9
        return None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpanData:
        data = dict(data)
        data["events"] = [(n, a) for n, a in data.get("events") or []]
        return cls(**data)

    def __repr__(self) -> str:
        return f"SpanData({self.name!r}, trace={self.trace_id}, span={self.span_id}, parent={self.parent_id or None})"


class DecodedRequest:
    """Spans grouped by trace id, plus what was refused and why."""

    __slots__ = ("accepted", "errors", "rejected", "traces")

    def __init__(self) -> None:
        self.traces: dict[str, list[SpanData]] = {}
        self.accepted = 0
        self.rejected = 0
        self.errors: dict[str, int] = {}

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.errors[reason] = self.errors.get(reason, 0) + 1

    @property
    def error_message(self) -> str:
        """The partial-success message: what was refused, counted by reason."""
        return "; ".join(f"{n} span(s) refused: {reason}" for reason, n in sorted(self.errors.items()))


class DecodedLogs(DecodedRequest):
    """Log records of one OTLP logs request: the GenAI events kept, as carriers grouped by trace id (``traces``,
    ``accepted``), and the records dropped by reason (``dropped``: not a GenAI event, no span to join). Dropped
    records are not refused: the client must not send them again."""

    __slots__ = ("dropped",)

    def __init__(self) -> None:
        super().__init__()
        self.dropped: dict[str, int] = {}

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
