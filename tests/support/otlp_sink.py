"""A bare OTLP/HTTP trace endpoint on loopback that keeps every decoded export request.

Used to check what the collector sends downstream (``gen_ai.evaluation.result`` events) over a real
socket, without depending on the collector's own receiver::

    with OtlpSink() as sink:
        sink.url                  # "http://127.0.0.1:PORT" (the exporter adds /v1/traces)
        sink.spans()              # every span received so far (protobuf Span objects)
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OtlpSink:
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.got = threading.Event()
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with sink._lock:
                    sink.paths.append(self.path)
                    sink.requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()
                sink.got.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def spans(self) -> list[Any]:
        with self._lock:
            return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "OtlpSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def attributes(kvs: Any) -> dict[str, Any]:
    """A protobuf KeyValue list as a plain dict."""
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out
