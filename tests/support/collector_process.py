"""``ragtrace-collector serve`` as a subprocess with a YAML config of the test's own, for tests that need the
process as run in production (its start, its exit, its log) rather than the in-process :class:`CollectorApp`.

Its output (stdout and stderr, the log) goes to ``<workdir>/collector.log``; the environment's ``RAGTRACE_*``
variables are left out so only the test's config counts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.net import free_port

PROTOBUF = {"Content-Type": "application/x-protobuf"}


@dataclass
class Served:
    """The running process, its ports and its log."""

    proc: subprocess.Popen
    http_port: int
    metrics_port: int
    log: Path

    @property
    def otlp(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def metrics(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def readyz(self, base: str) -> int | None:
        """``/readyz`` status on ``base``, ``None`` while nothing answers; fails if the process exited."""
        assert self.proc.poll() is None, self.output()[-3000:]
        try:
            return httpx.get(base + "/readyz", timeout=30).status_code
        except httpx.HTTPError:
            return None

    def post(self, body: bytes) -> httpx.Response:
        """One OTLP/HTTP protobuf request."""
        return httpx.post(self.otlp + "/v1/traces", content=body, headers=PROTOBUF, timeout=30)


def until(predicate: Callable[[], bool], timeout: float, what: str, log: Served | None = None) -> None:
    """Wait for ``predicate`` (polled every 20 ms) or fail after ``timeout`` seconds saying what was awaited."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}" + (f"\n{log.output()[-3000:]}" if log else "")
            )
        time.sleep(0.02)


def collector_config(workdir: Path, **sections: Any) -> dict[str, Any]:
    """A loopback config with ``data_dir`` in ``workdir`` and free ports; ``sections`` replace or add top-level keys."""
    return {
        "data_dir": str(workdir / "data"),
        "listen": {"host": "127.0.0.1", "http_port": free_port(), "grpc_port": None, "metrics_port": free_port()},
        **sections,
    }


@contextmanager
def serve(workdir: Path, config: dict[str, Any]) -> Iterator[Served]:
    """Start ``ragtrace-collector serve --config`` with ``config`` (not waiting for it); terminate it after."""
    (workdir / "collector.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRACE_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    log = workdir / "collector.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragtrace_collector.cli", "serve", "--config", str(workdir / "collector.yaml")],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    try:
        yield Served(proc, config["listen"]["http_port"], config["listen"]["metrics_port"], log)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
