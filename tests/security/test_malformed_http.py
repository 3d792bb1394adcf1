"""Malformed HTTP requests (a request line past 8 KiB, bytes no HTTP parser takes) at both HTTP listeners.

aiohttp answers them 400 before any handler, and logged each at ERROR with a traceback: any client could fill the
collector's log, a kilobyte a request. Now the client still gets its 400, and the log says how many were refused, in
one line a minute per kind, without a traceback. Run against ``ragtrace-collector serve`` over real sockets.
"""

from __future__ import annotations

import socket

from tests.support.collector_process import collector_config, serve, until

ATTACKS = 40


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return sock.recv(200)


def test_malformed_requests_get_400_and_a_line_a_minute_not_a_traceback_each(tmp_path):
    with serve(tmp_path, collector_config(tmp_path)) as collector:
        until(lambda: collector.readyz(collector.metrics) == 200, 60, "the collector", collector)
        metrics_port = int(collector.metrics.rsplit(":", 1)[1])
        for port in (collector.http_port, metrics_port):
            for i in range(ATTACKS):
                line = b"GET /explorer/?q=" + b"A" * 12_000 if i % 2 else b"\x16\x03\x01 not http"
                reply = _raw(port, line + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert reply.split(b" ", 2)[1] == b"400", reply[:80]
        # a good request still works beside them
        assert collector.readyz(collector.metrics) == 200
    log = (tmp_path / "collector.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    said = [line for line in log.splitlines() if "malformed HTTP request" in line]
    assert 1 <= len(said) <= 4, said  # the first of each kind, not one per request
    assert any("refused" in line and "400" in line for line in said), said
