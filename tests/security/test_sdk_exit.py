"""A dead, black-holed or slow collector must not hold the traced app at exit (issue 13).

Each test runs a real traced script in a subprocess against a real loopback peer: a closed port,
a TCP server that accepts and never answers, or an OTLP server that answers only after 30 s.
The script records spans, leaves some queued, and exits (or calls ``handle.shutdown``); its exit
must be bounded by the configured ``RAGTRACE_SHUTDOWN_TIMEOUT`` (2 s here) plus a small margin,
whatever the exporter's own timeout (5 s by default) and retries would take. A healthy sink must
still receive every span at exit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

from tests.support.net import free_port
from tests.support.otlp_sink import OtlpSink
from tests.support.paths import REPO

EXIT_TIMEOUT_S = 2.0
MARGIN_S = 1.5  # interpreter teardown, gRPC's included
KILL_AFTER_S = 12.0  # the unfixed SDK takes 12-19 s: stop waiting and report it

SCRIPT = textwrap.dedent("""
    import json, sys, time
    import ragtrace

    @ragtrace.retriever
    def search(query):
        return ["doc about " + query]

    @ragtrace.pipeline(name="exit-test")
    def handle(question):
        return search(question)[0]

    mode = sys.argv[1]
    if mode == "app-provider":  # the app's own provider, with the SDK's default at-exit shutdown
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        trace.set_tracer_provider(TracerProvider())
    h = ragtrace.init(service_name="exit-test", schedule_delay_ms=100)
    if mode == "two-handles":  # init() run twice (a notebook cell re-run): two exporters to flush at exit
        h = ragtrace.init(service_name="exit-test", schedule_delay_ms=100)
    for i in range(20):
        handle(f"q{i}")
    time.sleep(0.3)  # the batch worker is now inside an export (stuck, against a black hole)
    for i in range(20):
        handle(f"r{i}")  # and these wait in the queue for the final flush
    out = {}
    if mode == "shutdown":
        t0 = time.monotonic()
        h.shutdown(timeout_s=2)
        out["shutdown_s"] = time.monotonic() - t0
    out["exiting_at"] = time.time()
    print(json.dumps(out), flush=True)
""")


class BlackHole:
    """Accepts TCP connections and never reads or writes a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def stop(self) -> None:
        self._stop = True
        self.sock.close()
        for c in self.held:
            c.close()


class SlowHttp:
    """An HTTP server that reads the request and answers 200 only after 30 s (or when stopped)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.released = threading.Event()
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                self.requests += 1
                self.released.wait(30.0)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass

    def stop(self) -> None:
        self.released.set()
        self.sock.close()


class SlowGrpc:
    """An OTLP/gRPC server whose Export answers only after 30 s (or when stopped)."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        released = self.released = threading.Event()

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                released.wait(30.0)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.port = free_port()
        self.pool = futures.ThreadPoolExecutor(max_workers=8)
        self.server = grpc.server(self.pool)
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self.server)
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()

    def stop(self) -> None:
        self.released.set()
        self.server.stop(grace=None)
        self.pool.shutdown(wait=False)


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    kind, protocol = request.param
    server: Any = None
    if kind == "closed":
        port = free_port()
    elif kind == "blackhole":
        server = BlackHole()
        port = server.port
    else:
        server = SlowGrpc() if protocol == "grpc" else SlowHttp()
        port = server.port
    yield protocol, port
    if server is not None:
        server.stop()


def run_script(protocol: str, port: int, mode: str = "exit") -> tuple[dict, float, subprocess.CompletedProcess]:
    """Run the traced script; returns its JSON line, seconds from its last line to its exit, the process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGTRACE_", "OTEL_"))}
    env.update(
        RAGTRACE_ENDPOINT=f"http://127.0.0.1:{port}",
        RAGTRACE_PROTOCOL=protocol,
        RAGTRACE_SHUTDOWN_TIMEOUT=str(EXIT_TIMEOUT_S),
    )
    t0 = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, mode],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=KILL_AFTER_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"traced script still running {time.time() - t0:.1f}s after start (stdout: {exc.stdout!r})")
    ended = time.time()
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out, ended - out["exiting_at"], proc


PEERS = [(k, p) for k in ("closed", "blackhole", "slow") for p in ("http/protobuf", "grpc")]
IDS = [f"{k}-{'grpc' if p == 'grpc' else 'http'}" for k, p in PEERS]


@pytest.mark.parametrize("peer", PEERS, ids=IDS, indirect=True)
def test_exit_is_bounded_by_the_shutdown_timeout(peer: tuple[str, int]) -> None:
    protocol, port = peer
    _, exit_s, _ = run_script(protocol, port)
    assert exit_s < EXIT_TIMEOUT_S + MARGIN_S, f"exit took {exit_s:.2f}s"


@pytest.mark.parametrize("peer", PEERS, ids=IDS, indirect=True)
def test_handle_shutdown_honours_its_timeout_in_total(peer: tuple[str, int]) -> None:
    protocol, port = peer
    out, exit_s, _ = run_script(protocol, port, mode="shutdown")
    assert out["shutdown_s"] < 2.0 + 0.5, f"shutdown(timeout_s=2) took {out['shutdown_s']:.2f}s"
    assert exit_s < 1.0 + MARGIN_S, f"exit after shutdown took {exit_s:.2f}s"


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_exit_still_delivers_queued_spans_to_a_healthy_collector(protocol: str) -> None:
    sink = OtlpSink()
    try:
        port = sink.start_grpc() if protocol == "grpc" else sink.start_http()
        _, exit_s, _ = run_script(protocol, port)
        spans = sink.wait_for_spans(80, timeout=5.0)
    finally:
        sink.stop()
    assert len(spans) == 80  # 40 pipeline + 40 retriever spans, the last 40 flushed at exit
    assert exit_s < EXIT_TIMEOUT_S + MARGIN_S


@pytest.mark.parametrize(
    "peer", [("blackhole", "http/protobuf"), ("blackhole", "grpc")], ids=["http", "grpc"], indirect=True
)
def test_exit_is_bounded_when_ragtrace_exports_through_the_apps_provider(peer: tuple[str, int]) -> None:
    """The app's provider shuts down at exit on its own: that must not wait on ragtrace's exporter either."""
    protocol, port = peer
    _, exit_s, _ = run_script(protocol, port, mode="app-provider")
    assert exit_s < EXIT_TIMEOUT_S + MARGIN_S, f"exit took {exit_s:.2f}s"


@pytest.mark.parametrize("peer", [("blackhole", "http/protobuf")], ids=["http"], indirect=True)
def test_exit_bound_is_in_total_not_per_handle(peer: tuple[str, int]) -> None:
    protocol, port = peer
    _, exit_s, _ = run_script(protocol, port, mode="two-handles")
    assert exit_s < EXIT_TIMEOUT_S + MARGIN_S, f"exit took {exit_s:.2f}s"
