"""Forwarding over real loopback: the bytes received arrive unchanged downstream, and a dead or black-hole
downstream never slows ingest; what cannot be delivered is dropped within the queue's bound, and counted."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import grpc
import pytest
from aiohttp import web
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragtrace_collector.config import load_config
from ragtrace_collector.exporter.forward import Forwarder, grpc_reason, grpc_target, traces_url
from ragtrace_collector.receiver.otlp_grpc import OtlpGrpcReceiver
from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver
from ragtrace_collector.service.app import CollectorApp
from tests.support import span_fixtures as F
from tests.support.net import free_port
from tests.support.otlp_sink import OtlpSink
from tests.support.receiver_stack import Stack

PB = {"Content-Type": "application/x-protobuf"}
FAST = 0.25  # seconds: an ingest answer slower than this would mean forwarding held the receiver up


def request_bytes(n_docs: int = 3) -> tuple[str, bytes]:
    trace_id, request = F.to_request(F.ragtrace_shaped(n_docs=n_docs))
    return trace_id, request.SerializeToString()


def as_otlp_json(body: bytes) -> bytes:
    """The same request as OTLP/JSON (hex ids, as the spec and the JS exporters write them)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    data = json_format.MessageToDict(request)
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(data).encode()


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    s = OtlpSink()
    yield s
    s.stop()


@pytest.fixture
async def served() -> AsyncIterator[Callable]:
    """Start a real receiver stack whose ingestor forwards to ``forwarder``; yields its URL and stack."""
    receivers: list[OtlpHttpReceiver] = []
    forwarders: list[Forwarder] = []

    async def start(forwarder: Forwarder | None, **kw) -> tuple[str, Stack]:
        stack = Stack(forward=forwarder.submit if forwarder is not None else None, **kw)
        receiver = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0)
        await receiver.start()
        receivers.append(receiver)
        if forwarder is not None:
            forwarders.append(forwarder)
        return f"http://127.0.0.1:{receiver.port}/v1/traces", stack

    yield start
    for r in receivers:
        await r.shutdown()
    for f in forwarders:
        await asyncio.to_thread(f.shutdown, 1.0)


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A TCP server that accepts connections and reads whatever comes, and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    port = server.getsockname()[1]
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.setblocking(False)
            held.append(conn)
            for c in held:
                try:
                    c.recv(1 << 16)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join(2)
    for c in held:
        c.close()
    server.close()


async def post_timed(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict) -> float:
    started = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as reply:
        assert reply.status == 200, await reply.text()
    return time.perf_counter() - started


# --- the bytes, unchanged -------------------------------------------------------------------------------------


async def test_protobuf_and_gzip_bodies_arrive_unchanged(served, sink):
    forwarder = Forwarder(f"http://127.0.0.1:{sink.start_http()}")
    url, stack = await served(forwarder)
    (t1, plain), (t2, other) = request_bytes(), request_bytes(n_docs=1)
    async with aiohttp.ClientSession() as s:
        await post_timed(s, url, plain, PB)
        await post_timed(s, url, gzip.compress(other), {**PB, "Content-Encoding": "gzip"})
        # refused requests are never forwarded: a malformed body, an unsupported content type
        async with s.post(url, data=b"\x0a\xff\xff", headers=PB) as r:
            assert r.status == 400
        async with s.post(url, data=b"x", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415
    assert await asyncio.to_thread(forwarder.flush, 10)
    # up to ``concurrency`` requests are in flight at once, so arrival order is not promised (nor by the OTel
    # Collector's sending queue with several consumers): the bodies are compared as a multiset
    assert sorted(sink.bodies) == sorted(
        [
            ("/v1/traces", "application/x-protobuf", plain),
            ("/v1/traces", "application/x-protobuf", other),
        ]
    )
    assert {sp["trace_id"] for sp in sink.spans()} == {t1, t2}
    assert forwarder.count("sent") == 2 and forwarder.held() == (0, 0)
    assert len(stack.records()) == 2  # forwarding took nothing from the collector's own work


async def test_json_is_passed_on_as_json(served, sink):
    forwarder = Forwarder(f"http://127.0.0.1:{sink.start_http()}/v1/traces")  # a full traces URL is kept as is
    url, _ = await served(forwarder)
    trace_id, body = request_bytes()
    body_json = as_otlp_json(body)
    async with aiohttp.ClientSession() as s:
        await post_timed(s, url, body_json, {"Content-Type": "application/json"})
    assert await asyncio.to_thread(forwarder.flush, 10)
    assert sink.bodies == [("/v1/traces", "application/json", body_json)]
    assert {sp["trace_id"] for sp in sink.spans()} == {trace_id}


async def test_grpc_forwarding_from_both_receivers(served, sink):
    """Over gRPC the protobuf bytes go as they came (from the HTTP or the gRPC receiver); JSON becomes protobuf."""
    port = sink.start_grpc()
    forwarder = Forwarder(f"http://127.0.0.1:{port}", protocol="grpc", headers={"X-Tenant": "a"})
    url, stack = await served(forwarder)
    grpc_receiver = OtlpGrpcReceiver(stack.ingestor, "127.0.0.1", 0)
    await grpc_receiver.start()
    grpc_port = grpc_receiver.port
    (t1, first), (t2, second), (t3, third) = request_bytes(), request_bytes(), request_bytes()
    try:
        async with aiohttp.ClientSession() as s:
            await post_timed(s, url, first, PB)
            await post_timed(s, url, as_otlp_json(second), {"Content-Type": "application/json"})
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            await channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")(third, timeout=5)
        assert await asyncio.to_thread(forwarder.flush, 10)
    finally:
        await grpc_receiver.shutdown()
    assert forwarder.count("sent") == 3
    assert {sp["trace_id"] for sp in sink.spans()} == {t1, t2, t3}
    received = ExportTraceServiceRequest()
    received.ParseFromString(second)
    assert sorted(sp["span_id"] for sp in sink.spans() if sp["trace_id"] == t2) == sorted(
        ss.span_id.hex() for rs in received.resource_spans for sc in rs.scope_spans for ss in sc.spans
    )


# --- a downstream that fails never slows ingest ---------------------------------------------------------------


async def test_dead_downstream_never_slows_ingest_and_drops_are_counted(served):
    forwarder = Forwarder(f"http://127.0.0.1:{free_port()}", max_attempts=2, backoff_initial=0.05)
    url, stack = await served(forwarder)
    bodies = [request_bytes()[1] for _ in range(20)]  # 20 requests, 20 traces
    async with aiohttp.ClientSession() as s:
        took = [await post_timed(s, url, body, PB) for body in bodies]
    assert max(took) < FAST, took
    assert await asyncio.to_thread(forwarder.flush, 10)
    assert forwarder.count("unreachable") == 20 and forwarder.count("sent") == 0
    assert forwarder.registry.get_sample_value("ragtrace_forward_retries_total") == 20
    assert len(stack.records()) == 20


async def test_black_hole_downstream_never_slows_ingest_and_the_queue_bound_holds(served, black_hole):
    bodies = [request_bytes()[1] for _ in range(20)]
    held = sum(map(len, bodies[:3]))
    bound = held + min(map(len, bodies)) - 1  # three requests, waiting or in flight, and no fourth
    forwarder = Forwarder(
        f"http://127.0.0.1:{black_hole}", timeout=0.5, max_attempts=1, concurrency=1, max_queue_bytes=bound
    )
    url, stack = await served(forwarder)
    async with aiohttp.ClientSession() as s:
        took = [await post_timed(s, url, body, PB) for body in bodies]
    assert max(took) < FAST, took  # the downstream never answers; the receiver did not wait for it
    assert forwarder.count("queue_full") == 17
    assert forwarder.peak_bytes <= bound and forwarder.held() == (3, held)
    assert forwarder.registry.get_sample_value("ragtrace_forward_queue_bytes") == held
    assert await asyncio.to_thread(forwarder.flush, 10)
    assert forwarder.count("timeout") == 3 and forwarder.count("sent") == 0
    assert len(stack.records()) == 20


def test_bounds_in_requests_and_too_large_bodies(black_hole):
    forwarder = Forwarder(f"http://127.0.0.1:{black_hole}", max_queue_requests=2, max_queue_bytes=100, timeout=5)
    try:
        assert forwarder.submit(b"a" * 10) and forwarder.submit(b"b" * 10)
        assert not forwarder.submit(b"c")
        assert not forwarder.submit(b"d" * 101)
        assert forwarder.count("queue_full") == 1 and forwarder.count("too_large") == 1
    finally:
        forwarder.shutdown(timeout=0.2)
    assert forwarder.count("shutdown") == 2 and forwarder.held() == (0, 0)
    assert not forwarder.submit(b"late") and forwarder.count("shutdown") == 3


# --- retries --------------------------------------------------------------------------------------------------


async def test_retryable_answers_are_retried_others_dropped(served):
    """503 (with Retry-After) is retried until accepted; 400 is dropped at once, counted under its status."""
    answers = {"/retry/v1/traces": [503, 503, 200], "/refuse/v1/traces": [400, 200]}
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.path)
        await request.read()
        status = answers[request.path].pop(0)
        return web.Response(status=status, headers={"Retry-After": "0"} if status == 503 else None)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        retrying = Forwarder(f"http://127.0.0.1:{port}/retry", backoff_initial=5.0)  # Retry-After 0 wins
        refused = Forwarder(f"http://127.0.0.1:{port}/refuse")
        url_a, _ = await served(retrying)
        url_b, _ = await served(refused)
        _, body = request_bytes()
        async with aiohttp.ClientSession() as s:
            await post_timed(s, url_a, body, PB)
            await post_timed(s, url_b, body, PB)
        assert await asyncio.to_thread(retrying.flush, 10) and await asyncio.to_thread(refused.flush, 10)
    finally:
        await runner.cleanup()
    assert seen.count("/retry/v1/traces") == 3 and seen.count("/refuse/v1/traces") == 1
    assert retrying.count("sent") == 1 and retrying.registry.get_sample_value("ragtrace_forward_retries_total") == 2
    assert refused.count("http_400") == 1 and refused.count("sent") == 0


def test_endpoint_forms_and_bounded_reasons():
    assert traces_url("http://tempo:4318") == traces_url("http://tempo:4318/v1/traces/")
    assert traces_url("http://tempo:4318") == "http://tempo:4318/v1/traces"
    assert grpc_target("tempo:4317") == ("tempo:4317", False) and grpc_target("https://t:443/") == ("t:443", True)
    reasons = {grpc_reason(code) for code in grpc.StatusCode}
    assert len(reasons) == len(grpc.StatusCode) and {"unreachable", "timeout"} <= reasons


# --- configuration and the service's wiring -------------------------------------------------------------------


def test_config_section_and_shorthand(tmp_path):
    c = load_config(environ={})
    assert c.forward.endpoint is None and c.forward.protocol == "http/protobuf"
    assert load_config(overrides={"forward": "http://tempo:4318"}, environ={}).forward.endpoint == "http://tempo:4318"
    c = load_config(environ={"RAGTRACE_FORWARD": "http://a:4318", "RAGTRACE_FORWARD__MAX_QUEUE_BYTES": "1024"})
    assert (c.forward.endpoint, c.forward.max_queue_bytes) == ("http://a:4318", 1024)
    path = tmp_path / "c.yaml"
    path.write_text("forward: {endpoint: 'jaeger:4317', protocol: grpc, headers: {authorization: 'Bearer t'}}\n")
    c = load_config(str(path), environ={})
    assert (c.forward.protocol, c.forward.headers) == ("grpc", {"authorization": "Bearer t"})
    with pytest.raises(ValueError):
        load_config(overrides={"forward": {"endpoint": "http://x", "protocol": "thrift"}}, environ={})


async def test_the_collector_forwards_what_it_receives(tmp_path, sink):
    port = sink.start_http()
    config = load_config(
        overrides={
            "role": "receiver",
            "data_dir": str(tmp_path),
            "listen": {"http_port": 0, "grpc_port": None, "metrics_port": 0},
            "forward": f"http://127.0.0.1:{port}",
        },
        environ={},
    )
    app = CollectorApp(config)
    await app.start()
    _, body = request_bytes()
    try:
        async with aiohttp.ClientSession() as s:
            await post_timed(s, f"http://127.0.0.1:{app.http_port}/v1/traces", body, PB)
            assert app.forwarder is not None and await asyncio.to_thread(app.forwarder.flush, 10)
            async with s.get(f"http://127.0.0.1:{app.metrics_port}/metrics") as r:
                exposition = await r.text()
    finally:
        await app.stop(drain_timeout=2)
    assert [b for _, _, b in sink.bodies] == [body]
    assert "ragtrace_forward_sent_total 1.0" in exposition
