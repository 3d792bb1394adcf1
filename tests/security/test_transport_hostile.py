"""Hostile transport input: raw header bytes, auth scheme spelling, gRPC messages past gRPC's own limit.

Each refusal must be a clear status (401, UNAUTHENTICATED, RESOURCE_EXHAUSTED), counted in
``ragtrace_otlp_requests_total``, never a 500 with a traceback; good requests keep working beside it.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import grpc
import pytest

from ragtrace_collector.receiver.otlp_grpc import SERVICE
from tests.support import span_fixtures as F
from tests.support.receiver_stack import ServedStack as Served

PB = {"Content-Type": "application/x-protobuf"}
TOKEN = "s3cret-0123456789abcdef"


@pytest.fixture
async def serve():
    started: list[Served] = []

    async def start(**kw) -> Served:
        served = await Served(**kw).start()
        started.append(served)
        return served

    yield start
    for served in started:
        await served.stop()


def _good_body() -> bytes:
    return F.to_request(F.ragtrace_shaped())[1].SerializeToString()


async def _raw_http(port: int, head: bytes, body: bytes) -> bytes:
    """One request written byte for byte (headers that no HTTP client library would send); the reply."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def _grpc_call(target: str, body: bytes, metadata=()) -> grpc.StatusCode:
    options = [("grpc.max_send_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        try:
            await channel.unary_unary(f"/{SERVICE}/Export")(body, metadata=metadata, timeout=5)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


async def test_non_utf8_authorization_header_is_401_and_counted(serve, caplog):
    served = await serve(bearer_token=TOKEN)
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n"
        b"Authorization: Bearer \xff\xfe" + TOKEN.encode() + b"\r\n"
    )
    with caplog.at_level(logging.DEBUG):
        reply = await _raw_http(served.http.port, head, _good_body())
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    assert b"WWW-Authenticate: Bearer" in reply
    assert served.requests("http", "unauthenticated") == 1
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text
    # nothing good is lost: the right token still gets in on the same listener
    good = head.replace(b"\xff\xfe", b"")
    assert (await _raw_http(served.http.port, good, _good_body())).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "bEaReR"])
async def test_auth_scheme_is_case_insensitive(serve, scheme):
    """RFC 7235 §2.1: the auth-scheme is a case-insensitive token; the credentials stay case-sensitive."""
    served = await serve(bearer_token=TOKEN)
    body = _good_body()
    async with aiohttp.ClientSession() as session:
        for credentials, status in ((TOKEN, 200), (TOKEN.upper(), 401)):
            headers = {**PB, "Authorization": f"{scheme}  {credentials}"}
            async with session.post(served.url, data=body, headers=headers) as r:
                assert r.status == status, (credentials, await r.text())
    assert await _grpc_call(served.target, body, (("authorization", f"{scheme} {TOKEN}"),)) == grpc.StatusCode.OK
    assert await _grpc_call(served.target, body, (("authorization", f"{scheme} {TOKEN.upper()}"),)) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert served.requests("http", "ok") == 1 and served.requests("grpc", "ok") == 1
    assert served.requests("http", "unauthenticated") == 1 and served.requests("grpc", "unauthenticated") == 1


async def test_every_oversized_grpc_message_is_refused_and_counted(serve, caplog):
    limit = 10_000
    served = await serve(max_request_bytes=limit)
    # just above our limit, past twice it (where grpc-core's own limit used to refuse it unseen), far past it
    with caplog.at_level(logging.WARNING):
        for size in (limit + 1, 3 * limit, 200 * limit):
            assert await _grpc_call(served.target, b"\x0a" * size) == grpc.StatusCode.RESOURCE_EXHAUSTED, size
    assert served.requests("grpc", "too_large") == 3
    # the receiver's and gRPC's own words only: a background exporter another test left (its OTel SDK logger) may
    # log meanwhile in this process
    said = [r for r in caplog.records if r.name.startswith(("ragtrace", "grpc", "asyncio", "aiohttp"))]
    assert not said, caplog.text
    body = _good_body()
    assert await _grpc_call(served.target, body) == grpc.StatusCode.OK  # a good one still passes
    assert served.requests("grpc", "ok") == 1 and served.spans("grpc") == 3
    assert served.ingestor.pending == 0
