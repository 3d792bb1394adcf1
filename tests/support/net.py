"""Loopback helpers for tests that start real servers."""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_GIVEN: set[int] = set()  # ports handed out in this process


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _worker_slice() -> range:
    """This pytest-xdist worker's own ports: below the kernel's ephemeral range, a slice per worker.

    A port the kernel offers for ``bind(0)`` is from the ephemeral range, which every outgoing connection on the
    host draws from too: between a test asking for a port and its server binding it, another worker's client
    socket could take it (CI saw a collector refuse to start, address in use). Ports below that range are never
    handed to clients, and no two workers share a slice.
    """
    low, high = 10_000, min(_ephemeral_start(), 65_536)
    if high - low < 1_000:  # an unusual ephemeral range: fall back to the whole space above 1024
        low, high = 1_025, 65_536
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), index + 1)
    size = (high - low) // count
    return range(low + index * size, low + (index + 1) * size)


def free_port() -> int:
    """A TCP port free on every interface right now, in this worker's slice (:func:`_worker_slice`), and not one
    this process was given before (a collector's HTTP and gRPC listeners would collide)."""
    ports = _worker_slice()
    while True:
        port = random.choice(ports)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # free on every interface covers servers bound beyond loopback
            except OSError:
                continue
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
