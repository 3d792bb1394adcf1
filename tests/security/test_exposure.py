"""Nobody in by accident (issue 33, D2 and D13): ``ragtrace-collector serve`` run as a user runs it.

* Bound beyond loopback with no credential it refuses to start, says why and what to set, and opens no port;
  ``auth.allow_unauthenticated: true`` lets it start, with one warning.
* An empty token (an unset variable in a compose file) or a short one is refused at start, never taken as
  "no authentication".
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.net import free_port


def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRACE_")}
    environ.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})})
    return subprocess.Popen(
        [sys.executable, "-m", "ragtrace_collector.cli", "serve", "--data-dir", str(tmp_path / "data"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=environ,
        text=True,
        start_new_session=True,
    )


def _ports() -> tuple[list[str], list[int]]:
    http, grpc, metrics = free_port(), free_port(), free_port()
    return ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)], [http, grpc, metrics]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_all_interfaces_without_credential_refused(tmp_path: Path) -> None:
    args, ports = _ports()
    proc = _serve(tmp_path, "--host", "0.0.0.0", *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "reachable from other machines and no credential" in out
    assert "auth.bearer_token" in out and "auth.allow_unauthenticated" in out
    assert "Traceback" not in out
    assert not any(_listening(p) for p in ports)


def test_allow_unauthenticated_starts_with_one_warning(tmp_path: Path) -> None:
    args, ports = _ports()
    proc = _serve(tmp_path, "--host", "0.0.0.0", *args, env={"RAGTRACE_AUTH__ALLOW_UNAUTHENTICATED": "true"})
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{ports[2]}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert out.count("with no credential for ingest, read, review (auth.allow_unauthenticated)") == 1, out


def test_token_with_loopback_and_all_interfaces(tmp_path: Path) -> None:
    """A token is enough to bind beyond loopback (checked up to the port being refused without it)."""
    args, ports = _ports()
    token = "a-token-of-24-characters"
    proc = _serve(tmp_path, "--host", "0.0.0.0", *args, env={"RAGTRACE_AUTH__BEARER_TOKEN": token})
    try:
        deadline = time.monotonic() + 60
        while not _listening(ports[0]):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        r = httpx.post(
            f"http://127.0.0.1:{ports[0]}/v1/traces", content=b"{}", headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 401
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_empty_or_short_token_refused_at_start(tmp_path: Path) -> None:
    for token, said in (("", "is empty"), ("   ", "is empty"), ("short", "is 5 bytes")):
        args, ports = _ports()
        proc = _serve(tmp_path, *args, env={"RAGTRACE_AUTH__BEARER_TOKEN": token})
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 2, (token, out)
        assert "bad configuration" in out and said in out and "at least 16 bytes" in out, out
        assert "Traceback" not in out
        assert not any(_listening(p) for p in ports)
