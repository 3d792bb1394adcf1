"""A real Arize Phoenix server on loopback, from .phoenix-venv (built by scripts/phoenix/build.sh).

    server = PhoenixServer.start(tmp_path)   # free ports, its own working dir (SQLite there), no telemetry
    server.base_url                          # http://127.0.0.1:PORT  (REST /v1/..., GraphQL /graphql, OTLP /v1/traces)
    server.get("/v1/projects")               # JSON of a REST call
    server.graphql(query, variables)
    server.stop()

:func:`missing_reason` says why no server can be started (the venv is absent), for ``pytest.skip``.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".phoenix-venv"
PHOENIX = VENV / "bin" / "phoenix"


def missing_reason() -> str | None:
    """Why Phoenix cannot run here, or None when it can."""
    if not PHOENIX.exists():
        return f"{VENV.name} absent: build it with `bash scripts/phoenix/build.sh` (or run `make test-phoenix`)"
    return None


class PhoenixServer:
    def __init__(self, proc: subprocess.Popen, port: int, grpc_port: int, log_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.grpc_port = grpc_port
        self.log_path = log_path
        self.base_url = f"http://127.0.0.1:{port}"
        self.client = httpx.Client(base_url=self.base_url, timeout=30)

    @classmethod
    def start(cls, workdir: Path, timeout: float = 120.0) -> PhoenixServer:
        workdir.mkdir(parents=True, exist_ok=True)
        port, grpc_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env.update(
            PHOENIX_WORKING_DIR=str(workdir),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(port),
            PHOENIX_GRPC_PORT=str(grpc_port),
            PHOENIX_TELEMETRY_ENABLED="false",
        )
        log_path = workdir / "phoenix.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([str(PHOENIX), "serve"], env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
        server = cls(proc, port, grpc_port, log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"phoenix exited ({proc.returncode}): {server.log_tail()}")
            try:
                if server.client.get("/healthz", timeout=2).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        server.stop()
        raise TimeoutError(f"phoenix not ready after {timeout}s: {server.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def get(self, path: str, **params: Any) -> Any:
        reply = self.client.get(path, params=params)
        reply.raise_for_status()
        return reply.json()

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = self.client.post("/graphql", json={"query": query, "variables": variables or {}})
        reply.raise_for_status()
        body = reply.json()
        if body.get("errors"):
            raise AssertionError(f"graphql errors: {body['errors']}")
        return body["data"]

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
