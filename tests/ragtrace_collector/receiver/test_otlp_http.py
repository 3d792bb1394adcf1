"""OTLP/HTTP receiver over loopback: the real OTel exporter, JSON, gzip, and every kind of bad request."""

from __future__ import annotations

import asyncio
import gzip
import socket

import aiohttp
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver
from tests.support import span_fixtures as F

PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
async def served(make_stack):
    receivers = []

    async def start(**kw):
        stack = make_stack(**kw)
        receiver = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0)
        await receiver.start()
        receivers.append(receiver)
        stack.url = f"http://127.0.0.1:{receiver.port}"
        stack.receiver = receiver
        return stack

    yield start
    for r in receivers:
        await r.shutdown()


def export(url: str, spans, **kw) -> SpanExportResult:
    exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", timeout=5, **kw)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


async def test_real_exporter_protobuf_and_gzip(served):
    stack = await served()
    trace_id, spans = F.finished_spans(F.ragtrace_shaped(), service="bot")
    assert await asyncio.to_thread(export, stack.url, spans[:2]) == SpanExportResult.SUCCESS
    assert (
        await asyncio.to_thread(export, stack.url, spans[2:], compression=Compression.Gzip) == SpanExportResult.SUCCESS
    )
    assert stack.spans("http") == 3 and stack.requests("http", "ok") == 2
    (record,) = stack.records()
    assert record.trace_id == trace_id and record.service == "bot" and record.response == F.ANSWER


async def test_json_with_hex_ids_and_partial_success(served):
    stack = await served()
    good, bad = "5b8efff798038103d269b633813fc60c", "0" * 32
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "js"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": good,
                                "spanId": "eee19b7ec3c1b174",
                                "name": "rag",
                                "kind": 1,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "attributes": [
                                    {"key": "input.value", "value": {"stringValue": "q?"}},
                                    {"key": "openinference.span.kind", "value": {"stringValue": "CHAIN"}},
                                    {"key": "llm.token_count.prompt", "value": {"intValue": "12"}},
                                ],
                            },
                            {"traceId": bad, "spanId": "eee19b7ec3c1b175", "name": "x"},
                            {"traceId": "zz-not-hex", "spanId": "eee19b7ec3c1b176", "name": "y"},
                        ]
                    }
                ],
            }
        ]
    }
    async with aiohttp.ClientSession() as s, s.post(stack.url + "/v1/traces", json=body) as r:
        assert r.status == 200 and r.content_type == "application/json"
        reply = await r.json()
    assert reply["partialSuccess"]["rejectedSpans"] == "2"
    assert "invalid trace id" in reply["partialSuccess"]["errorMessage"]
    assert stack.requests("http", "partial") == 1 and stack.spans("http") == 1
    assert stack.registry.get_sample_value("ragtrace_spans_rejected_total", {"reason": "invalid trace id"}) == 2
    (record,) = stack.records()
    assert record.trace_id == good and record.user_input == "q?" and record.service == "js"
    assert record.request_duration_seconds == pytest.approx(1.0)


async def test_protobuf_partial_success(served):
    stack = await served()
    _, request = F.to_request(F.ragtrace_shaped())
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01" * 8  # wrong length
    request.resource_spans[0].scope_spans[0].spans[1].span_id = b""
    async with (
        aiohttp.ClientSession() as s,
        s.post(stack.url + "/v1/traces", data=request.SerializeToString(), headers=PB) as r,
    ):
        assert r.status == 200
        reply = ExportTraceServiceResponse.FromString(await r.read())
    assert reply.partial_success.rejected_spans == 2
    assert "invalid trace id" in reply.partial_success.error_message
    assert "invalid span id" in reply.partial_success.error_message
    assert stack.spans("http") == 1


async def test_malformed_and_truncated_bodies_are_400_and_counted(served):
    stack = await served()
    _, request = F.to_request(F.ragtrace_shaped())
    wire = request.SerializeToString()
    async with aiohttp.ClientSession() as s:
        for body in (b"\xff\xff\xff\xff garbage", wire[: len(wire) // 2]):
            async with s.post(stack.url + "/v1/traces", data=body, headers=PB) as r:
                assert r.status == 400
                status = status_pb2.Status.FromString(await r.read())
                assert status.code == 3 and "OTLP" in status.message
        async with s.post(
            stack.url + "/v1/traces", data=b"{not json", headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 400 and "invalid JSON" in (await r.json())["message"]
        async with s.post(
            stack.url + "/v1/traces", data=b"\x1f\x8b garbage", headers={**PB, "Content-Encoding": "gzip"}
        ) as r:
            assert r.status == 400
        async with s.post(stack.url + "/v1/traces", data=b"x", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415
        async with s.post(
            stack.url + "/v1/traces", data=gzip.compress(wire)[:-20], headers={**PB, "Content-Encoding": "gzip"}
        ) as r:
            assert r.status == 400 and "gzip" in status_pb2.Status.FromString(await r.read()).message
    assert stack.requests("http", "malformed") == 5
    assert stack.requests("http", "unsupported_media_type") == 1
    assert stack.spans("http") == 0


async def test_body_cut_short_by_the_client_is_counted(served):
    stack = await served()

    def send_short():
        with socket.create_connection(("127.0.0.1", stack.receiver.port)) as sock:
            sock.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                b"Content-Length: 1000\r\n\r\n" + b"\x0a" * 100
            )
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(5)
            try:
                return sock.recv(1000)
            except OSError:
                return b""

    await asyncio.to_thread(send_short)
    for _ in range(50):
        if stack.requests("http", "truncated"):
            break
        await asyncio.sleep(0.02)
    assert stack.requests("http", "truncated") == 1
    assert stack.ingestor.pending == 0


async def test_oversized_is_413(served):
    stack = await served(max_request_bytes=2000)
    big = b"\x0a" * 5000
    async with aiohttp.ClientSession() as s, s.post(stack.url + "/v1/traces", data=big, headers=PB) as r:
        assert r.status == 413

        # no Content-Length (chunked): the limit still holds while reading
        async def chunks():
            for _ in range(5):
                yield b"\x0a" * 1000

        async with s.post(stack.url + "/v1/traces", data=chunks(), headers=PB) as r:
            assert r.status == 413
        # gzip: the limit applies to the decompressed size
        async with s.post(
            stack.url + "/v1/traces", data=gzip.compress(b"\x00" * 100_000), headers={**PB, "Content-Encoding": "gzip"}
        ) as r:
            assert r.status == 413
    assert stack.requests("http", "too_large") == 3


async def test_bearer_token(served):
    stack = await served(bearer_token="s3cret-0123456789abcdef")
    _, spans = F.finished_spans(F.ragtrace_shaped())
    assert await asyncio.to_thread(export, stack.url, spans) == SpanExportResult.FAILURE
    assert await asyncio.to_thread(export, stack.url, spans, headers={"Authorization": "Bearer wrong"}) == (
        SpanExportResult.FAILURE
    )
    assert await asyncio.to_thread(
        export, stack.url, spans, headers={"Authorization": "Bearer s3cret-0123456789abcdef"}
    ) == (SpanExportResult.SUCCESS)
    assert stack.requests("http", "unauthenticated") == 2 and stack.spans("http") == 3
    async with aiohttp.ClientSession() as s, s.post(stack.url + "/v1/traces", data=b"", headers=PB) as r:
        assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"


async def test_saturated_receiver_sheds_with_retry_after(served):
    stack = await served(max_pending_requests=2, retry_after_seconds=3)
    stack.ingestor.pending = 2  # two requests being received right now
    _, request = F.to_request(F.ragtrace_shaped())
    async with (
        aiohttp.ClientSession() as s,
        s.post(stack.url + "/v1/traces", data=request.SerializeToString(), headers=PB) as r,
    ):
        assert r.status == 503 and r.headers["Retry-After"] == "3"
        stack.ingestor.pending = 1
        async with s.post(stack.url + "/v1/traces", data=request.SerializeToString(), headers=PB) as r:
            assert r.status == 200
    assert stack.requests("http", "overloaded") == 1 and stack.ingestor.pending == 1


async def test_health_and_readiness(make_stack):
    stack = make_stack()
    ready = [False]
    receiver = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0, ready=lambda: ready[0])
    await receiver.start()
    try:
        async with aiohttp.ClientSession() as s:
            base = f"http://127.0.0.1:{receiver.port}"
            async with s.get(base + "/healthz") as r:
                assert r.status == 200
            async with s.get(base + "/readyz") as r:
                assert r.status == 503
            ready[0] = True
            async with s.get(base + "/readyz") as r:
                assert r.status == 200
    finally:
        await receiver.shutdown()


async def test_event_loop_backlog_sheds(served):
    stack = await served(max_loop_lag_seconds=0.2)
    watcher = asyncio.create_task(stack.ingestor.watch_loop_lag(interval=0.02))
    try:
        await asyncio.sleep(0.05)
        assert stack.ingestor.admit() and stack.ingestor.loop_lag < 0.2
        stack.ingestor.done()

        async def hog():
            import time

            time.sleep(0.4)  # the loop is stuck: work piles up behind it

        await asyncio.gather(hog(), asyncio.sleep(0.021))
        assert stack.ingestor.loop_lag > 0.2
        assert not stack.ingestor.admit()
        _, request = F.to_request(F.ragtrace_shaped())
        async with (
            aiohttp.ClientSession() as s,
            s.post(stack.url + "/v1/traces", data=request.SerializeToString(), headers=PB) as r,
        ):
            shed = r.status
        for _ in range(100):  # the loop catches up: admitted again
            await asyncio.sleep(0.02)
            if stack.ingestor.loop_lag < 0.2:
                break
        assert stack.ingestor.admit()
        stack.ingestor.done()
        assert shed == 503 or stack.requests("http", "ok") == 1  # (a slow machine may have decayed it already)
    finally:
        watcher.cancel()
