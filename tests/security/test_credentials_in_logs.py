"""Passwords in URLs never reach the log: a real Redis asking for a password, endpoints with ``user:pass@``.

The collector logs its queue URL at every start ("ragtrace collector up ... queue <url>"), and where it forwards
or exports to when that fails; logs go further than configs (aggregators, tickets, screenshots). Each such URL
must be shown with its credentials masked (``redis://:***@host:6379/0``, ``http://user:***@host/``) and the
password must appear nowhere in what the process writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import redis
import yaml

from ragtrace_collector.config import load_config
from ragtrace_collector.exporter.otlp_events import EvaluationEvents
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.service.app import CollectorApp
from tests.support import span_fixtures as F
from tests.support.net import free_port
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

REDIS_PASSWORD = "redis-s3cret-pw"
FORWARD_PASSWORD = "forward-s3cret-pw"
PHOENIX_PASSWORD = "phoenix-s3cret-pw"
EVENTS_PASSWORD = "events-s3cret-pw"
PASSWORDS = (REDIS_PASSWORD, FORWARD_PASSWORD, PHOENIX_PASSWORD, EVENTS_PASSWORD)


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    """A real redis-server that refuses clients without ``REDIS_PASSWORD``."""
    server = RedisServer().start()
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.config_set("requirepass", REDIS_PASSWORD)
    admin.close()
    try:
        yield server
    finally:
        server.cleanup()


def redis_url(server: RedisServer) -> str:
    return f"redis://:{REDIS_PASSWORD}@127.0.0.1:{server.port}/0"


def assert_no_password(text: str) -> None:
    leaked = [p for p in PASSWORDS if p in text]
    assert not leaked, f"{leaked} in the log:\n{text[-3000:]}"


async def test_the_collector_logs_its_urls_masked(tmp_path, caplog, locked_redis):
    """Start (queue and shared assembly state on a Redis with a password), forward to a dead endpoint with
    credentials, stop: the start line names the queue masked, the forward drop names the endpoint masked."""
    caplog.set_level(logging.INFO)
    dead = free_port()
    config = load_config(
        overrides={
            "role": "receiver",
            "data_dir": str(tmp_path),
            "listen": {"http_port": 0, "grpc_port": None, "metrics_port": None},
            "queue": {"url": redis_url(locked_redis)},
            "assembly": {"shared_state": redis_url(locked_redis)},
            "forward": {"endpoint": f"http://fwd:{FORWARD_PASSWORD}@127.0.0.1:{dead}", "max_attempts": 1},
        },
        environ={},
    )
    app = CollectorApp(config)
    await app.start()
    try:
        async with aiohttp.ClientSession() as s:
            body = F.to_request(F.ragtrace_shaped())[1].SerializeToString()
            async with s.post(
                f"http://127.0.0.1:{app.http_port}/v1/traces",
                data=body,
                headers={"Content-Type": "application/x-protobuf"},
            ) as reply:
                assert reply.status == 200
        assert app.forwarder is not None and await asyncio.to_thread(app.forwarder.flush, 10)
        assert app.forwarder.count("unreachable") == 1
    finally:
        await app.stop(drain_timeout=1)
    assert f"queue redis://:***@127.0.0.1:{locked_redis.port}/0" in caplog.text, caplog.text
    assert f"forwarding to http://fwd:***@127.0.0.1:{dead}" in caplog.text, caplog.text
    assert_no_password(caplog.text)


def test_the_exporters_log_their_endpoints_masked(caplog):
    """Phoenix unreachable, and an OTLP events endpoint written as ``/v1/traces``: both log the URL masked."""
    caplog.set_level(logging.INFO)
    dead = free_port()
    record = RagRecord(trace_id="5" * 32, pipeline="qa", metadata={"root_span_id": "b7ad6b7169203331"})
    result = MetricResult("faithfulness", "scored", 0.5, label="fail")
    phoenix = PhoenixAnnotations(
        f"http://ph:{PHOENIX_PASSWORD}@127.0.0.1:{dead}", max_attempts=1, flush_interval=0.02, timeout=2
    )
    try:
        phoenix.emit(record, [result], "local")
        assert phoenix.flush(10)
    finally:
        phoenix.shutdown(1)
    assert phoenix.count("unreachable") == 2
    events = EvaluationEvents(f"http://ev:{EVENTS_PASSWORD}@127.0.0.1:{dead}/v1/traces", batch=False, timeout=1)
    try:
        events.emit(record, [result], "local")
    finally:
        events.shutdown()
    assert f"phoenix at http://ph:***@127.0.0.1:{dead}/v1/" in caplog.text, caplog.text
    assert f"export.otlp_events.endpoint http://ev:***@127.0.0.1:{dead}/v1/traces" in caplog.text, caplog.text
    assert_no_password(caplog.text)


class Serving:
    """``ragtrace-collector serve --config`` as run in production, its whole output kept in a file."""

    def __init__(self, workdir: Path, config: dict) -> None:
        (workdir / "collector.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRACE_")}
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        self.log = workdir / "collector.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ragtrace_collector.cli", "serve", "--config", str(workdir / "collector.yaml")],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60.0) -> bool:
        """Whether ``text`` appeared in the output before the process exited or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return text in self.output()
            time.sleep(0.05)
        return True

    def stop(self) -> int:
        """SIGTERM (if still running) and the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def receiver_config(workdir: Path, queue_url: str, **sections: object) -> dict:
    return {
        "role": "receiver",
        "data_dir": str(workdir / "data"),
        "listen": {"host": "127.0.0.1", "http_port": free_port(), "grpc_port": None, "metrics_port": None},
        "queue": {"url": queue_url},
        **sections,
    }


def test_the_serving_process_never_writes_the_password(tmp_path, locked_redis):
    """The real process, start to stop, forwarding to a dead endpoint with credentials, its whole output read."""
    dead = free_port()
    config = receiver_config(
        tmp_path,
        redis_url(locked_redis),
        assembly={"shared_state": redis_url(locked_redis)},
        forward={"endpoint": f"http://fwd:{FORWARD_PASSWORD}@127.0.0.1:{dead}", "max_attempts": 1},
    )
    serving = Serving(tmp_path, config)
    try:
        assert serving.wait_for("ragtrace-collector serving"), serving.output()
        request = urllib.request.Request(
            f"http://127.0.0.1:{config['listen']['http_port']}/v1/traces",
            data=F.to_request(F.ragtrace_shaped())[1].SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200
        assert serving.wait_for("a request dropped", timeout=20), serving.output()
    finally:
        serving.stop()
    output = serving.output()
    assert f"queue redis://:***@127.0.0.1:{locked_redis.port}/0" in output, output
    assert f"forwarding to http://fwd:***@127.0.0.1:{dead}" in output, output
    assert_no_password(output)


def test_a_queue_url_it_cannot_use_is_refused_masked(tmp_path):
    """The refusal of an unsupported queue URL quotes it: masked."""
    serving = Serving(tmp_path, receiver_config(tmp_path, f"redis+sentinel://:{REDIS_PASSWORD}@127.0.0.1:26379/0"))
    assert not serving.wait_for("ragtrace-collector serving")
    assert serving.stop() == 1, serving.output()
    assert "redis+sentinel://:***@127.0.0.1:26379/0" in serving.output(), serving.output()
    assert_no_password(serving.output())
