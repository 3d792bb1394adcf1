"""Forwarding: the OTLP trace requests the collector received, passed on unchanged to a trace backend.

With ``forward.endpoint`` set, "app → ragtrace" still gives the user a trace UI (Phoenix, Tempo, Jaeger, an
OpenTelemetry Collector): every request the receivers ingested goes on as it came, the same protobuf bytes (a
gzip'd body decompressed), a JSON body as JSON over OTLP/HTTP, as protobuf over OTLP/gRPC.

Ingest never waits for it: :meth:`Forwarder.submit` (called by the receivers through ``Ingestor.forward``) only
appends to a queue bounded in requests and bytes, and a background thread with its own event loop sends up to
``concurrency`` requests at once. A slow, dead or black-hole backend fills the queue, never the receivers' time;
what cannot be delivered is counted in ``ragtrace_forward_dropped_total{reason}`` (a fixed set: ``queue_full``,
``too_large``, ``http_<status>``, ``grpc_<code>``, ``unreachable``, ``timeout``, ``shutdown``), never lost silently.
Retryable answers (HTTP 429/502/503/504, gRPC UNAVAILABLE..., refused connections, timeouts) are retried with
exponential backoff, ``Retry-After`` honoured, up to ``max_attempts`` in all, as the OTLP exporters do. A
redirect is never followed (it is counted ``http_3xx``, the log saying where it pointed) and a reply's body is
read up to ``MAX_REPLY_BYTES`` (see :mod:`~ragtrace_collector.exporter.sender_loop`).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge

from ragtrace_collector.config import ForwardConfig
from ragtrace_collector.exporter.sender_loop import SenderLoop, describe_status, read_reply
from ragtrace_collector.internal.component import Component
from ragtrace_collector.internal.urls import mask_credentials, mask_credentials_in

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
HTTP = "http/protobuf"
GRPC = "grpc"

# drop reasons (label ``reason`` of ragtrace_forward_dropped_total) besides http_<status> and grpc_<code>
QUEUE_FULL = "queue_full"
TOO_LARGE = "too_large"  # one request above max_queue_bytes
UNREACHABLE = "unreachable"
TIMEOUT = "timeout"
SHUTDOWN = "shutdown"
OTHER = "other"

RETRYABLE_HTTP = frozenset({429, 502, 503, 504})  # the OTLP/HTTP spec's list
RETRYABLE_GRPC = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
MAX_RETRY_AFTER = 30.0  # seconds: a longer Retry-After is shortened to this


def http_reason(status: int) -> str:
    """``http_<status>`` for a real HTTP status (a bounded set), else ``other``."""
    return f"http_{status}" if 100 <= status <= 599 else OTHER


def grpc_reason(code: grpc.StatusCode) -> str:
    """``unreachable``/``timeout`` for the transport's codes, else ``grpc_<code name>`` (17 at most)."""
    if code is grpc.StatusCode.UNAVAILABLE:
        return UNREACHABLE
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return TIMEOUT
    return f"grpc_{code.name.lower()}"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a base URL (``/v1/traces`` appended unless the endpoint already names it)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def grpc_target(endpoint: str) -> tuple[str, bool]:
    """``(host:port, tls)`` of a gRPC endpoint written as ``host:port`` or ``http(s)://host:port``."""
    tls = endpoint.startswith("https://")
    target = endpoint.split("://", 1)[-1].rstrip("/")
    return target, tls


@dataclass
class _Request:
    body: bytes
    content_type: str
    message: Any  # the parsed request, kept only when a JSON body must go on as protobuf (gRPC)
    nbytes: int


class _Drop(Exception):
    """A request given up on, with the reason it is counted under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class _Retry(Exception):
    """A retryable failure; ``after`` is the wait the backend asked for, if any."""

    def __init__(self, reason: str, detail: str, after: float | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.after = after


class Forwarder(Component):
    """Passes OTLP trace requests on to ``endpoint``; :meth:`submit` is the receivers' side and never blocks. A
    :class:`~ragtrace_collector.internal.component.Component`: sending from the moment it is built, ``shutdown``
    bounded."""

    def __init__(
        self,
        endpoint: str,
        *,
        protocol: str = HTTP,
        headers: dict[str, str] | None = None,
        compression: str = "none",
        max_queue_bytes: int = 64 * 1024 * 1024,
        max_queue_requests: int = 10_000,
        timeout: float = 10.0,
        max_attempts: int = 5,
        concurrency: int = 4,
        backoff_initial: float = 0.5,
        backoff_max: float = 5.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if protocol not in (HTTP, GRPC):
            raise ValueError(f"forward protocol must be {HTTP} or {GRPC}, got {protocol!r}")
        self.endpoint = endpoint
        self.protocol = protocol
        self.headers = dict(headers or {})
        self.compression = compression
        self.max_queue_bytes = max_queue_bytes
        self.max_queue_requests = max(1, max_queue_requests)
        self.timeout = timeout
        self.max_attempts = max(1, max_attempts)
        self.concurrency = max(1, concurrency)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.registry = registry if registry is not None else CollectorRegistry()
        self.sent = Counter(
            "ragtrace_forward_sent", "OTLP trace requests forwarded and accepted downstream.", registry=self.registry
        )
        self.dropped = Counter(
            "ragtrace_forward_dropped",
            "OTLP trace requests not forwarded, by why (queue_full, http_<status>, unreachable, timeout, ...).",
            ("reason",),
            registry=self.registry,
        )
        self.retries = Counter(
            "ragtrace_forward_retries", "Forwarding attempts retried after a retryable failure.", registry=self.registry
        )
        self.queue_bytes = Gauge(
            "ragtrace_forward_queue_bytes",
            "Bytes of OTLP requests waiting to be forwarded or in flight (bounded by forward.max_queue_bytes).",
            registry=self.registry,
        )
        self.queue_bytes.set_function(lambda: self._bytes)
        self._pending: deque[_Request] = deque()
        self._bytes = 0  # waiting and in flight: what max_queue_bytes bounds
        self._count = 0  # requests waiting and in flight
        self.peak_bytes = 0  # the most ever held (tests read it to see the bound hold)
        self._lock = threading.Condition()
        self._closing = False
        self._logged: set[str] = set()
        self._sender = SenderLoop("ragtrace-forward", self._run, "forwarding")
        self._wake = self._sender.wake
        self._sender.start()

    @classmethod
    def from_config(cls, config: ForwardConfig, registry: CollectorRegistry | None = None) -> Forwarder:
        """The forwarder a ``forward`` section asks for (its ``endpoint`` must be set)."""
        if not config.endpoint:
            raise ValueError("forward.endpoint is not set")
        return cls(
            config.endpoint,
            protocol=config.protocol,
            headers=config.headers,
            compression=config.compression,
            max_queue_bytes=config.max_queue_bytes,
            max_queue_requests=config.max_queue_requests,
            timeout=config.timeout_seconds,
            max_attempts=config.max_attempts,
            concurrency=config.concurrency,
            registry=registry,
        )

    # -- the receivers' side (O(1), never blocks on the network) ---------------------------------------
    def submit(self, body: bytes, content_type: str = PROTOBUF, message: Any = None) -> bool:
        """Queue one request as received; ``False`` (counted) when it does not fit the bounds or we are closing."""
        nbytes = len(body)
        keep = message if (self.protocol == GRPC and content_type == JSON) else None
        with self._lock:
            if self._closing:
                reason: str | None = SHUTDOWN
            elif nbytes > self.max_queue_bytes:
                reason = TOO_LARGE
            elif self._bytes + nbytes > self.max_queue_bytes or self._count >= self.max_queue_requests:
                reason = QUEUE_FULL
            else:
                reason = None
                self._pending.append(_Request(body, content_type, keep, nbytes))
                self._bytes += nbytes
                self._count += 1
                self.peak_bytes = max(self.peak_bytes, self._bytes)
        if reason is not None:
            self.dropped.labels(reason).inc()
            return False
        self._sender.signal()
        return True

    def count(self, reason: str) -> float:
        """Requests dropped for ``reason`` so far (``sent`` for those delivered)."""
        if reason == "sent":
            return self.registry.get_sample_value("ragtrace_forward_sent_total") or 0.0
        return self.registry.get_sample_value("ragtrace_forward_dropped_total", {"reason": reason}) or 0.0

    def held(self) -> tuple[int, int]:
        """(requests, bytes) waiting or in flight."""
        with self._lock:
            return self._count, self._bytes

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued request was sent or dropped; False when ``timeout`` passed first."""
        self._sender.signal()
        with self._lock:
            return self._lock.wait_for(lambda: self._count == 0, timeout)

    def shutdown(self, timeout: float | None = None) -> None:
        """Send what waits within ``timeout`` (default: one attempt's timeout), count the rest as ``shutdown``."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._sender.stop(timeout if timeout is not None else self.timeout + 1)  # past it, in-flight work is cancelled
        with self._lock:  # what never left the queue (in-flight requests were counted when cancelled)
            left = len(self._pending)
            self._bytes -= sum(r.nbytes for r in self._pending)
            self._count -= left
            self._pending.clear()
            self._lock.notify_all()
        if left:
            self.dropped.labels(SHUTDOWN).inc(left)

    # -- the sending side (its own thread and event loop) ---------------------------------------------
    def _take(self) -> _Request | None:
        with self._lock:
            return self._pending.popleft() if self._pending else None

    def _done(self, request: _Request) -> None:
        with self._lock:
            self._bytes -= request.nbytes
            self._count -= 1
            self._lock.notify_all()

    def _finished(self) -> bool:
        with self._lock:
            return self._closing and not self._pending

    async def _run(self) -> None:
        channel: grpc.aio.Channel | None = None
        session: aiohttp.ClientSession | None = None
        if self.protocol == GRPC:
            target, tls = grpc_target(self.endpoint)
            channel = (
                grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
                if tls
                else grpc.aio.insecure_channel(target)
            )
            send = self._grpc_sender(channel)
        else:
            session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(limit=self.concurrency),
                auto_decompress=False,  # the reply's body is never looked at: no gzip bomb to inflate
            )
            send = self._http_sender(session)
        try:
            await asyncio.gather(*(self._worker(send) for _ in range(self.concurrency)))
        finally:
            if session is not None:
                await session.close()
            if channel is not None:
                await channel.close(None)

    async def _worker(self, send: Any) -> None:
        while True:
            request = self._take()
            if request is None:
                if self._finished():
                    self._wake.set()  # let the other workers see it too
                    return
                self._wake.clear()
                if self._pending:  # a submit between take and clear
                    continue
                await self._wake.wait()
                continue
            try:
                await self._deliver(send, request)
            except asyncio.CancelledError:
                self.dropped.labels(SHUTDOWN).inc()
                raise
            finally:
                self._done(request)

    async def _deliver(self, send: Any, request: _Request) -> None:
        delay = self.backoff_initial
        for attempt in range(1, self.max_attempts + 1):
            try:
                await send(request)
                self.sent.inc()
                return
            except _Drop as drop:
                self._drop(drop.reason, str(drop))
                return
            except _Retry as retry:
                if attempt == self.max_attempts or self._closing:
                    self._drop(retry.reason, str(retry))
                    return
                self.retries.inc()
                wait = min(retry.after, MAX_RETRY_AFTER) if retry.after is not None else delay
                await asyncio.sleep(wait)
                delay = min(delay * 2, self.backoff_max)

    def _drop(self, reason: str, detail: str) -> None:
        self.dropped.labels(reason).inc()
        if reason not in self._logged:  # once per reason: a dead backend must not flood the log
            self._logged.add(reason)
            log.warning("forwarding to %s: a request dropped (%s: %s)", mask_credentials(self.endpoint), reason, detail)

    def _http_sender(self, session: aiohttp.ClientSession) -> Any:
        url = traces_url(self.endpoint)

        async def send(request: _Request) -> None:
            headers = {**self.headers, "Content-Type": request.content_type}
            body = request.body
            if self.compression == "gzip":
                body = gzip.compress(body, compresslevel=5)
                headers["Content-Encoding"] = "gzip"
            try:
                async with session.post(url, data=body, headers=headers, allow_redirects=False) as reply:
                    await read_reply(reply)
                    if reply.status < 300:
                        return
                    detail = describe_status(reply.status, reply.headers.get("Location"))
                    if reply.status in RETRYABLE_HTTP:
                        raise _Retry(http_reason(reply.status), detail, _retry_after(reply.headers.get("Retry-After")))
                    raise _Drop(http_reason(reply.status), detail)
            except asyncio.TimeoutError as exc:
                raise _Retry(TIMEOUT, f"no answer within {self.timeout:g} s") from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise _Retry(UNREACHABLE, mask_credentials_in(f"{type(exc).__name__}: {exc}")) from exc

        return send

    def _grpc_sender(self, channel: grpc.aio.Channel) -> Any:
        call: Any = channel.unary_unary(GRPC_METHOD)  # no (de)serialisers: the bytes go as they are
        metadata = tuple((k.lower(), v) for k, v in self.headers.items())
        compression = grpc.Compression.Gzip if self.compression == "gzip" else None
        target, _ = grpc_target(self.endpoint)  # gRPC's errors quote it without a scheme: masked here

        async def send(request: _Request) -> None:
            body = request.message.SerializeToString() if request.message is not None else request.body
            try:
                await call(body, timeout=self.timeout, metadata=metadata, compression=compression)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                detail = f"{code.name}: {exc.details()}".replace(target, mask_credentials(target))
                if code in RETRYABLE_GRPC:
                    raise _Retry(grpc_reason(code), detail) from exc
                raise _Drop(grpc_reason(code), detail) from exc

        return send


def _retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header given in seconds (an HTTP date is ignored: backoff applies)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
