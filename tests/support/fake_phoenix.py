"""A stand-in downstream on loopback for the stop and export tests: Phoenix's annotation REST API, an OTLP/HTTP
logs and traces endpoint, any of them able to stall (hold every request unanswered until let go).

Annotations are kept as Phoenix keeps them: one per (kind, span or trace, name, identifier), a later one with the
same four replacing it (an upsert), so "exactly one annotation per identifier" is what :attr:`annotations` holds;
:attr:`received` counts every annotation posted, re-sends included. A stalled request is never taken: nothing it
carried is kept, as with a Phoenix that never answered.

    downstream = FakeDownstream(stalled=True)
    downstream.url                      # http://127.0.0.1:PORT
    downstream.release()                # answer (and take) what waits, and everything after
    downstream.stop()
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.net import serve_http

KINDS = {"/v1/span_annotations": "span", "/v1/trace_annotations": "trace"}


class FakeDownstream:
    def __init__(self, stalled: bool = False) -> None:
        self.annotations: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.received = 0  # annotations taken, re-sends included
        self.posts: dict[str, int] = {}  # path -> requests taken
        self.waiting = 0  # requests held unanswered right now
        self.lock = threading.Lock()
        self._open = threading.Event()
        self._closing = False
        if not stalled:
            self._open.set()
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not downstream._hold():
                    self.close_connection = True
                    return
                path = self.path.split("?", 1)[0]
                downstream._take(path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = serve_http(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _hold(self) -> bool:
        """Wait while stalled; False when the server is stopping (the request is then dropped unanswered)."""
        with self.lock:
            self.waiting += 1
        try:
            while not self._open.wait(0.1):
                if self._closing:
                    return False
            return not self._closing
        finally:
            with self.lock:
                self.waiting -= 1

    def _take(self, path: str, body: bytes) -> None:
        with self.lock:
            self.posts[path] = self.posts.get(path, 0) + 1
            kind = KINDS.get(path)
            if kind is None:
                return
            for item in json.loads(body)["data"]:
                target = item["span_id"] if kind == "span" else item["trace_id"]
                self.annotations[(kind, target, item["name"], item.get("identifier", ""))] = item
                self.received += 1

    def of_kind(self, kind: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The annotations of one kind kept, by (span or trace id, name)."""
        with self.lock:
            return {(t, n): a for (k, t, n, _), a in self.annotations.items() if k == kind}

    def release(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self._closing = True
        self.server.shutdown()
        self.server.server_close()
