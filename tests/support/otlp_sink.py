"""A small OTLP receiver for tests and benchmarks: traces and logs, OTLP/HTTP (protobuf) and OTLP/gRPC.

It decodes every ``ExportTraceServiceRequest`` (``/v1/traces``) and ``ExportLogsServiceRequest`` (``/v1/logs``)
with opentelemetry-proto and keeps the spans and log records as plain dicts. ``delay`` makes it a slow sink
(each export waits before answering).

    sink = OtlpSink()
    http_port = sink.start_http(); grpc_port = sink.start_grpc()
    ...
    spans = sink.wait_for_spans(3)
    events = sink.wait_for_logs(2)
    sink.stop()
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.support.net import free_port


def any_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def decode_request(req: trace_service_pb2.ExportTraceServiceRequest) -> list[dict]:
    out = []
    for rs in req.resource_spans:
        resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(
                    {
                        "name": sp.name,
                        "trace_id": sp.trace_id.hex(),
                        "span_id": sp.span_id.hex(),
                        "parent_span_id": sp.parent_span_id.hex() or None,
                        "kind": sp.kind,
                        "start_ns": sp.start_time_unix_nano,
                        "end_ns": sp.end_time_unix_nano,
                        "attributes": {kv.key: any_value(kv.value) for kv in sp.attributes},
                        "events": [
                            {"name": e.name, "attributes": {kv.key: any_value(kv.value) for kv in e.attributes}}
                            for e in sp.events
                        ],
                        "status_code": sp.status.code,
                        "status_message": sp.status.message,
                        "resource": resource,
                        "scope": ss.scope.name,
                    }
                )
    return out


def decode_logs(req: logs_service_pb2.ExportLogsServiceRequest) -> list[dict]:
    out = []
    for rl in req.resource_logs:
        resource = {kv.key: any_value(kv.value) for kv in rl.resource.attributes}
        for sl in rl.scope_logs:
            for lr in sl.log_records:
                out.append(
                    {
                        "event_name": lr.event_name,
                        "trace_id": lr.trace_id.hex() or None,
                        "span_id": lr.span_id.hex() or None,
                        "time_ns": lr.time_unix_nano,
                        "observed_ns": lr.observed_time_unix_nano,
                        "severity_number": lr.severity_number,
                        "severity_text": lr.severity_text,
                        "body": any_value(lr.body) if lr.HasField("body") else None,
                        "attributes": {kv.key: any_value(kv.value) for kv in lr.attributes},
                        "resource": resource,
                        "scope": sl.scope.name,
                    }
                )
    return out


class OtlpSink:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self._spans: list[dict] = []
        self._logs: list[dict] = []
        self._cond = threading.Condition()
        self.requests = 0
        self.bad_requests = 0
        # (path, Content-Type, body as received after Content-Encoding) of every HTTP POST, to compare bytes
        self.bodies: list[tuple[str, str, bytes]] = []
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc: Any = None

    # --- storage
    def _add(self, req: trace_service_pb2.ExportTraceServiceRequest) -> None:
        spans = decode_request(req)
        with self._cond:
            self.requests += 1
            self._spans.extend(spans)
            self._cond.notify_all()

    def _add_logs(self, req: logs_service_pb2.ExportLogsServiceRequest) -> None:
        records = decode_logs(req)
        with self._cond:
            self.requests += 1
            self._logs.extend(records)
            self._cond.notify_all()

    def logs(self) -> list[dict]:
        with self._cond:
            return list(self._logs)

    def log_count(self) -> int:
        with self._cond:
            return len(self._logs)

    def wait_for_logs(self, n: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._logs) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"sink got {len(self._logs)} log records, wanted {n}")
                self._cond.wait(left)
            return list(self._logs)

    def spans(self) -> list[dict]:
        with self._cond:
            return list(self._spans)

    def span_count(self) -> int:
        with self._cond:
            return len(self._spans)

    def clear(self) -> None:
        with self._cond:
            self._spans.clear()
            self._logs.clear()

    def wait_for_spans(self, n: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._spans) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"sink got {len(self._spans)} spans, wanted {n}")
                self._cond.wait(left)
            return list(self._spans)

    # --- OTLP/HTTP
    def start_http(self, port: int | None = None) -> int:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                enc = (self.headers.get("Content-Encoding") or "").lower()
                try:
                    if enc == "gzip":
                        body = gzip.decompress(body)
                    elif enc == "deflate":
                        body = zlib.decompress(body)
                    path = self.path.rstrip("/")
                    content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                    with sink._cond:
                        sink.bodies.append((path, content_type, body))
                    req: Any
                    resp: Any
                    if path == "/v1/traces":
                        req = trace_service_pb2.ExportTraceServiceRequest()
                        resp = trace_service_pb2.ExportTraceServiceResponse()
                    elif path == "/v1/logs":
                        req = logs_service_pb2.ExportLogsServiceRequest()
                        resp = logs_service_pb2.ExportLogsServiceResponse()
                    else:
                        raise ValueError(f"unknown path {self.path}")
                    if content_type == "application/json" and path == "/v1/traces":  # OTLP/JSON: hex ids
                        from ragtrace_collector.receiver.decode import parse_json

                        req = parse_json(body)
                    else:
                        req.ParseFromString(body)
                except Exception as exc:
                    sink.bad_requests += 1
                    msg = str(exc).encode()
                    self.send_response(400)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                if sink.delay:
                    time.sleep(sink.delay)
                if path == "/v1/logs":
                    sink._add_logs(req)
                else:
                    sink._add(req)
                reply = resp.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        port = port or free_port()
        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._http.daemon_threads = True
        self._http_thread = threading.Thread(target=self._http.serve_forever, name="otlp-sink-http", daemon=True)
        self._http_thread.start()
        return port

    # --- OTLP/gRPC
    def start_grpc(self, port: int | None = None) -> int:
        import grpc

        sink = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                if sink.delay:
                    time.sleep(sink.delay)
                sink._add(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                if sink.delay:
                    time.sleep(sink.delay)
                sink._add_logs(request)
                return logs_service_pb2.ExportLogsServiceResponse()

        port = port or free_port()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(LogsServicer(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        self._grpc = server
        return port

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=None)
            self._grpc = None
