"""What both OTLP receivers share: auth, admission (load shedding), decoding outcome and counting.

Admission bounds the whole requests being decoded at once, watches the event loop's lag (how late a
periodic timer fires: the backlog of work the loop has not got to yet, whatever caused it), and asks
downstream whether it is behind (records waiting to be built, assembly memory near its bound). When either
is above its bound, new requests are refused at once (HTTP 503 + ``Retry-After``, gRPC
``RESOURCE_EXHAUSTED``) so latency stays bounded and memory does not grow with the backlog; the OTel
exporters retry those with backoff.

A request is admitted only once its whole body has arrived, so a slow client never holds a slot: while a
body arrives it must keep up a minimum byte rate (else HTTP 408) and its bytes count against one budget
shared by every connection (:meth:`Ingestor.reserve`), which bounds the memory of bodies in flight without
a per-request slot an attacker could sit on.

A request that was ingested can be handed on unchanged (``forward``, wired by the service to the forwarding
exporter): its decoded body and content type, only after the spans reached the sink, so a request answered with
an error (and retried by its client) is never forwarded twice. The callback must only enqueue.

Log requests (``/v1/logs``, gRPC ``LogsService/Export``) go through the same admission, credentials, limits and
journal as trace requests (:class:`Signal` says what differs); their GenAI events reach the same sink as carriers
for their spans (:meth:`Ingestor.ingest_logs`), the other records are counted and dropped. They are not forwarded
(the forwarding exporter sends traces).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragtrace_collector.config import LimitsConfig
from ragtrace_collector.internal.component import LISTENER_GRACE_SECONDS
from ragtrace_collector.internal.credentials import CredentialGuard, Outcome, Scope
from ragtrace_collector.internal.journal import JSON as JOURNAL_JSON
from ragtrace_collector.internal.journal import LOGS_JSON as JOURNAL_LOGS_JSON
from ragtrace_collector.internal.journal import LOGS_PROTOBUF as JOURNAL_LOGS_PROTOBUF
from ragtrace_collector.internal.journal import PROTOBUF as JOURNAL_PROTOBUF
from ragtrace_collector.internal.journal import Journal, JournalError
from ragtrace_collector.model.spans import DecodedLogs, DecodedRequest
from ragtrace_collector.receiver.decode import (
    MalformedRequest,
    extract_log_events,
    extract_spans,
    parse_json,
    parse_logs_json,
    parse_logs_protobuf,
    parse_protobuf,
)

# Request outcomes (label ``status`` of ragtrace_otlp_requests_total)
OK = "ok"
PARTIAL = "partial"
MALFORMED = "malformed"
TRUNCATED = "truncated"
TOO_LARGE = "too_large"
UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"  # a token without the ingest scope (a read or review token)
RATE_LIMITED = "rate_limited"  # the client address sent too many wrong credentials (auth.max_failed_attempts)
TIMEOUT = "timeout"  # the body did not arrive in time (read deadline / minimum byte rate)
OVERLOADED = "overloaded"
UNSUPPORTED = "unsupported_media_type"
UNJOURNALED = "unjournaled"  # the request could not be made durable (the journal's disk refuses writes): 503
INTERNAL = "internal_error"

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

#: At shutdown a receiver stops accepting at once and lets the requests in flight finish for this long (never more
#: than the shutdown's timeout): a request being journaled still gets its reply rather than a reset.
GRACE_SECONDS = LISTENER_GRACE_SECONDS

# (decoded body, its content type, the parsed ExportTraceServiceRequest) of an ingested request; never blocks
Forward = Callable[[bytes, str, Any], object]

_LIMITS = LimitsConfig()  # the defaults are the config's (``limits`` section), written once there


@dataclass(frozen=True)
class Signal:
    """What differs between the OTLP signals the receivers take (traces, logs): how a body decodes, how it is
    journaled, and the suffix of its ``transport`` label (``http``, ``http_logs``)."""

    name: str
    parse_protobuf: Callable[[bytes], Any]
    parse_json: Callable[[bytes], Any]
    journal_protobuf: int
    journal_json: int
    label_suffix: str

    def parse(self, body: bytes, content_type: str) -> Any:
        """The decoded request; :class:`MalformedRequest` when the body is not one."""
        return self.parse_json(body) if content_type == JSON else self.parse_protobuf(body)

    def transport(self, base: str) -> str:
        return base + self.label_suffix


TRACES = Signal("traces", parse_protobuf, parse_json, JOURNAL_PROTOBUF, JOURNAL_JSON, "")
LOGS = Signal("logs", parse_logs_protobuf, parse_logs_json, JOURNAL_LOGS_PROTOBUF, JOURNAL_LOGS_JSON, "_logs")


def decode_journaled(kind: int, payload: bytes) -> DecodedRequest:
    """What a journaled request holds (spans, or log-event carriers), decoded as when it was received: replay
    on start ingests it again. :class:`MalformedRequest` for a record no receiver wrote (a foreign file)."""
    if kind in (JOURNAL_LOGS_PROTOBUF, JOURNAL_LOGS_JSON):
        return extract_log_events(LOGS.parse(payload, JSON if kind == JOURNAL_LOGS_JSON else PROTOBUF))
    if kind in (JOURNAL_PROTOBUF, JOURNAL_JSON):
        return extract_spans(TRACES.parse(payload, JSON if kind == JOURNAL_JSON else PROTOBUF))
    raise MalformedRequest(f"unknown journal record kind {kind}")


class Ingestor:
    """Turns decoded OTLP requests into spans for the assembler, counting everything on the way."""

    def __init__(
        self,
        sink: Callable[[DecodedRequest], None],
        metrics=None,
        guard: CredentialGuard | None = None,
        max_pending_requests: int = _LIMITS.max_pending_requests,
        max_request_bytes: int = _LIMITS.max_request_bytes,
        retry_after_seconds: int = _LIMITS.retry_after_seconds,
        max_loop_lag_seconds: float | None = _LIMITS.max_loop_lag_seconds,
        pressure: Callable[[], bool] | None = None,
        read_timeout_seconds: float = _LIMITS.read_timeout_seconds,
        min_body_bytes_per_second: int = _LIMITS.min_body_bytes_per_second,
        max_receiving_bytes: int = _LIMITS.max_receiving_bytes,
        forward: Forward | None = None,
        journal: Journal | None = None,
    ) -> None:
        self.sink = sink
        self.metrics = metrics
        self.guard = guard if guard is not None else CredentialGuard()  # no tokens: ingest is open
        self.max_pending = max(1, max_pending_requests)
        self.max_request_bytes = max_request_bytes
        self.retry_after_seconds = retry_after_seconds
        self.pending = 0
        self.max_loop_lag = max_loop_lag_seconds
        self.loop_lag = 0.0  # seconds the event loop was late on its last check (see watch_loop_lag)
        self._tick_due = math.inf  # when the lag watcher's pending timer is due (perf_counter), inf when none
        self.pressure = pressure  # downstream says it is behind (the record sweep, assembly memory)
        self.read_timeout = read_timeout_seconds
        self.min_body_rate = max(1, min_body_bytes_per_second)
        self.max_receiving_bytes = max(max_receiving_bytes, max_request_bytes)  # one full-size body always fits
        self.receiving_bytes = 0  # body bytes held by requests not finished yet (see reserve)
        self.forward = forward  # ingested requests handed on unchanged (the forwarding exporter), if any
        self.journal = journal  # requests made durable before they are acknowledged (internal.journal)
        self._journal_complained = -math.inf  # when the last "cannot journal" line was logged

    def authorize(self, header: str | None, address: str | None, via: str) -> Outcome:
        """Whether an ``Authorization`` header may send spans (:class:`CredentialGuard`, ingest scope), from
        ``address``: wrong credentials are limited per address across every listener."""
        return self.guard.check_header(header, Scope.INGEST, address, via)

    def saturated(self) -> bool:
        """True while new requests are refused: every slot taken, or :meth:`refusing`."""
        return self.pending >= self.max_pending or self.refusing()

    def refusing(self) -> bool:
        """True while every request is refused however many slots are free: the loop lagging (a stall under way
        included), or downstream behind (see ``pressure``). What ``/readyz`` reports, so ready means accepting;
        slots all taken are not in it: they free up as each request ends. Also while the journal refuses writes."""
        if self.max_loop_lag is not None and self.current_loop_lag() > self.max_loop_lag:
            return True
        if self.journal is not None and not self.journal.writable:  # nothing could be acknowledged durably
            return True
        return self.pressure is not None and self.pressure()

    def current_loop_lag(self) -> float:
        """The loop lag as of now: the last measure, or how late the watcher's timer already is if that is more.

        Why both: after a stall (a blocking import, a long callback) the loop may serve a request before the
        watcher's overdue timer fires; the overdue time is the lag the watcher is about to measure."""
        return max(self.loop_lag, time.perf_counter() - self._tick_due)

    def admit(self) -> bool:
        """Take a slot for one whole request, or ``False`` when saturated; pair with :meth:`done`."""
        if self.saturated():
            return False
        self.pending += 1
        return True

    def done(self) -> None:
        self.pending -= 1

    def reserve(self, nbytes: int) -> bool:
        """Count ``nbytes`` more of a body being received against the shared budget; ``False`` when it is full.

        Charged as bytes arrive (not as a body declares them), so a slow client holds only what it sent.
        Pair every successful reserve with :meth:`release`.
        """
        if self.receiving_bytes + nbytes > self.max_receiving_bytes:
            return False
        self.receiving_bytes += nbytes
        return True

    def release(self, nbytes: int) -> None:
        self.receiving_bytes -= nbytes

    def body_deadline(self, started: float, received: int) -> float:
        """When a body that started arriving at ``started`` must have sent its next byte, given ``received``.

        A grace of ``read_timeout`` and then ``min_body_rate``: a client trickling bytes falls behind however
        short its pauses, while a big body at a fair rate has all the time it needs.
        """
        return started + self.read_timeout + received / self.min_body_rate

    async def watch_loop_lag(self, interval: float = 0.05) -> None:
        """Run forever: measure how late the loop wakes up a timer of ``interval`` seconds.

        The figure decays by 20% per tick rather than resetting, so one long stall keeps shedding
        for a few ticks while the loop works through what piled up behind it.
        """
        try:
            while True:
                start = time.perf_counter()
                self._tick_due = start + interval
                await asyncio.sleep(interval)
                late = max(0.0, time.perf_counter() - start - interval)
                self.loop_lag = max(late, self.loop_lag * 0.8)
        finally:
            self._tick_due = math.inf  # no watcher: nothing overdue

    def count(self, transport: str, status: str) -> None:
        if self.metrics is not None:
            self.metrics.request(transport, status)

    async def journaled(self, body: bytes, content_type: str, signal: Signal = TRACES) -> bool:
        """Make a request durable before it is acknowledged (see :mod:`ragtrace_collector.internal.journal`);
        False when it cannot be (the receiver answers 503 and the client retries). Always True without one."""
        if self.journal is None:
            return True
        try:
            await self.journal.append(signal.journal_json if content_type == JSON else signal.journal_protobuf, body)
        except JournalError as exc:
            now = time.monotonic()
            if now - self._journal_complained >= 60.0:  # one line a minute while it lasts
                self._journal_complained = now
                log.error("%s: requests are refused (503) until the journal takes writes again", exc)
            return False
        return True

    def ingest(
        self, request, transport: str, body: bytes | None = None, content_type: str = PROTOBUF
    ) -> DecodedRequest:
        """Keep the valid spans of a decoded ExportTraceServiceRequest; the result says what was refused.

        ``body`` is the request as received (decompressed) with its ``content_type``, for ``forward``."""
        decoded = extract_spans(request)
        if decoded.traces:
            self.sink(decoded)
        if self.forward is not None:
            try:
                self.forward(body if body is not None else request.SerializeToString(), content_type, request)
            except Exception:  # forwarding is best effort: it never fails a request the collector took
                log.exception("could not hand an OTLP request to forwarding")
        if self.metrics is not None:
            self.metrics.spans(transport, decoded.accepted, decoded.errors)
            self.metrics.request(transport, PARTIAL if decoded.rejected else OK)
        return decoded

    def ingest_logs(self, request: Any, transport: str) -> DecodedLogs:
        """Hand the GenAI events of a decoded ExportLogsServiceRequest to the sink (as carriers for their spans);
        the other records are counted by reason and dropped. Nothing is refused: a dropped record is not retried."""
        decoded = extract_log_events(request)
        if decoded.traces:
            self.sink(decoded)
        if self.metrics is not None:
            self.metrics.log_records(decoded.accepted, decoded.dropped)
            self.metrics.request(transport, OK)
        return decoded
