"""Scores reach Phoenix at least once, even through a ``kill -9``: over real sockets, a real collector process.

Before: a score was handed to the Phoenix exporter once, from memory; a collector killed while annotations waited
or were in flight lost them for good (12-13% of annotations under load). Now the results store keeps which
results each exporter confirmed, and a new start sends again the ones it never confirmed; Phoenix upserts them
(same span or trace, name and identifier), so it ends with exactly one annotation per result and kind.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

from tests.support.explorer_stack import TURNS, Fed, send, served_collector
from tests.support.fake_phoenix import FakeDownstream

METRICS = ["rouge", "levenshtein"]  # no judge to wait for: the exports are what is tested


def settings(phoenix: str) -> dict:
    return {
        "scoring": {"metrics": METRICS},
        "export": {"phoenix": {"endpoint": phoenix, "timeout_seconds": 30, "batch_size": 4}},
    }


def scored(store: Path) -> dict[tuple[str, str], str]:
    """The stored scored results, (trace id, metric) -> the root span id of the record."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT r.trace_id, r.metric, rec.record FROM results r JOIN records rec USING (record_key)"
            " WHERE r.status = 'scored'"
        ).fetchall()
    return {(t, m): json.loads(rec).get("metadata", {}).get("root_span_id") for t, m, rec in rows}


def wait_scored(fed: Fed, n_records: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        body = fed.api("/api/v1/records", limit=100).json()
        if body["total"] == n_records and all(len(r["scores"]) == len(METRICS) for r in body["records"]):
            return
        assert time.monotonic() < deadline, f"{body}\n" + fed.log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)


def test_annotations_lost_to_kill_9_are_sent_at_the_next_start(tmp_path):
    phoenix = FakeDownstream(stalled=True)  # takes nothing until released: every annotation waits or is in flight
    try:
        with served_collector(tmp_path, extra=settings(phoenix.url)) as fed:
            send(fed.otlp, TURNS)
            wait_scored(fed, len(TURNS))
            deadline = time.monotonic() + 60
            while phoenix.waiting == 0:  # the exporter's first batch is on the wire
                assert time.monotonic() < deadline, fed.log.read_text(errors="replace")[-3000:]
                time.sleep(0.05)
            assert fed.proc is not None
            os.kill(fed.proc.pid, signal.SIGKILL)
            fed.proc.wait(30)
        expected = scored(tmp_path / "data" / "results.sqlite")
        assert len(expected) >= len(TURNS)  # every turn but the one without a reference scored, twice
        assert phoenix.received == 0  # all of them lost with the process

        phoenix.release()
        with served_collector(tmp_path, extra=settings(phoenix.url)) as fed:
            deadline = time.monotonic() + 90
            while True:
                traces = phoenix.of_kind("trace")
                spans = phoenix.of_kind("span")
                if set(traces) >= set(expected) and set(spans) >= {(s, m) for (_, m), s in expected.items()}:
                    break
                assert time.monotonic() < deadline, (
                    f"{len(traces)} trace and {len(spans)} span annotations of {len(expected)} results\n"
                    + fed.log.read_text(errors="replace")[-3000:]
                )
                time.sleep(0.2)
            # exactly one annotation per result, kind and identifier: nothing else arrived
            assert len(phoenix.annotations) == 2 * len(expected), sorted(phoenix.annotations)
            for (trace_id, metric), annotation in traces.items():
                assert annotation["identifier"] == "ragtrace/local" and annotation["name"] == metric
                assert annotation["result"]["score"] is not None, trace_id
    finally:
        phoenix.stop()


def test_confirmed_results_are_marked_so_a_restart_does_not_send_them_again(tmp_path):
    """What Phoenix took is marked exported in the results store (what a restart skips)."""
    phoenix = FakeDownstream()
    try:
        with served_collector(tmp_path, extra=settings(phoenix.url)) as fed:
            send(fed.otlp, TURNS[:3])
            wait_scored(fed, 3)
            expected = scored(tmp_path / "data" / "results.sqlite")
            deadline = time.monotonic() + 60
            while len(phoenix.annotations) < 2 * len(expected):
                assert time.monotonic() < deadline, fed.log.read_text(errors="replace")[-3000:]
                time.sleep(0.2)
        assert phoenix.received == 2 * len(expected)
        with sqlite3.connect(f"file:{tmp_path / 'data' / 'results.sqlite'}?mode=ro", uri=True) as db:
            marks = set(db.execute("SELECT record_key, metric FROM exported WHERE exporter = 'phoenix'"))
        assert marks == set(expected)  # live records are keyed by their trace id
    finally:
        phoenix.stop()
