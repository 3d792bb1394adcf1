"""Soak helpers shared by the ``kill -9`` tests: one-trace OTLP requests with fresh ids, and what the results
store holds per trace."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def trace_request() -> tuple[str, bytes]:
    """One ragtrace-shaped trace (pipeline → retriever → generator) with a fresh trace id, serialised."""
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "soak"
    ss = rs.scope_spans.add()
    trace_id, root = random.randbytes(16), random.randbytes(8)
    now = time.time_ns()
    for name, role, parent, attrs in (
        ("support", "pipeline", b"", {"ragtrace.pipeline.name": "soak", "input.value": "What is covered?"}),
        ("search", "retriever", root, {"retrieval.documents.0.document.content": "Parts are covered."}),
        (
            "answer",
            "generator",
            root,
            {
                "gen_ai.request.model": "m",
                "output.value": "Parts are covered.",
                "gen_ai.response.time_to_first_chunk": "0.05",
            },
        ),
    ):
        span = ss.spans.add()
        span.trace_id, span.name = trace_id, name
        span.span_id = root if role == "pipeline" else random.randbytes(8)
        span.parent_span_id = parent
        span.start_time_unix_nano, span.end_time_unix_nano = now - 50_000_000, now
        for key, value in {"ragtrace.span.role": role, **attrs}.items():
            a = span.attributes.add()
            a.key, a.value.string_value = key, value
    return trace_id.hex(), request.SerializeToString()


def stored_per_trace(store: Path, metric: str = "latency") -> dict[str, int]:
    """Stored results of ``metric`` per trace id (none while the store does not exist yet)."""
    if not store.exists():
        return {}
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT trace_id, COUNT(*) FROM results WHERE metric = ? GROUP BY trace_id", (metric,))
        return {str(t): int(n) for t, n in rows}
