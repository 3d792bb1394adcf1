"""The OTLP receivers as components (``internal.component``), over real sockets: built with their address, bound at
``start``, a failed bind released by ``shutdown``; a request that hangs in one receiver bounds its shutdown and
stops neither the receiver beside it nor the stores shut down after them."""

from __future__ import annotations

import asyncio
import socket
import time

import grpc
import pytest

from ragtrace_collector.config import ListenConfig
from ragtrace_collector.internal.component import Lifecycle
from ragtrace_collector.receiver.otlp_grpc import SERVICE, OtlpGrpcReceiver
from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.receiver_stack import Stack

SLACK = 1.5  # a loaded machine


def listening(port: int) -> bool:
    """Whether anything still accepts on ``port`` (a closed listener refuses; its old connections may linger in
    TIME_WAIT, which a plain bind would take for a listener)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return False
    return True


def closed(store: ResultsStore) -> bool:
    try:
        store.metrics_done("k")
    except Exception:
        return True
    return False


async def hanging_http_request(port: int) -> socket.socket:
    """A request whose body never finishes arriving: its handler waits for the rest (within the read deadline)."""
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
        "Content-Length: 1000\r\n\r\n"
    )
    sock.sendall(head.encode() + b"\x0a" * 10)
    await asyncio.sleep(0.2)  # the handler is reading the body
    return sock


def test_built_from_the_listen_section():
    stack = Stack()
    listen = ListenConfig(host="127.0.0.1", http_port=0, grpc_port=0)
    http = OtlpHttpReceiver.from_config(listen, stack.ingestor)
    grpc_receiver = OtlpGrpcReceiver.from_config(listen, stack.ingestor)
    assert (http.host, http.requested_port, http.port) == ("127.0.0.1", 0, None)
    assert (grpc_receiver.host, grpc_receiver.requested_port) == ("127.0.0.1", 0)
    with pytest.raises(ValueError, match=r"listen\.http_port is not set"):
        OtlpHttpReceiver.from_config(ListenConfig(http_port=None), stack.ingestor)
    with pytest.raises(ValueError, match=r"listen\.grpc_port is not set"):
        OtlpGrpcReceiver.from_config(ListenConfig(grpc_port=None), stack.ingestor)


async def test_a_failed_bind_is_released_by_shutdown_and_the_port_stays_the_owners():
    stack = Stack()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for receiver in (
            OtlpHttpReceiver(stack.ingestor, "127.0.0.1", port),
            OtlpGrpcReceiver(stack.ingestor, "127.0.0.1", port),
        ):
            parts = Lifecycle()
            with pytest.raises(OSError):
                await parts.start("receiver", receiver)
            assert parts.names == []  # shut down by the failed start, without a second failure
            await receiver.shutdown(1.0)  # and again: idempotent
            assert receiver.port is None


async def test_a_hanging_http_request_bounds_its_receivers_shutdown_and_stops_no_other(tmp_path):
    """A client that never sends the rest of its body: the HTTP receiver gives it ``grace_seconds`` and is reported
    when the shutdown's time is spent first; the gRPC receiver beside it and the store after them still shut down,
    and the hanging connection is closed within the grace."""
    stack = Stack(read_timeout_seconds=30.0)
    store = ResultsStore(tmp_path / "results.sqlite")
    http = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0, grace_seconds=2.0)
    grpc_receiver = OtlpGrpcReceiver(stack.ingestor, "127.0.0.1", 0)
    parts = Lifecycle()
    await parts.start("results store", store)
    await parts.start("otlp/http receiver", http)
    await parts.start_beside("otlp/grpc receiver", grpc_receiver)
    assert http.port is not None and grpc_receiver.port is not None
    sock = await hanging_http_request(http.port)
    try:
        started = time.monotonic()
        failures = await parts.shutdown(0.5)
        took = time.monotonic() - started

        assert took < 0.5 + SLACK, took
        assert [str(f) for f in failures] == ["otlp/http receiver: timed out"]
        assert not listening(http.port) and not listening(grpc_receiver.port)  # neither listens any more
        assert closed(store)
        sock.settimeout(2.0 + SLACK)
        # the hanging request's connection closed once the grace ran out
        assert await asyncio.to_thread(sock.recv, 1024) == b""
    finally:
        sock.close()
    await http.shutdown(1.0)  # idempotent: nothing left to close


async def test_a_hanging_grpc_call_gets_the_grace_then_is_cancelled_and_stops_no_other(tmp_path):
    """A call whose message never arrives: gRPC's graceful stop lets it run for ``grace_seconds`` (never past the
    shutdown's timeout), then cancels it; the HTTP receiver beside it and the store after them still shut down."""
    stack = Stack(read_timeout_seconds=30.0)
    store = ResultsStore(tmp_path / "results.sqlite")
    http = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0)
    grpc_receiver = OtlpGrpcReceiver(stack.ingestor, "127.0.0.1", 0, grace_seconds=0.5)
    parts = Lifecycle()
    await parts.start("results store", store)
    await parts.start("otlp/http receiver", http)
    await parts.start_beside("otlp/grpc receiver", grpc_receiver)
    assert http.port is not None and grpc_receiver.port is not None
    never = asyncio.Event()

    async def no_message():
        await never.wait()
        yield b""

    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_receiver.port}") as channel:
        call = channel.stream_unary(f"/{SERVICE}/Export")(no_message(), timeout=30)
        await asyncio.sleep(0.3)  # the call is in the handler, waiting for its message
        started = time.monotonic()
        failures = await parts.shutdown(5.0)
        took = time.monotonic() - started
        with pytest.raises(grpc.aio.AioRpcError):
            await call

    assert failures == []
    assert 0.4 < took < 0.5 + SLACK, took  # the grace, not the shutdown's whole timeout
    assert not listening(http.port) and not listening(grpc_receiver.port)
    assert closed(store)
