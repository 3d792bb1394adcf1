"""``ragtrace-collector demo`` as a user runs it, without a terminal (as in CI): it starts the collector
and a Prometheus, the example's traffic gets scored, faithfulness drops once the faults go on, and
SIGTERM stops it cleanly with every child process gone."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.binaries import find

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STATUS = re.compile(
    r"\]\s+(healthy|DEGRADED)\s+sent=(\d+) failed=(\d+) scored=(\d+) faithfulness healthy=(\S+) \(n=(\d+)\) "
    r"degraded=(\S+) \(n=(\d+)\)"
)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes once reaped or defunct.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_demo_runs_degrades_and_stops_on_sigterm(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "ragtrace_collector.cli",
        "demo",
        "--rate",
        "4",
        "--degrade-after",
        "10",
        "--data-dir",
        str(tmp_path / "demo"),
    ]
    prometheus = find("prometheus")  # without it the demo runs with --no-prometheus (as a user without it would)
    if prometheus is None:
        argv.append("--no-prometheus")
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    lines: list[str] = []
    last = None
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            m = STATUS.search(line)
            if m:
                last = m
                if m.group(1) == "DEGRADED" and int(m.group(8)) >= 10:
                    break
        assert last is not None and last.group(1) == "DEGRADED", "\n".join(lines)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
        lines.extend(rest.splitlines())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "\n".join(lines)
    assert proc.returncode == 0, out
    assert re.search(r"/metrics: http://127\.0\.0\.1:\d+/metrics", out), out
    healthy, degraded = float(last.group(5)), float(last.group(7))
    assert int(last.group(4)) > 20 and int(last.group(3)) == 0, out
    assert healthy > 0.8 and degraded < healthy - 0.2, out
    stopped = re.findall(r"stopped (\w+) \(pid (\d+), exit (-?\d+)\)", out)
    names = {name for name, _, _ in stopped}
    assert "collector" in names, out
    if prometheus:
        assert "prometheus" in names and re.search(r"Prometheus: http://127\.0\.0\.1:\d+", out), out
    for name, pid, code in stopped:
        assert code == "0", f"{name} exited {code}"
        assert not pid_alive(int(pid)), f"{name} (pid {pid}) still running"
    # the collector drained and kept its results
    assert (tmp_path / "demo" / "collector" / "results.sqlite").exists()
    # the closing summary, whole-run means per phase, matches what the README promises a user sees
    assert re.search(r"^summary: \d+ requests sent \(0 failed\), \d+ records scored in \d+ s$", out, re.M), out
    means = re.search(
        r"^mean faithfulness: healthy (\S+) \(n=\d+\), degraded (\S+) \(n=\d+\); faults on at 10 s$", out, re.M
    )
    assert means, out
    readme = re.search(r"faithfulness falls from (1\.00) to about (0\.\d+)", (REPO / "README.md").read_text())
    assert readme, "the README no longer states the demo's healthy and degraded faithfulness"
    assert abs(float(means.group(1)) - float(readme.group(1))) <= 0.05, out
    assert abs(float(means.group(2)) - float(readme.group(2))) <= 0.1, out
    if prometheus:
        assert re.search(r"^alerts(: none fired| fired: .+)$", out, re.M), out
    else:
        assert re.search(r"^alerts: Prometheus not running$", out, re.M), out


def test_demo_stops_cleanly_while_starting(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragtrace_collector.cli",
            "demo",
            "--no-prometheus",
            "--data-dir",
            str(tmp_path / "demo"),
        ],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first = proc.stdout.readline()  # printed once the signal handlers are installed
        assert first.startswith("starting the collector"), first
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        out = first + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    stopped = re.findall(r"stopped (\w+) \(pid (\d+), exit (-?\d+)\)", out)
    assert [name for name, _, _ in stopped] == ["collector"], out
    assert not pid_alive(int(stopped[0][1]))


def test_ctrl_c_with_the_output_pipe_closed_stops_every_child_and_frees_the_ports(tmp_path):
    """``make demo 2>&1 | tee log`` and Ctrl-C: the terminal's SIGINT ends tee too, so the demo's next print hits
    a closed pipe. Cleanup must still stop every child (the collector used to keep running, holding its ports)."""
    from ragtrace_collector.cli.demo import port_is_free

    argv = [sys.executable, "-m", "ragtrace_collector.cli", "demo", "--rate", "4", "--data-dir", str(tmp_path / "d")]
    prometheus = find("prometheus")
    if prometheus is None:
        argv.append("--no-prometheus")
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # 2>&1: stderr goes into the same dead pipe
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            m = STATUS.search(line)
            if m and int(m.group(4)) > 0:
                break
        out = "\n".join(lines)
        assert any(STATUS.search(line) for line in lines), out
        pids = {name: int(pid) for name, pid in re.findall(r"starting (?:the )?(\w+) \(pid (\d+)", out)}
        ports = {int(p) for p in re.findall(r"http://127\.0\.0\.1:(\d+)", out)}
        assert "collector" in pids and len(ports) >= 3, out
        if prometheus:
            assert "prometheus" in pids, out
        assert all(pid_alive(pid) for pid in pids.values()), out
        proc.stdout.close()  # the reader is gone (tee killed by the same Ctrl-C)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, out
    still = {name: pid for name, pid in pids.items() if pid_alive(pid)}
    assert not still, f"children still running after Ctrl-C with the pipe closed: {still}"
    busy = sorted(p for p in ports if not port_is_free(p))
    assert not busy, f"ports still held: {busy}"
