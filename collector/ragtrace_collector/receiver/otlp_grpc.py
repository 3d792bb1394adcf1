"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` and
``opentelemetry.proto.collector.logs.v1.LogsService/Export`` on ``grpc.aio``.

Both services run the same handler (:class:`ExportService`), told apart by their
:class:`~ragtrace_collector.receiver.ingest.Signal`; log calls are counted under transport ``grpc_logs``, their
GenAI events kept for their spans and every other record counted and dropped.

Same rules as the HTTP receiver: bearer token in the ``authorization`` metadata (else
``UNAUTHENTICATED``), the size limit (``RESOURCE_EXHAUSTED`` above it), ``RESOURCE_EXHAUSTED`` when
saturated, ``INVALID_ARGUMENT`` for bytes that do not decode, partial success for refused spans.

The wire method is registered with raw-bytes (de)serialisers so malformed payloads reach us and are
counted (decoding is the same upb parse), and as stream→unary so every call reaches the handler: gRPC's
own ``max_receive_message_length`` (twice ours, so it bounds memory before we see a byte) refuses a bigger
message by itself, and the handler then reads no message at all, which it counts as ``too_large``. A call
takes an admission slot only once grpc-core has received its whole message, so a slow client holds none;
and the message must arrive within the deadline of a full-size HTTP body (grpc-core shows no progress before
it is whole), else ``DEADLINE_EXCEEDED``, counted as ``timeout``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ragtrace_collector.config import ListenConfig
from ragtrace_collector.internal.component import AsyncComponent
from ragtrace_collector.internal.credentials import VIA_OTLP_GRPC, Outcome, Scope
from ragtrace_collector.receiver import ingest as outcomes
from ragtrace_collector.receiver.decode import MalformedRequest
from ragtrace_collector.receiver.ingest import GRACE_SECONDS, LOGS, PROTOBUF, TRACES, Ingestor, Signal

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
TRANSPORT = "grpc"


def peer_address(peer: str | None) -> str | None:
    """The IP address in a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``), for the limiter."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest[1 : rest.find("]")] if rest.startswith("[") and "]" in rest else rest
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    return peer


class ExportService:
    """One OTLP export service (traces or logs): ``ExportBytes`` is the registered ``Export`` (wire bytes in, see
    the module docstring); there is no second path that could skip the credential check, admission or the journal."""

    def __init__(self, ingestor: Ingestor, signal: Signal = TRACES) -> None:
        self.ingestor = ingestor
        self.signal = signal
        self.transport = signal.transport(TRANSPORT)

    async def _authenticate(self, context: grpc.aio.ServicerContext) -> None:
        ing = self.ingestor
        if not ing.guard.required(Scope.INGEST):
            return
        header: str | None = None
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                header = value if isinstance(value, str) else None  # bytes only for "-bin" keys
                break
        address = peer_address(context.peer())
        outcome = ing.authorize(header, address, VIA_OTLP_GRPC)
        if outcome is Outcome.OK:
            return
        if outcome is Outcome.RATE_LIMITED:
            ing.count(self.transport, outcomes.RATE_LIMITED)
            wait = ing.guard.retry_after(address) or 1
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"too many wrong credentials from this address: retry in {wait} s"
            )
        if outcome is Outcome.FORBIDDEN:
            ing.count(self.transport, outcomes.FORBIDDEN)
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, "this token may not send spans (not an ingest token)"
            )
        ing.count(self.transport, outcomes.UNAUTHENTICATED)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")

    async def _admit(self, context: grpc.aio.ServicerContext) -> None:
        ing = self.ingestor
        if not ing.admit():
            ing.count(self.transport, outcomes.OVERLOADED)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "collector saturated, retry later")

    def _respond(self, request: Message, body: bytes) -> Message:
        if self.signal is LOGS:
            self.ingestor.ingest_logs(request, self.transport)
            return ExportLogsServiceResponse()
        decoded = self.ingestor.ingest(request, self.transport, body)
        response = ExportTraceServiceResponse()
        if decoded.rejected:
            response.partial_success.rejected_spans = decoded.rejected
            response.partial_success.error_message = decoded.error_message
        return response

    async def ExportBytes(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
        """One unary Export, read with ``context.read()`` (see the module docstring for why stream→unary)."""
        ing = self.ingestor
        await self._authenticate(context)
        deadline = ing.body_deadline(0.0, ing.max_request_bytes)
        try:
            body = await asyncio.wait_for(context.read(), deadline)
        except asyncio.TimeoutError:
            ing.count(self.transport, outcomes.TIMEOUT)
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"request message not received in {deadline:g} s")
        except asyncio.CancelledError:  # the client went away (or its deadline passed) mid-message
            ing.count(self.transport, outcomes.TRUNCATED)
            raise
        if not isinstance(body, bytes):  # EOF: grpc-core refused the message (over its limit), or none was sent
            ing.count(self.transport, outcomes.TOO_LARGE)
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"request message missing or over {ing.max_request_bytes} bytes"
            )
        await self._admit(context)
        try:
            if len(body) > ing.max_request_bytes:
                ing.count(self.transport, outcomes.TOO_LARGE)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "request exceeds the size limit")
            try:
                request = self.signal.parse_protobuf(body)
            except MalformedRequest as exc:
                ing.count(self.transport, outcomes.MALFORMED)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            if not await ing.journaled(body, PROTOBUF, self.signal):  # durable before the reply, or no success
                ing.count(self.transport, outcomes.UNJOURNALED)
                await context.abort(grpc.StatusCode.UNAVAILABLE, "collector cannot store the request durably")
            try:
                response = self._respond(request, body)
            except Exception:
                log.exception("failed to ingest an OTLP/gRPC %s request", self.signal.name)
                ing.count(self.transport, outcomes.INTERNAL)
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error while ingesting {self.signal.name}")
            return response.SerializeToString()
        finally:
            ing.done()


class OtlpGrpcReceiver(AsyncComponent):
    """A ``grpc.aio`` server carrying the trace and logs services on ``host``:``port`` (port 0: any free port;
    ``port`` is the bound one after :meth:`start`), a component: bound at start, stopped gracefully at shutdown."""

    def __init__(self, ingestor: Ingestor, host: str, port: int, *, grace_seconds: float = GRACE_SECONDS) -> None:
        self.ingestor = ingestor
        self.host = host
        self.requested_port = port
        self.grace_seconds = grace_seconds
        self.service = ExportService(ingestor, TRACES)
        self.logs = ExportService(ingestor, LOGS)
        self.server: grpc.aio.Server | None = None
        self.port: int | None = None

    @classmethod
    def from_config(cls, listen: ListenConfig, ingestor: Ingestor, **kwargs: Any) -> OtlpGrpcReceiver:
        """The receiver of ``listen.host`` / ``listen.grpc_port`` (which must be set)."""
        if listen.grpc_port is None:
            raise ValueError("listen.grpc_port is not set")
        return cls(ingestor, listen.host, listen.grpc_port, **kwargs)

    async def start(self) -> None:
        limit = self.ingestor.max_request_bytes
        # held from here: a server that failed to bind is stopped by shutdown (stopping one never started is a no-op)
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", 2 * limit),
                ("grpc.max_send_message_length", 4 * 1024 * 1024),
                ("grpc.so_reuseport", 0),
            ]
        )
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {"Export": grpc.stream_unary_rpc_method_handler(self.service.ExportBytes)},
        )
        logs = grpc.method_handlers_generic_handler(
            LOGS_SERVICE,
            {"Export": grpc.stream_unary_rpc_method_handler(self.logs.ExportBytes)},
        )
        self.server.add_generic_rpc_handlers((handler, logs))
        address = f"{self.host}:{self.requested_port}"
        try:
            bound = self.server.add_insecure_port(address)
        except RuntimeError:  # grpc's "Failed to bind" (address in use, no such address)
            bound = 0
        if not bound:
            raise OSError(f"cannot bind OTLP/gRPC on {address} (address in use or not available)")
        await self.server.start()
        self.port = bound

    async def shutdown(self, timeout: float | None = None) -> None:
        """Refuse new calls at once and let those in flight finish for ``grace_seconds`` (at most ``timeout``),
        then cancel them: gRPC's graceful stop, bounded."""
        server, self.server = self.server, None
        if server is None:
            return
        grace = self.grace_seconds if timeout is None else max(0.0, min(self.grace_seconds, timeout))
        await server.stop(grace)
