"""``kill -9`` right after traces complete, with the in-flight spans in Redis (``assembly.shared_state``) and the
queue on Redis too: every trace answered 200 is stored exactly once, against real ``serve`` processes.

Each cycle starts the collector, sends one OTLP request of ``BATCH`` traces, and SIGKILLs the process the moment
its sweep has popped them (their claims appear in Redis), while it builds their records and puts them on the queue. Popped traces are
claimed in Redis until queued, so the next start completes the ones a killed receiver popped and never queued, once
their lease (``claim_lease_seconds``) has run out. With a lease nobody outlives (what ``pop_due`` did before: a
popped trace was gone from Redis) the same cycles lose every trace popped by a killed process.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import httpx
import pytest
import redis

from tests.support.collector_process import collector_config, serve, until
from tests.support.soak import stored_per_trace, trace_request

pytestmark = pytest.mark.integration

CYCLES = int(os.environ.get("RAGTRACE_CLAIM_KILLS", "6"))
BATCH = 60  # traces a request: one sweep pops them together, so a kill lands inside its puts
GRACE = 1.0
PB = {"Content-Type": "application/x-protobuf"}


def _batch(n: int) -> tuple[list[str], bytes]:
    """One OTLP request holding ``n`` ragtrace-shaped traces (serialised requests concatenate into one)."""
    pairs = [trace_request() for _ in range(n)]
    return [t for t, _ in pairs], b"".join(body for _, body in pairs)


def _until_popped(r: redis.Redis, prefix: str, timeout: float = 15.0) -> bool:
    """Poll (every millisecond) until a receiver holds claims: it popped traces and has not settled them yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if r.zcard(f"{prefix}:asm:claimed"):
            return True
        time.sleep(0.001)
    return False


def _soak(workdir: Path, redis_url: str, prefix: str, lease: float) -> tuple[list[str], dict[str, int], int]:
    """Kill ``CYCLES`` collectors just after a batch completes, then let one last start finish: (acked, stored
    counts, kills)."""
    config = collector_config(
        workdir,
        assembly={
            "grace_seconds": GRACE,
            "sweep_interval_seconds": 0.1,
            "shared_state": f"{redis_url}?prefix={prefix}",
            "claim_lease_seconds": lease,
        },
        queue={"url": f"{redis_url}?prefix={prefix}"},
        scoring={"metrics": ["latency"]},
    )
    acked: list[str] = []
    kills = 0
    r = redis.Redis.from_url(redis_url)
    for _ in range(CYCLES):
        with serve(workdir, config) as served:
            until(lambda: served.readyz(served.metrics) == 200, 120, "the collector to be ready", served)
            traces, body = _batch(BATCH)
            assert httpx.post(served.otlp + "/v1/traces", content=body, headers=PB, timeout=30).status_code == 200
            acked += traces
            hit = _until_popped(r, prefix)
            os.kill(served.proc.pid, signal.SIGKILL)
            served.proc.wait()
            kills += hit
    store = workdir / "data" / "results.sqlite"
    with serve(workdir, config) as last:
        until(lambda: last.readyz(last.metrics) == 200, 120, "the last start to be ready", last)
        # leased claims (ours: seconds) and leased queue entries (a dead worker's: its liveness, 10 s) run out
        deadline = time.monotonic() + 60
        while not set(acked) <= set(stored_per_trace(store)) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)  # a duplicate would land now
        return acked, stored_per_trace(store), kills


def test_traces_popped_by_a_killed_receiver_are_stored_exactly_once(redis_server, tmp_path: Path) -> None:
    acked, counts, kills = _soak(tmp_path, redis_server.url, f"claims{random.randrange(1 << 30)}", 2.0)
    lost = [t for t in acked if t not in counts]
    twice = [t for t in acked if counts.get(t, 0) > 1]
    print(f"{kills} kills after a pop, {len(acked)} traces answered 200, lost {len(lost)}, stored twice {len(twice)}")
    assert kills == CYCLES
    assert not lost
    assert not twice
