"""OTLP/gRPC receiver over loopback: the real OTel gRPC exporter, auth, limits, malformed bytes, shedding."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc import Compression
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from ragtrace_collector.receiver.otlp_grpc import SERVICE, OtlpGrpcReceiver
from tests.support import span_fixtures as F


@pytest.fixture
async def served(make_stack):
    receivers = []

    async def start(**kw):
        stack = make_stack(**kw)
        receiver = OtlpGrpcReceiver(stack.ingestor, "127.0.0.1", 0)
        await receiver.start()
        receivers.append(receiver)
        stack.target = f"127.0.0.1:{receiver.port}"
        return stack

    yield start
    for r in receivers:
        await r.shutdown(0)


def export(target: str, spans, **kw) -> SpanExportResult:
    exporter = OTLPSpanExporter(endpoint=f"http://{target}", insecure=True, timeout=5, **kw)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


async def call_raw(target: str, body: bytes, metadata=()):
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        method = channel.unary_unary(f"/{SERVICE}/Export")
        return await method(body, metadata=metadata, timeout=5)


async def test_real_grpc_exporter(served):
    stack = await served()
    trace_id, spans = F.finished_spans(F.openinference_llamaindex(), service="li")
    assert await asyncio.to_thread(export, stack.target, spans[:1]) == SpanExportResult.SUCCESS
    assert await asyncio.to_thread(export, stack.target, spans[1:], compression=Compression.Gzip) == (
        SpanExportResult.SUCCESS
    )
    assert stack.spans("grpc") == 4 and stack.requests("grpc", "ok") == 2
    (record,) = stack.records()
    assert record.trace_id == trace_id and record.service == "li" and record.response == F.ANSWER


async def test_partial_success(served):
    stack = await served()
    _, request = F.to_request(F.ragtrace_shaped())
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = bytes(16)
    reply = ExportTraceServiceResponse.FromString(await call_raw(stack.target, request.SerializeToString()))
    assert reply.partial_success.rejected_spans == 1
    assert "invalid trace id" in reply.partial_success.error_message
    assert stack.requests("grpc", "partial") == 1 and stack.spans("grpc") == 2


async def test_malformed_is_invalid_argument(served):
    stack = await served()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call_raw(stack.target, b"\xff\xff\xff garbage")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stack.requests("grpc", "malformed") == 1


async def test_oversized_is_resource_exhausted(served):
    stack = await served(max_request_bytes=4096)
    _, request = F.to_request(F.ragtrace_shaped(n_docs=25))
    assert 4096 < request.ByteSize() < 8192
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call_raw(stack.target, request.SerializeToString())
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stack.requests("grpc", "too_large") == 1
    with pytest.raises(grpc.aio.AioRpcError) as err:  # far beyond: refused by gRPC itself
        await call_raw(stack.target, b"\x0a" * 20_000)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stack.spans("grpc") == 0


async def test_bearer_token(served):
    stack = await served(bearer_token="s3cret-0123456789abcdef")
    _, spans = F.finished_spans(F.ragtrace_shaped())
    assert await asyncio.to_thread(export, stack.target, spans) == SpanExportResult.FAILURE
    ok = await asyncio.to_thread(
        export, stack.target, spans, headers=(("authorization", "Bearer s3cret-0123456789abcdef"),)
    )
    assert ok == SpanExportResult.SUCCESS
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call_raw(stack.target, b"", metadata=(("authorization", "Bearer nope"),))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stack.requests("grpc", "unauthenticated") == 2 and stack.spans("grpc") == 3


async def test_saturated_receiver_sheds(served):
    stack = await served(max_pending_requests=1)
    stack.ingestor.pending = 1
    _, request = F.to_request(F.ragtrace_shaped())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call_raw(stack.target, request.SerializeToString())
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stack.requests("grpc", "overloaded") == 1
    stack.ingestor.pending = 0
    await call_raw(stack.target, request.SerializeToString())
    assert stack.spans("grpc") == 3 and stack.ingestor.pending == 0
