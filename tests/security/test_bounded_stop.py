"""A graceful stop ends within ``shutdown_timeout_seconds``, whatever the downstreams and the judge do: over real
sockets, a real ``ragtrace-collector serve`` process and SIGTERM, as Docker sends it before its SIGKILL.

Before: with Phoenix, the OTLP events endpoint and the forwarding endpoint answering nothing, or a judge that
answers slowly, the stop took 10-31 s (each step waited its own timeout, one after the other): past Docker's 10 s
grace, so the process was killed mid-write. Now each step gets what remains of one deadline; what is left undone is
counted as ``shutdown`` and stays durable: unscored records stay queued, unexported scores are sent at the next start.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

from tests.support.explorer_stack import TURNS, Fed, send, served_collector
from tests.support.fake_phoenix import FakeDownstream
from tests.support.scripted_openai import ScriptedOpenAI

BOUND = 3.0  # shutdown_timeout_seconds in these tests
SLACK = 4.0  # the interpreter's start of the exit and a loaded machine: still far below the 10-31 s of before
METRICS = ["rouge", "levenshtein"]


def wait_for(condition, fed: Fed, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n" + fed.log.read_text(errors="replace")[-3000:]
        time.sleep(0.1)


def stop_time(fed: Fed) -> float:
    """SIGTERM the collector and time its exit (it must exit cleanly)."""
    assert fed.proc is not None
    started = time.monotonic()
    fed.proc.send_signal(signal.SIGTERM)
    rc = fed.proc.wait(60)
    took = time.monotonic() - started
    assert rc == 0, fed.log.read_text(errors="replace")[-3000:]
    return took


def records_scored(fed: Fed, n: int) -> bool:
    body = fed.api("/api/v1/records", limit=100).json()
    return body["total"] == n and all(len(r["scores"]) == len(METRICS) for r in body["records"])


def scored(data: Path) -> int:
    with sqlite3.connect(f"file:{data / 'results.sqlite'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT COUNT(*) FROM results WHERE status = 'scored'").fetchone()[0])


def queued(data: Path) -> int:
    with sqlite3.connect(f"file:{data / 'queue.sqlite'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT COUNT(*) FROM records").fetchone()[0])


def test_stalled_phoenix_events_and_forwarding_do_not_hold_the_stop(tmp_path):
    downstream = FakeDownstream(stalled=True)  # Phoenix, OTLP logs and traces: holds every request unanswered
    extra = {
        "shutdown_timeout_seconds": BOUND,
        "scoring": {"metrics": METRICS},
        "export": {
            "phoenix": {"endpoint": downstream.url, "timeout_seconds": 30},
            "otlp_events": {"endpoint": downstream.url},
        },
        "forward": {"endpoint": downstream.url, "timeout_seconds": 30},
    }
    try:
        with served_collector(tmp_path, extra=extra) as fed:
            send(fed.otlp, TURNS)
            wait_for(lambda: records_scored(fed, len(TURNS)), fed, "records not scored")
            wait_for(lambda: downstream.waiting >= 3, fed, "the exporters are not all waiting on the downstream")
            took = stop_time(fed)
            log = fed.log.read_text(errors="replace")
        assert took < BOUND + SLACK, f"stop took {took:.1f}s\n{log[-3000:]}"
        assert "stopped in" in log
        assert not downstream.annotations  # nothing was taken: it all waits for the next start
        # durable: the next start (downstream answering) sends every score the stop left unexported
        downstream.release()
        expected = scored(tmp_path / "data")
        with served_collector(tmp_path, extra=extra) as fed:
            wait_for(lambda: len(downstream.of_kind("trace")) == expected, fed, "scores not sent at the next start")
    finally:
        downstream.stop()


def test_a_slow_judge_does_not_hold_the_stop_and_its_records_stay_queued(tmp_path):
    with ScriptedOpenAI(delay=60.0) as judge:  # answers each judge call a minute late
        extra = {
            "shutdown_timeout_seconds": BOUND,
            "judge": {"model": "openai/judge", "base_url": judge.base_url, "api_key": "k", "timeout_seconds": 120},
            "scoring": {"metrics": ["faithfulness"], "concurrency": 2},
        }
        with served_collector(tmp_path, extra=extra) as fed:
            send(fed.otlp, TURNS)
            wait_for(lambda: len(judge.requests) >= 1, fed, "the judge was never called")
            took = stop_time(fed)
            log = fed.log.read_text(errors="replace")
        assert took < BOUND + SLACK, f"stop took {took:.1f}s\n{log[-3000:]}"
        assert queued(tmp_path / "data") == len(TURNS), log[-3000:]  # released, not lost: the next start scores them
