"""OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/logs`` (protobuf or JSON, optionally gzip), ``/healthz``,
``/readyz``.

Both paths run the same code (credentials, limits, admission, the journal, counting), told apart by their
:class:`~ragtrace_collector.receiver.ingest.Signal`; log requests are counted under transport ``http_logs``.
Replies follow the OTLP/HTTP spec: 200 with an ``ExportTraceServiceResponse`` (``ExportLogsServiceResponse``) in
the request's encoding (with ``partial_success`` when spans were refused; log records are never refused, those
that are no GenAI event are dropped and counted); 400 for bodies that do not decode; 401 without the
configured bearer token (403 for a token that may not ingest, 429 + ``Retry-After`` from an address that sent
too many wrong ones); 408 for a body that arrives too slowly; 413 above the size limit; 415 for other
content types; 503 with ``Retry-After`` when saturated. Error bodies are ``google.rpc.Status`` in the
request's encoding.

Slow clients: a connection that has not sent a whole request head within ``read_timeout`` (or sits idle
that long between requests) is closed by aiohttp (its ``keepalive_timeout`` runs from the connection's
start); a body is read under :meth:`Ingestor.body_deadline` and admitted only once it is complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragtrace_collector.config import ListenConfig
from ragtrace_collector.internal.component import AsyncComponent
from ragtrace_collector.internal.credentials import VIA_OTLP_HTTP, Outcome
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.receiver import ingest as outcomes
from ragtrace_collector.receiver.decode import MalformedRequest
from ragtrace_collector.receiver.ingest import GRACE_SECONDS, LOGS, TRACES, Ingestor, Signal

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRANSPORT = "http"

# google.rpc.Code values used in Status bodies
_INVALID_ARGUMENT = 3
_DEADLINE_EXCEEDED = 4
_RESOURCE_EXHAUSTED = 8
_UNAUTHENTICATED = 16
_PERMISSION_DENIED = 7
_UNAVAILABLE = 14
_INTERNAL = 13


class _TooLarge(Exception):
    pass


class _TooSlow(Exception):
    pass


class _NoRoom(Exception):
    pass


class _Body:
    """One request body read under the ingestor's deadline and byte budget; :meth:`release` returns the bytes."""

    def __init__(self, ingestor: Ingestor) -> None:
        self.ingestor = ingestor
        self.reserved = 0

    async def read(self, request: web.Request) -> bytes:
        ing = self.ingestor
        loop = asyncio.get_running_loop()
        started = loop.time()
        content = request.content
        chunks: list[bytes] = []
        while True:
            chunk = content.read_nowait()  # what has arrived already: most bodies come with their headers
            if not chunk:
                if content.at_eof():
                    return b"".join(chunks)
                remaining = ing.body_deadline(started, self.reserved) - loop.time()
                if remaining <= 0:
                    raise _TooSlow()
                try:
                    chunk = await asyncio.wait_for(content.readany(), remaining)
                except asyncio.TimeoutError:
                    raise _TooSlow() from None
                if not chunk:
                    return b"".join(chunks)
            if self.reserved + len(chunk) > ing.max_request_bytes:
                raise _TooLarge()
            if not ing.reserve(len(chunk)):
                raise _NoRoom()
            self.reserved += len(chunk)
            chunks.append(chunk)

    def release(self) -> None:
        self.ingestor.release(self.reserved)
        self.reserved = 0


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """gzip/deflate body → bytes, refusing to inflate beyond ``limit`` (zip bombs)."""
    wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    out = d.decompress(body, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        raise _TooLarge()
    out += d.flush()
    if len(out) > limit:
        raise _TooLarge()
    if not d.eof:
        raise zlib.error("truncated compressed stream")
    return out


def _status_body(content_type: str, code: int, message: str) -> bytes:
    status = status_pb2.Status(code=code, message=message)
    if content_type == JSON:
        return json.dumps({"code": code, "message": message}).encode()
    return status.SerializeToString()


def _reply(content_type: str, http_status: int, code: int, message: str, headers: dict | None = None) -> web.Response:
    return web.Response(
        status=http_status,
        body=_status_body(content_type, code, message),
        content_type=content_type,
        headers=headers,
    )


def _refuse_credential(ing: Ingestor, request: web.Request, reply_type: str, transport: str) -> web.Response | None:
    """The reply refusing a request's credential (401, 403, or 429 for an address past its limit), or None."""
    outcome = ing.authorize(request.headers.get("Authorization"), request.remote, VIA_OTLP_HTTP)
    if outcome is Outcome.OK:
        return None
    if outcome is Outcome.RATE_LIMITED:
        ing.count(transport, outcomes.RATE_LIMITED)
        wait = ing.guard.retry_after(request.remote) or 1
        message = f"too many wrong credentials from this address: retry in {wait} s"
        return _reply(reply_type, 429, _RESOURCE_EXHAUSTED, message, {"Retry-After": str(wait)})
    if outcome is Outcome.FORBIDDEN:
        ing.count(transport, outcomes.FORBIDDEN)
        return _reply(reply_type, 403, _PERMISSION_DENIED, "this token may not send spans (not an ingest token)")
    ing.count(transport, outcomes.UNAUTHENTICATED)
    return _reply(reply_type, 401, _UNAUTHENTICATED, "missing or invalid bearer token", {"WWW-Authenticate": "Bearer"})


def _success(content_type: str, decoded: DecodedRequest, signal: Signal) -> web.Response:
    response: Message
    if signal is LOGS:
        response = ExportLogsServiceResponse()
    else:
        response = ExportTraceServiceResponse()
        if decoded.rejected:
            response.partial_success.rejected_spans = decoded.rejected
            response.partial_success.error_message = decoded.error_message
    if content_type == JSON:
        body = json_format.MessageToJson(response, indent=None).encode()
    else:
        body = response.SerializeToString()
    return web.Response(status=200, body=body, content_type=content_type)


class OtlpHttpReceiver(AsyncComponent):
    """The aiohttp application on ``host``:``port`` (port 0: any free port; ``port`` is the bound one after
    :meth:`start`), a component: bound at start, closed at shutdown after ``grace_seconds`` for requests in flight."""

    def __init__(
        self,
        ingestor: Ingestor,
        host: str,
        port: int,
        *,
        ready: Callable[[], bool] = lambda: True,
        middlewares: Sequence = (),
        grace_seconds: float = GRACE_SECONDS,
    ) -> None:
        self.ingestor = ingestor
        self.host = host
        self.requested_port = port
        self.ready = ready
        self.grace_seconds = grace_seconds
        # (bodies are read by _Body); middlewares: the service's host check (ragtrace_collector.internal.hosts)
        self.app = web.Application(client_max_size=ingestor.max_request_bytes, middlewares=list(middlewares))
        self.app.router.add_post(TRACES_PATH, self.handle_traces)
        self.app.router.add_post(LOGS_PATH, self.handle_logs)
        self.app.router.add_get("/healthz", self.handle_health)
        self.app.router.add_get("/readyz", self.handle_ready)
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Task[None] | None = None
        self.port: int | None = None

    @classmethod
    def from_config(cls, listen: ListenConfig, ingestor: Ingestor, **kwargs: Any) -> OtlpHttpReceiver:
        """The receiver of ``listen.host`` / ``listen.http_port`` (which must be set)."""
        if listen.http_port is None:
            raise ValueError("listen.http_port is not set")
        return cls(ingestor, listen.host, listen.http_port, **kwargs)

    async def start(self) -> None:
        # Bodies are decompressed here, not by aiohttp, so a broken or oversized gzip stream gets a 400/413
        # reply (and is counted) instead of a dropped connection. keepalive_timeout is aiohttp's only clock on
        # a connection with no request in progress: it closes one that sends no (or half a) request head.
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            auto_decompress=False,
            keepalive_timeout=self.ingestor.read_timeout,
            shutdown_timeout=self.grace_seconds,
        )
        await self._runner.setup()  # held from here: a bind that fails is released by shutdown
        site = web.TCPSite(self._runner, self.host, self.requested_port, backlog=1024, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop listening at once, give requests in flight ``grace_seconds``, then close every connection. Past
        ``timeout`` this raises while the close goes on (it ends within the grace): nothing is left open."""
        runner, self._runner = self._runner, None
        if runner is not None:
            self._closing = asyncio.ensure_future(runner.cleanup())
        if self._closing is None or self._closing.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._closing), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"OTLP/HTTP requests still in flight after {timeout:g} s (closed within {self.grace_seconds:g} s)"
            ) from None

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def handle_ready(self, request: web.Request) -> web.Response:
        """200 only while requests are accepted: ready, and admission not refusing them all (slots aside)."""
        if self.ready() and not self.ingestor.refusing():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    async def handle_traces(self, request: web.Request) -> web.Response:
        return await self._handle(request, TRACES)

    async def handle_logs(self, request: web.Request) -> web.Response:
        """``/v1/logs``: exactly the trace path's rules; GenAI events kept for their spans, the rest counted."""
        return await self._handle(request, LOGS)

    async def _handle(self, request: web.Request, signal: Signal) -> web.Response:
        ing = self.ingestor
        transport = signal.transport(TRANSPORT)
        content_type = request.content_type
        reply_type = JSON if content_type == JSON else PROTOBUF
        refused = _refuse_credential(ing, request, reply_type, transport)
        if refused is not None:
            return refused
        if content_type not in (PROTOBUF, JSON):
            ing.count(transport, outcomes.UNSUPPORTED)
            return _reply(PROTOBUF, 415, _INVALID_ARGUMENT, f"unsupported content type {content_type!r}")
        length = request.content_length
        if length is not None and length > ing.max_request_bytes:
            ing.count(transport, outcomes.TOO_LARGE)
            return _reply(
                reply_type, 413, _RESOURCE_EXHAUSTED, f"request of {length} bytes exceeds {ing.max_request_bytes}"
            )
        if ing.saturated():  # refuse before reading: no body is buffered only to be dropped
            return self._overloaded(reply_type, transport)
        body = _Body(ing)
        try:
            return await self._receive(request, reply_type, body, signal)
        finally:
            body.release()

    def _overloaded(self, reply_type: str, transport: str) -> web.Response:
        ing = self.ingestor
        ing.count(transport, outcomes.OVERLOADED)
        return _reply(
            reply_type,
            503,
            _UNAVAILABLE,
            "collector saturated, retry later",
            {"Retry-After": str(ing.retry_after_seconds)},
        )

    async def _receive(self, request: web.Request, reply_type: str, received: _Body, signal: Signal) -> web.Response:
        ing = self.ingestor
        transport = signal.transport(TRANSPORT)
        try:
            body = await received.read(request)
        except _TooSlow:
            ing.count(transport, outcomes.TIMEOUT)
            response = _reply(
                reply_type,
                408,
                _DEADLINE_EXCEEDED,
                f"request body slower than {ing.min_body_rate} bytes/s after {ing.read_timeout:g} s",
            )
            response.force_close()  # the rest of a slow body is not worth waiting for
            return response
        except _TooLarge:
            ing.count(transport, outcomes.TOO_LARGE)
            return _reply(reply_type, 413, _RESOURCE_EXHAUSTED, f"request exceeds {ing.max_request_bytes} bytes")
        except _NoRoom:
            return self._overloaded(reply_type, transport)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError) as exc:
            ing.count(transport, outcomes.TRUNCATED)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return _reply(reply_type, 400, _INVALID_ARGUMENT, f"request body incomplete: {exc}")
        except Exception as exc:  # aiohttp payload errors: broken chunking, short body
            ing.count(transport, outcomes.TRUNCATED)
            return _reply(reply_type, 400, _INVALID_ARGUMENT, f"unreadable request body: {exc}")
        if not ing.admit():  # only a whole body takes a slot: a slow client never holds one
            return self._overloaded(reply_type, transport)
        try:
            return await self._decode(request, reply_type, body, signal)
        finally:
            ing.done()

    async def _decode(self, request: web.Request, reply_type: str, body: bytes, signal: Signal) -> web.Response:
        ing = self.ingestor
        transport = signal.transport(TRANSPORT)
        content_type = request.content_type
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            try:
                body = _decompress(body, encoding, ing.max_request_bytes)
            except _TooLarge:
                ing.count(transport, outcomes.TOO_LARGE)
                return _reply(
                    reply_type,
                    413,
                    _RESOURCE_EXHAUSTED,
                    f"decompressed request exceeds {ing.max_request_bytes} bytes",
                )
            except zlib.error as exc:
                ing.count(transport, outcomes.MALFORMED)
                return _reply(reply_type, 400, _INVALID_ARGUMENT, f"invalid {encoding} body: {exc}")
        elif encoding not in ("identity", ""):
            ing.count(transport, outcomes.UNSUPPORTED)
            return _reply(reply_type, 415, _INVALID_ARGUMENT, f"unsupported content encoding {encoding!r}")
        try:
            message = signal.parse(body, content_type)
        except MalformedRequest as exc:
            ing.count(transport, outcomes.MALFORMED)
            return _reply(reply_type, 400, _INVALID_ARGUMENT, str(exc))
        if not await ing.journaled(body, content_type, signal):  # durable before the 200, or no 200
            ing.count(transport, outcomes.UNJOURNALED)
            return _reply(
                reply_type,
                503,
                _UNAVAILABLE,
                "collector cannot store the request durably, retry later",
                {"Retry-After": str(ing.retry_after_seconds)},
            )
        try:
            if signal is LOGS:
                decoded: DecodedRequest = ing.ingest_logs(message, transport)
            else:
                decoded = ing.ingest(message, transport, body, content_type)
        except Exception:
            log.exception("failed to ingest an OTLP/HTTP %s request", signal.name)
            ing.count(transport, outcomes.INTERNAL)
            return _reply(reply_type, 500, _INTERNAL, f"internal error while ingesting {signal.name}")
        return _success(reply_type, decoded, signal)
