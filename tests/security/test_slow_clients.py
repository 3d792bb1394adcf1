"""Slow clients must not deny service: slowloris uploads, stalled headers, slow gRPC streams.

Every attack runs over real loopback sockets against the real receivers. The admission slots
(``limits.max_pending_requests``) are shared by OTLP/HTTP and OTLP/gRPC, so a slow HTTP upload that held
one would starve both transports; these tests send more slow uploads than there are slots and require
good clients of both transports to keep succeeding, and the slow ones to be cut off (408) and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

import aiohttp
import grpc
import pytest

from ragtrace_collector.receiver.otlp_grpc import SERVICE
from tests.support import span_fixtures as F
from tests.support.receiver_stack import ServedStack as Served

PB = {"Content-Type": "application/x-protobuf"}
READ_TIMEOUT = 1.0  # the tests' header/body grace (the default is longer; same mechanism)
TRICKLE = 0.25  # seconds between two bytes of a slow client: well inside READ_TIMEOUT, far below any byte rate
SLOW = 24  # slow clients per attack: more than the default admission slots (16)


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


async def _good_http(session: aiohttp.ClientSession, url: str, body: bytes) -> int:
    async with session.post(url, data=body, headers=PB, timeout=aiohttp.ClientTimeout(total=5)) as r:
        return r.status


async def _good_grpc(port: int, body: bytes) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            await channel.unary_unary(f"/{SERVICE}/Export")(body, timeout=5)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


async def _slowloris(port: int, length: int = 1000, head: bytes = b"", seconds: float = 6.0) -> bytes:
    """Complete headers, then the body one byte per TRICKLE; the first bytes of the reply (b"" when closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n"
        b"Content-Length: %d\r\n\r\n" % length + head
    )
    try:
        for _ in range(int(seconds / TRICKLE)):
            writer.write(b"\x0a")
            await writer.drain()
            with contextlib.suppress(asyncio.TimeoutError):
                return await asyncio.wait_for(reader.read(4096), TRICKLE)
        return b"<still receiving>"
    except ConnectionError:
        return b""
    finally:
        writer.close()


async def test_slow_uploads_do_not_starve_good_clients(serve):
    served = await serve(read_timeout_seconds=READ_TIMEOUT)
    assert served.ingestor.max_pending < SLOW
    slow = [asyncio.create_task(_slowloris(served.http.port)) for _ in range(SLOW)]
    await asyncio.sleep(0.3)  # every slow upload has sent its headers and is inside the handler
    body = _good_body()
    async with aiohttp.ClientSession() as session:
        http = await asyncio.gather(*(_good_http(session, served.url, body) for _ in range(20)))
    grpc_codes = await asyncio.gather(*(_good_grpc(served.grpc.port, body) for _ in range(10)))
    replies = await asyncio.gather(*slow)

    http_ok, grpc_ok = http.count(200) / len(http), grpc_codes.count(grpc.StatusCode.OK) / len(grpc_codes)
    print(f"good clients during {SLOW} slow uploads: http {http_ok:.0%} ok, grpc {grpc_ok:.0%} ok")
    assert (http_ok, grpc_ok) == (1.0, 1.0), (http, grpc_codes)
    assert all(reply.startswith(b"HTTP/1.1 408") for reply in replies), replies
    assert served.requests("http", "timeout") == SLOW
    assert served.requests("http", "ok") == 20 and served.requests("grpc", "ok") == 10
    assert served.ingestor.pending == 0 and served.ingestor.receiving_bytes == 0


async def test_stalled_headers_and_idle_connections_are_closed(serve):
    served = await serve(read_timeout_seconds=READ_TIMEOUT)

    async def closed_within(seconds: float, trickle_headers: bool) -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.http.port)
        if trickle_headers:
            writer.write(b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nX-Pad: ")
        try:
            for _ in range(int(seconds / TRICKLE)):
                if trickle_headers:
                    writer.write(b"a")
                    await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(4096), TRICKLE) == b"":
                        return True
                except asyncio.TimeoutError:
                    continue
            return False
        except ConnectionError:
            return True
        finally:
            writer.close()

    assert await asyncio.gather(closed_within(5.0, True), closed_within(5.0, False)) == [True, True]
    async with aiohttp.ClientSession() as session:  # the listener still serves good clients
        assert await _good_http(session, served.url, _good_body()) == 200


async def test_bodies_being_received_are_bounded_in_memory(serve):
    """Bytes buffered while bodies arrive are bounded across connections; past it: 503, counted, not lost."""
    body = _good_body()
    limit = 4 * len(body)
    served = await serve(read_timeout_seconds=READ_TIMEOUT, max_request_bytes=limit, max_receiving_bytes=limit)
    holder = asyncio.create_task(_slowloris(served.http.port, length=limit, head=b"\x0a" * (limit - 10)))
    await asyncio.sleep(0.3)  # the slow upload now holds all but 10 bytes of the budget
    assert served.ingestor.receiving_bytes >= limit - 10
    async with aiohttp.ClientSession() as session:
        assert await _good_http(session, served.url, body) == 503
        assert (await holder).startswith(b"HTTP/1.1 408")
        assert await _good_http(session, served.url, body) == 200  # the budget came back
    assert served.requests("http", "overloaded") == 1 and served.requests("http", "timeout") == 1
    assert served.ingestor.receiving_bytes == 0


# --- gRPC: grpc-core receives the message; the slot must be taken only once all of it is here ---


def _h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_literal(name: bytes, value: bytes) -> bytes:
    """HPACK "literal header field without indexing, new name", no Huffman (RFC 7541 §6.2.2); short strings."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _slow_grpc_stream(port: int, length: int = 1000) -> socket.socket:
    """A raw HTTP/2 connection with one Export call whose message (``length`` bytes) has not arrived yet."""
    sock = socket.create_connection(("127.0.0.1", port))
    headers = (
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", f"/{SERVICE}/Export".encode()),
        (b":authority", b"collector"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    )
    block = b"".join(_hpack_literal(n, v) for n, v in headers)
    sock.sendall(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + _h2_frame(0x4, 0, 0)  # our SETTINGS
        + _h2_frame(0x4, 0x1, 0)  # ACK of the server's
        + _h2_frame(0x1, 0x4, 1, block)  # HEADERS, END_HEADERS
        + _h2_frame(0x0, 0, 1, b"\x00" + struct.pack(">I", length))  # gRPC message prefix, no body yet
    )
    return sock


def _stream_end(sock: socket.socket, seconds: float) -> bytes:
    """Frames read until stream 1 ends (HEADERS or RST_STREAM with its end) or the connection closes; b"" if not."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            at = 0
            while at + 9 <= len(data):
                size, kind, flags = int.from_bytes(data[at : at + 3], "big"), data[at + 3], data[at + 4]
                stream = int.from_bytes(data[at + 5 : at + 9], "big") & 0x7FFFFFFF
                if stream == 1 and (kind == 0x3 or (kind == 0x1 and flags & 0x1)):
                    return data
                at += 9 + size
        return data  # closed
    except OSError:
        return b""


async def test_slow_grpc_streams_hold_no_slot_and_are_cut_off(serve):
    body = _good_body()
    served = await serve(read_timeout_seconds=READ_TIMEOUT, max_request_bytes=2 * len(body))
    socks = [await asyncio.to_thread(_slow_grpc_stream, served.grpc.port) for _ in range(SLOW)]

    async def trickle() -> None:
        while True:
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.send(_h2_frame(0x0, 0, 1, b"\x0a"))
            await asyncio.sleep(TRICKLE)

    trickler = asyncio.create_task(trickle())
    try:
        await asyncio.sleep(0.3)
        assert served.ingestor.pending == 0  # waiting for a message holds no slot
        codes = await asyncio.gather(*(_good_grpc(served.grpc.port, body) for _ in range(10)))
        async with aiohttp.ClientSession() as session:
            http = await asyncio.gather(*(_good_http(session, served.url, body) for _ in range(10)))
        assert codes == [grpc.StatusCode.OK] * 10 and http == [200] * 10
        # ... and the slow ones are cut off once a full-size message is overdue: DEADLINE_EXCEEDED, counted
        ends = await asyncio.gather(*(asyncio.to_thread(_stream_end, sock, 5.0) for sock in socks))
        assert all(b"grpc-status" in end for end in ends), ends
        assert served.requests("grpc", "timeout") == SLOW
    finally:
        trickler.cancel()
        for sock in socks:
            sock.close()
