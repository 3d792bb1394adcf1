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
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from typing import Any

from ragtrace_collector.config import LimitsConfig
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.receiver.decode import extract_spans

# Request outcomes (label ``status`` of ragtrace_otlp_requests_total)
OK = "ok"
PARTIAL = "partial"
MALFORMED = "malformed"
TRUNCATED = "truncated"
TOO_LARGE = "too_large"
UNAUTHENTICATED = "unauthenticated"
TIMEOUT = "timeout"  # the body did not arrive in time (read deadline / minimum byte rate)
OVERLOADED = "overloaded"
UNSUPPORTED = "unsupported_media_type"
INTERNAL = "internal_error"

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# (decoded body, its content type, the parsed ExportTraceServiceRequest) of an ingested request; never blocks
Forward = Callable[[bytes, str, Any], object]

_LIMITS = LimitsConfig()  # the defaults are the config's (``limits`` section), written once there


class Ingestor:
    """Turns decoded OTLP requests into spans for the assembler, counting everything on the way."""

    def __init__(
        self,
        sink: Callable[[DecodedRequest], None],
        metrics=None,
        bearer_token: str | None = None,
        max_pending_requests: int = _LIMITS.max_pending_requests,
        max_request_bytes: int = _LIMITS.max_request_bytes,
        retry_after_seconds: int = _LIMITS.retry_after_seconds,
        max_loop_lag_seconds: float | None = _LIMITS.max_loop_lag_seconds,
        pressure: Callable[[], bool] | None = None,
        read_timeout_seconds: float = _LIMITS.read_timeout_seconds,
        min_body_bytes_per_second: int = _LIMITS.min_body_bytes_per_second,
        max_receiving_bytes: int = _LIMITS.max_receiving_bytes,
        forward: Forward | None = None,
    ) -> None:
        self.sink = sink
        self.metrics = metrics
        self.bearer_token = bearer_token
        self.max_pending = max(1, max_pending_requests)
        self.max_request_bytes = max_request_bytes
        self.retry_after_seconds = retry_after_seconds
        self.pending = 0
        self.max_loop_lag = max_loop_lag_seconds
        self.loop_lag = 0.0  # seconds the event loop was late on its last check (see watch_loop_lag)
        self.pressure = pressure  # downstream says it is behind (the record sweep, assembly memory)
        self.expected_authorization = bearer_token.encode() if bearer_token else None  # the credentials alone
        self.read_timeout = read_timeout_seconds
        self.min_body_rate = max(1, min_body_bytes_per_second)
        self.max_receiving_bytes = max(max_receiving_bytes, max_request_bytes)  # one full-size body always fits
        self.receiving_bytes = 0  # body bytes held by requests not finished yet (see reserve)
        self.forward = forward  # ingested requests handed on unchanged (the forwarding exporter), if any

    def authorized(self, header: str | None) -> bool:
        """Constant-time check of an ``Authorization`` header (always true without a configured token).

        The scheme is matched case-insensitively (RFC 7235 §2.1), the token exactly. A header that is not
        valid text (aiohttp hands raw non-UTF-8 bytes over as surrogates) is refused like a wrong token.
        """
        if self.expected_authorization is None:
            return True
        if not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        try:
            given = credentials.strip().encode()
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(given, self.expected_authorization) & (scheme.lower() == "bearer")

    def saturated(self) -> bool:
        """True while new requests are refused: every slot taken, the loop lagging, or downstream behind."""
        if self.pending >= self.max_pending:
            return True
        if self.max_loop_lag is not None and self.loop_lag > self.max_loop_lag:
            return True
        return self.pressure is not None and self.pressure()

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
        while True:
            start = time.perf_counter()
            await asyncio.sleep(interval)
            late = max(0.0, time.perf_counter() - start - interval)
            self.loop_lag = max(late, self.loop_lag * 0.8)

    def count(self, transport: str, status: str) -> None:
        if self.metrics is not None:
            self.metrics.request(transport, status)

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
