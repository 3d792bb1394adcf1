"""``make test-peers``: run every peer app live against a running ``ragtrace-collector serve``.

    .venv/bin/python scripts/peers/live.py [setup ...]

Starts the collector (loopback, free ports, a temporary data dir, the embedded judge, sampling off so
nothing is scored), runs each setup's app in its peer environment with its own ``service.name``, then
reads the collector's ``/metrics`` and prints per setup: records per request, which fields the records
had (retrieval time, generation time, tokens) and how many carried a TTFT. Exits 1 when a setup gives
other than one record per request.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capture import PEERS, ROOT, SETUPS, run_app

from tests.support.net import free_port, wait_for_port

REQUESTS = 6
_SERIES = {
    "records": "ragtrace_traces_received_total",
    "ttft": "ragtrace_time_to_first_token_seconds_count",
    "retrieval": "ragtrace_retrieval_duration_seconds_count",
    "generation": "ragtrace_generation_duration_seconds_count",
    "tokens": "ragtrace_tokens_total",
}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def total(metrics: str, name: str, service: str) -> float:
    """The sum of a series' samples for one service."""
    pattern = re.compile(rf'^{name}\{{[^}}]*service="{re.escape(service)}"[^}}]*\}} ([0-9.e+-]+)$', re.M)
    return sum(float(v) for v in pattern.findall(metrics))


def main(argv: list[str]) -> int:
    setups = argv or [s for s, env in SETUPS.items() if (PEERS / env / "freeze.txt").exists()]
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    data = tempfile.mkdtemp(prefix="ragtrace-peers-")
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)]
    cmd = [sys.executable, "-m", "ragtrace_collector", "serve", "--host", "127.0.0.1", *ports, "--data-dir", data]
    cmd += ["--sampling-rate", "0", "--judge", "local", "--log-level", "WARNING"]
    collector = subprocess.Popen(cmd, cwd=ROOT)
    failed = 0
    try:
        wait_for_port(http_port, timeout=60)
        wait_for_port(metrics_port, timeout=60)
        for setup in setups:
            proc = run_app(setup, f"http://127.0.0.1:{http_port}")
            if proc.returncode != 0:
                print(f"{setup}: app failed (exit {proc.returncode})\n{proc.stderr[-2000:]}")
                failed += 1
        time.sleep(4.0)  # assembly's grace period and a sweep
        metrics = scrape(metrics_port)
        print(f"{'setup':22} {'records/request':>15} {'retrieval':>9} {'generation':>10} {'tokens':>7} {'TTFT':>5}")
        for setup in setups:
            service = f"peer-{setup}"
            n = {key: total(metrics, name, service) for key, name in _SERIES.items()}
            print(
                f"{setup:22} {n['records'] / REQUESTS:>15.2f} {int(n['retrieval']):>9} {int(n['generation']):>10} "
                f"{int(n['tokens']):>7} {int(n['ttft']):>5}"
            )
            if n["records"] != REQUESTS:
                failed += 1
    finally:
        collector.terminate()
        collector.wait(timeout=30)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
