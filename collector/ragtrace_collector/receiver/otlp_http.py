"""OTLP/HTTP receiver: ``POST /v1/traces`` (protobuf or JSON, optionally gzip), ``/healthz``, ``/readyz``.

Replies follow the OTLP/HTTP spec: 200 with an ``ExportTraceServiceResponse`` in the request's encoding
(with ``partial_success`` when spans were refused); 400 for bodies that do not decode; 401 without the
configured bearer token; 413 above the size limit; 415 for other content types; 503 with ``Retry-After``
when saturated. Error bodies are ``google.rpc.Status`` in the request's encoding.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from collections.abc import Callable

from aiohttp import web
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.receiver import ingest as outcomes
from ragtrace_collector.receiver.decode import MalformedRequest, parse_json, parse_protobuf
from ragtrace_collector.receiver.ingest import Ingestor

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRANSPORT = "http"

# google.rpc.Code values used in Status bodies
_INVALID_ARGUMENT = 3
_RESOURCE_EXHAUSTED = 8
_UNAUTHENTICATED = 16
_UNAVAILABLE = 14
_INTERNAL = 13


class _TooLarge(Exception):
    pass


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


def _success(content_type: str, decoded: DecodedRequest) -> web.Response:
    response = ExportTraceServiceResponse()
    if decoded.rejected:
        response.partial_success.rejected_spans = decoded.rejected
        response.partial_success.error_message = decoded.error_message
    if content_type == JSON:
        body = json_format.MessageToJson(response, indent=None).encode()
    else:
        body = response.SerializeToString()
    return web.Response(status=200, body=body, content_type=content_type)


class OtlpHttpReceiver:
    """The aiohttp application and its site; ``start(host, port)`` binds (port 0 → any free port)."""

    def __init__(self, ingestor: Ingestor, ready: Callable[[], bool] = lambda: True) -> None:
        self.ingestor = ingestor
        self.ready = ready
        self.app = web.Application(client_max_size=ingestor.max_request_bytes)
        self.app.router.add_post(TRACES_PATH, self.handle_traces)
        self.app.router.add_get("/healthz", self.handle_health)
        self.app.router.add_get("/readyz", self.handle_ready)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        # Bodies are decompressed here, not by aiohttp, so a broken or oversized gzip stream gets a 400/413
        # reply (and is counted) instead of a dropped connection.
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, auto_decompress=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def handle_ready(self, request: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    async def handle_traces(self, request: web.Request) -> web.Response:
        ing = self.ingestor
        content_type = request.content_type
        reply_type = JSON if content_type == JSON else PROTOBUF
        if not ing.authorized(request.headers.get("Authorization")):
            ing.count(TRANSPORT, outcomes.UNAUTHENTICATED)
            return _reply(
                reply_type, 401, _UNAUTHENTICATED, "missing or invalid bearer token", {"WWW-Authenticate": "Bearer"}
            )
        if content_type not in (PROTOBUF, JSON):
            ing.count(TRANSPORT, outcomes.UNSUPPORTED)
            return _reply(PROTOBUF, 415, _INVALID_ARGUMENT, f"unsupported content type {content_type!r}")
        length = request.content_length
        if length is not None and length > ing.max_request_bytes:
            ing.count(TRANSPORT, outcomes.TOO_LARGE)
            return _reply(
                reply_type, 413, _RESOURCE_EXHAUSTED, f"request of {length} bytes exceeds {ing.max_request_bytes}"
            )
        if not ing.admit():
            ing.count(TRANSPORT, outcomes.OVERLOADED)
            return _reply(
                reply_type,
                503,
                _UNAVAILABLE,
                "collector saturated, retry later",
                {"Retry-After": str(ing.retry_after_seconds)},
            )
        try:
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                ing.count(TRANSPORT, outcomes.TOO_LARGE)
                return _reply(reply_type, 413, _RESOURCE_EXHAUSTED, f"request exceeds {ing.max_request_bytes} bytes")
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError) as exc:
                ing.count(TRANSPORT, outcomes.TRUNCATED)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return _reply(reply_type, 400, _INVALID_ARGUMENT, f"request body incomplete: {exc}")
            except Exception as exc:  # aiohttp payload errors: bad gzip, broken chunking, short body
                ing.count(TRANSPORT, outcomes.TRUNCATED)
                return _reply(reply_type, 400, _INVALID_ARGUMENT, f"unreadable request body: {exc}")
            encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding in ("gzip", "x-gzip", "deflate"):
                try:
                    body = _decompress(body, encoding, ing.max_request_bytes)
                except _TooLarge:
                    ing.count(TRANSPORT, outcomes.TOO_LARGE)
                    return _reply(
                        reply_type,
                        413,
                        _RESOURCE_EXHAUSTED,
                        f"decompressed request exceeds {ing.max_request_bytes} bytes",
                    )
                except zlib.error as exc:
                    ing.count(TRANSPORT, outcomes.MALFORMED)
                    return _reply(reply_type, 400, _INVALID_ARGUMENT, f"invalid {encoding} body: {exc}")
            elif encoding not in ("identity", ""):
                ing.count(TRANSPORT, outcomes.UNSUPPORTED)
                return _reply(reply_type, 415, _INVALID_ARGUMENT, f"unsupported content encoding {encoding!r}")
            try:
                message = parse_json(body) if content_type == JSON else parse_protobuf(body)
            except MalformedRequest as exc:
                ing.count(TRANSPORT, outcomes.MALFORMED)
                return _reply(reply_type, 400, _INVALID_ARGUMENT, str(exc))
            try:
                decoded = ing.ingest(message, TRANSPORT)
            except Exception:
                log.exception("failed to ingest an OTLP/HTTP request")
                ing.count(TRANSPORT, outcomes.INTERNAL)
                return _reply(reply_type, 500, _INTERNAL, "internal error while ingesting spans")
            return _success(reply_type, decoded)
        finally:
            ing.done()
