"""Loopback helpers for tests that start real servers."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_GIVEN: set[int] = set()  # ports handed out in this process: the kernel may offer one again at once


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, and not one this process was given before (two calls in a row
    can get the same port from the kernel: a collector's HTTP and gRPC listeners would then collide)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 20.0) -> None:
    """Block until something accepts connections on host:port, or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


class QuietServer(ThreadingHTTPServer):
    """A threading HTTP server for test downstreams: daemon handler threads, and a client that hangs up
    (what the collector under test is expected to do) is not printed as an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def serve_http(handler: type[BaseHTTPRequestHandler]) -> QuietServer:
    """``handler`` served on a free loopback port from a daemon thread; ``server_address[1]`` is the port."""
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
