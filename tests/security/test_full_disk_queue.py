"""A full disk under the embedded queue loses nothing the collector accepted (issue 33, D6).

``ragtrace-collector serve`` runs with its data directory (the SQLite queue, the results store and the assembly
journal) on a small tmpfs that the test fills: a real ``SQLITE_FULL`` / ``ENOSPC``, not a mock. While the disk
cannot write:

* with the assembly journal (the default), no request is acknowledged: it could not be made durable;
* without it, the record of a request answered 200 before anyone knew is held in memory, not dropped;
* OTLP requests are refused, over HTTP with 503 + ``Retry-After``, over gRPC with ``RESOURCE_EXHAUSTED`` (the
  exporters retry them later), and ``/readyz`` answers 503 on both ports;
* the log says so once (not a traceback per record).

Once the disk has room again the collector is ready again, takes requests again, and every accepted trace is
scored exactly once.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import span_fixtures as F
from tests.support.collector_process import Served, collector_config, serve, until
from tests.support.full_disk import small_disk
from tests.support.net import free_port
from tests.support.scripted_openai import ScriptedOpenAI

METRIC = "latency"  # a metric that needs no judge call: the test is about the queue, not the judge


def _trace() -> tuple[str, bytes]:
    trace_id, request = F.to_request(F.ragtrace_shaped())
    return trace_id, request.SerializeToString()


def _counts(served: Served) -> dict[str, float]:
    """The collector's own counts that tell loss and double counting, summed over their labels."""
    text = httpx.get(served.metrics + "/metrics", timeout=30).text
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("ragtrace_records_scored_total", "ragtrace_queue_depth", "ragtrace_queue_dropped_total"):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def _stored_keys(data: Path) -> dict[str, int]:
    """Result rows per record key in the results store (opened read-only: the collector is its writer)."""
    db = sqlite3.connect(f"file:{data / 'results.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        return dict(db.execute("SELECT record_key, COUNT(*) FROM results GROUP BY record_key").fetchall())
    finally:
        db.close()


def _send(served: Served, body: bytes) -> None:
    """Send as an OTLP exporter does: a request refused with 503 is sent again until it is taken."""
    until(lambda: served.post(body).status_code == 200, 60, "the request to be accepted", served)


def _grpc_code(port: int, body: bytes) -> grpc.StatusCode:
    """The status of one OTLP/gRPC Export of ``body`` (raw bytes both ways)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export: Any = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        try:
            export(body, timeout=30)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _both_ready(served: Served, status: int) -> bool:
    return served.readyz(served.otlp) == status and served.readyz(served.metrics) == status


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
def test_a_full_disk_sheds_and_loses_nothing_accepted(tmp_path: Path, journal: bool) -> None:
    data = tmp_path / "data"
    with small_disk(data, size="8m") as disk, ScriptedOpenAI() as judge:
        config = collector_config(
            tmp_path,
            judge={"model": "openai/judge", "base_url": judge.base_url, "api_key": "k-0123456789"},
            scoring={"metrics": [METRIC]},
            assembly={"grace_seconds": 0.3, "sweep_interval_seconds": 0.05, "journal": journal},
        )
        grpc_port = config["listen"]["grpc_port"] = free_port()
        with serve(tmp_path, config) as served:
            until(lambda: _both_ready(served, 200), 120, "the collector to be ready", served)
            disk.fill()

            sent = [_trace() for _ in range(6)]
            if not journal:
                _send(served, sent[0][1])  # taken: nobody knows yet that its record cannot be written
            refused = [(t, body) for t, body in sent[0 if journal else 1 :] if served.post(body).status_code != 200]
            if journal:  # nothing is acknowledged that could not be made durable
                assert len(refused) == len(sent)
            until(lambda: _both_ready(served, 503), 60, "/readyz to say not ready while the disk is full", served)

            late = _trace()
            reply = served.post(late[1])
            assert reply.status_code == 503 and int(reply.headers["Retry-After"]) > 0
            assert _grpc_code(grpc_port, late[1]) in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
            sent.append(late)
            refused.append(late)

            disk.free()
            until(lambda: _both_ready(served, 200), 60, "/readyz to say ready once the disk has room", served)
            for _, body in refused:  # the exporters' retries of the refused requests
                _send(served, body)

            every = {trace_id for trace_id, _ in sent}
            until(lambda: _stored_keys(data).keys() >= every, 60, "every accepted trace to be scored", served)
            until(lambda: _counts(served).get("ragtrace_queue_depth") == 0, 60, "the queue to drain", served)
            totals = _counts(served)
            assert _stored_keys(data) == dict.fromkeys(every, 1)
            assert totals["ragtrace_records_scored_total"] == len(every), totals  # once each
            assert totals.get("ragtrace_queue_dropped_total", 0) == 0, totals
            log = served.output()
            assert "Traceback" not in log, log[-5000:]
            said = "cannot journal" if journal else "cannot be written"
            assert log.count(said) == 1, log[-5000:]  # one line, not one per record
