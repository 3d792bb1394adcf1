"""Hostile downstreams, over real loopback: what a trace backend, Phoenix or an OTLP logs endpoint answers must not
cost the collector its memory, nor turn a POST into something else.

* A reply of 256 MiB (streamed by the stand-in chunk by chunk, never held by it) is read up to a small cap and the
  rest left unread: the collector's traced memory stays within tens of MiB and the outcome is still counted right
  (a 2xx is sent, a 4xx is the failure it was).
* A redirect is never followed: a 302 to a login page would turn the POST into a GET that gets 200 (counted sent,
  the data lost); a 307 would re-post the data to wherever the downstream points. Each is a failure, counted as
  one, with a log line saying where the redirect pointed, its credentials masked.
"""

from __future__ import annotations

import logging
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

from ragtrace_collector.exporter.forward import Forwarder
from ragtrace_collector.exporter.otlp_events import EvaluationEvents, make_exporter
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from tests.support import span_fixtures as F
from tests.support.net import serve_http

HUGE = 256 * 1024 * 1024  # bytes the hostile downstream offers
CHUNK = bytes(1024 * 1024)  # what it writes at a time (one buffer, reused: the stand-in holds no more)
MAX_GROWTH = 50 * 1024 * 1024  # the most the collector's traced memory may grow while it gets such a reply
PASSWORD = "hunter2-downstream"
RECORD = RagRecord(trace_id="5" * 32, pipeline="qa", metadata={"root_span_id": "b7ad6b7169203331"})
RESULT = MetricResult("faithfulness", "scored", 0.5, label="fail")


class Downstream:
    """A loopback HTTP server answering every POST ``status`` with ``body_bytes`` of body (streamed), and a
    ``Location`` of a login page holding credentials for a 3xx; it records each request's method and path and
    how many body bytes it managed to write."""

    def __init__(self, status: int, body_bytes: int = 0, body: bytes = b"") -> None:
        self.status = status
        self.body_bytes = body_bytes
        self.body = body  # answered whole instead, when given
        self.requests: list[tuple[str, str]] = []
        self.written: list[int] = []  # per reply: body bytes written before the client finished or hung up
        self.lock = threading.Lock()
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with downstream.lock:
                    downstream.requests.append((self.command, self.path))
                if self.path.startswith("/login"):  # where the redirect points: it takes anything
                    self._reply(200, b'{"login": "please"}')
                elif 300 <= downstream.status < 400:
                    self.send_response(downstream.status)
                    self.send_header("Location", downstream.login_url)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif downstream.body:
                    self._reply(downstream.status, downstream.body)
                else:
                    self._stream(downstream.status, downstream.body_bytes)

            do_POST = do_GET = do_PUT = _answer

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, status: int, size: int) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                written = 0
                try:
                    while written < size:
                        n = min(len(CHUNK), size - written)
                        self.wfile.write(CHUNK if n == len(CHUNK) else CHUNK[:n])
                        written += n
                except OSError:  # the client hung up: what the collector should do with such a reply
                    self.close_connection = True
                finally:
                    with downstream.lock:
                        downstream.written.append(written)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = serve_http(Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.login_url = f"http://intruder:{PASSWORD}@127.0.0.1:{self.port}/login"

    def wait_replies(self, n: int, timeout: float = 30.0) -> list[int]:
        """The body bytes of the first ``n`` streamed replies, once each ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.written) >= n:
                    return list(self.written)
            time.sleep(0.02)
        raise TimeoutError(f"{n} replies did not end within {timeout} s")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def downstream() -> Iterator[Callable[..., Downstream]]:
    started: list[Downstream] = []

    def start(status: int, body_bytes: int = 0, body: bytes = b"") -> Downstream:
        started.append(Downstream(status, body_bytes, body))
        return started[-1]

    yield start
    for d in started:
        d.stop()


@contextmanager
def traced_peak() -> Iterator[list[int]]:
    """The peak growth of Python's allocations (all threads) inside the block, in bytes (read after it)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    peak: list[int] = []
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()


class Spy(LogRecordExporter):
    """The real OTLP log exporter, its export results kept."""

    def __init__(self, inner: LogRecordExporter) -> None:
        self.inner = inner
        self.results: list[LogRecordExportResult] = []

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        result = self.inner.export(batch)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def forward_once(url: str) -> Forwarder:
    """A forwarder that sent one request to ``url`` (one attempt) and is done with it."""
    forwarder = Forwarder(url, timeout=60.0, max_attempts=1)
    try:
        forwarder.submit(F.to_request(F.ragtrace_shaped())[1].SerializeToString())
        assert forwarder.flush(90.0)
    finally:
        forwarder.shutdown(1.0)
    return forwarder


def annotate_once(url: str) -> PhoenixAnnotations:
    """A Phoenix exporter that sent one score (a span and a trace annotation, one attempt each) to ``url``."""
    sink = PhoenixAnnotations(url, timeout=60.0, max_attempts=1, flush_interval=0.02)
    try:
        assert sink.emit(RECORD, [RESULT], "local") == 2
        assert sink.flush(90.0)
    finally:
        sink.shutdown(1.0)
    return sink


def export_once(url: str) -> list[LogRecordExportResult]:
    """The results of the OTLP log exporter sending one evaluation event to ``url``."""
    spy = Spy(make_exporter(url, timeout=60.0))
    events = EvaluationEvents(exporter=spy, batch=False)
    try:
        assert events.emit(RECORD, [RESULT], "local") == 1
    finally:
        events.shutdown()
    return spy.results


def outcome(exporter: str, url: str) -> Any:
    """What ``exporter`` counted for the one request it sent to ``url``."""
    if exporter == "forward":
        forwarder = forward_once(url)
        return {r: forwarder.count(r) for r in ("sent", "http_400", "http_302", "http_307") if forwarder.count(r)}
    if exporter == "phoenix":
        sink = annotate_once(url)
        return {o: sink.count(o) for o in ("sent", "rejected", "unreachable") if sink.count(o)}
    return [r.name for r in export_once(url)]


EXPECTED = {
    ("forward", 200): {"sent": 1.0},
    ("forward", 400): {"http_400": 1.0},
    ("phoenix", 200): {"sent": 2.0},
    ("phoenix", 400): {"rejected": 2.0},
    ("otlp_events", 200): ["SUCCESS"],
    ("otlp_events", 400): ["FAILURE"],
    ("forward", 302): {"http_302": 1.0},
    ("forward", 307): {"http_307": 1.0},
    ("phoenix", 302): {"rejected": 2.0},
    ("phoenix", 307): {"rejected": 2.0},
    ("otlp_events", 302): ["FAILURE"],
    ("otlp_events", 307): ["FAILURE"],
}
EXPORTERS = ("forward", "phoenix", "otlp_events")


@pytest.mark.parametrize("status", [200, 400])
@pytest.mark.parametrize("exporter", EXPORTERS)
def test_a_256_mib_reply_is_read_up_to_a_cap_and_counted(downstream, exporter, status):
    server = downstream(status, HUGE)
    with traced_peak() as peak:
        counted = outcome(exporter, server.url)
        written = server.wait_replies(len(server.requests))
    assert counted == EXPECTED[(exporter, status)]
    assert peak[0] < MAX_GROWTH, f"{exporter}: memory grew by {peak[0] / 2**20:.0f} MiB for a {status} reply"
    assert max(written) < HUGE // 4, f"{exporter} read {max(written) / 2**20:.0f} MiB of the reply: it must hang up"


@pytest.mark.parametrize("status", [302, 307])
@pytest.mark.parametrize("exporter", EXPORTERS)
def test_a_redirect_is_a_failure_never_followed(downstream, caplog, exporter, status):
    server = downstream(status)
    caplog.set_level(logging.WARNING)
    counted = outcome(exporter, server.url)
    assert counted == EXPECTED[(exporter, status)]
    assert all(not path.startswith("/login") for _, path in server.requests), server.requests
    assert {method for method, _ in server.requests} == {"POST"}
    masked = f"http://intruder:***@127.0.0.1:{server.port}/login"
    assert f"redirect to {masked}" in caplog.text, caplog.text
    assert PASSWORD not in caplog.text


def test_a_small_error_reply_still_shows_in_the_log(downstream, caplog):
    """The cap keeps what a person needs: Phoenix's reason for refusing, quoted in its warning."""
    server = downstream(422, body=b'{"detail": "span_id is not a valid span id"}')
    caplog.set_level(logging.WARNING)
    assert annotate_once(server.url).count("rejected") == 2
    assert 'HTTP 422: {"detail": "span_id is not a valid span id"}' in caplog.text, caplog.text
