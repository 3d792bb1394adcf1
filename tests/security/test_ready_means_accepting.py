"""Ready only when it accepts (issue 33, D17): ``/readyz`` says 503 whenever ingest would shed a request for a
reason other than its request slots being all taken (event-loop lag, downstream pressure, a queue that cannot
write), so a load balancer or an orchestrator never routes traffic that is then refused.

* ``ragtrace-collector serve`` with an LLM judge: loading litellm at start blocks the event loop, and the loop-lag
  watcher then sheds for a while; the first 200 from ``/readyz`` (on the OTLP/HTTP port and on the metrics port)
  must be followed by an accepted request, not a 503.
* In process, over real sockets: downstream pressure (assembly near its bound) turns ``/readyz`` to 503 on both
  ports together with admission; request slots all taken do not (that is momentary and per request).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from ragtrace_collector.config import load_config
from ragtrace_collector.queue.sqlite import SQLiteQueue
from ragtrace_collector.service.app import CollectorApp
from tests.support import span_fixtures as F
from tests.support.collector_process import PROTOBUF, collector_config, serve, until
from tests.support.scripted_openai import ScriptedOpenAI


def _trace() -> bytes:
    return F.to_request(F.ragtrace_shaped())[1].SerializeToString()


@pytest.mark.parametrize("probe", ["otlp", "metrics"])
def test_first_ready_at_start_with_an_llm_judge_accepts(tmp_path: Path, probe: str) -> None:
    """Polled from the moment the process starts, the first 200 of ``/readyz`` means the next request is taken."""
    with ScriptedOpenAI() as judge:
        config = collector_config(
            tmp_path,
            judge={"model": "openai/judge", "base_url": judge.base_url, "api_key": "k"},
            scoring={"metrics": ["faithfulness"]},
        )
        with serve(tmp_path, config) as served:
            base = served.otlp if probe == "otlp" else served.metrics
            until(lambda: served.readyz(base) == 200, 120, "/readyz to answer 200", served)
            reply = served.post(_trace())
            assert reply.status_code == 200, f"/readyz said ready, then the request was refused: {reply.status_code}"


# --- in process: each reason to shed, seen by /readyz on both ports ------------------------------------------------


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[CollectorApp]:
    cfg = load_config(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "listen": {"host": "127.0.0.1", "http_port": 0, "grpc_port": None, "metrics_port": 0},
            "role": "receiver",
            # traces wait in assembly (a long grace) and five of them are over 90% of its bound
            "assembly": {"grace_seconds": 60, "max_inflight_traces": 5, "sweep_interval_seconds": 0.05},
        },
        environ={},
    )
    collector = CollectorApp(cfg, queue=SQLiteQueue(tmp_path / "queue.sqlite"))
    await collector.start()
    try:
        yield collector
    finally:
        await collector.stop(0.0)
        assert collector.queue is not None
        collector.queue.close()


async def _get(client: httpx.AsyncClient, port: int | None, path: str = "/readyz") -> int:
    return (await client.get(f"http://127.0.0.1:{port}{path}")).status_code


async def _post(client: httpx.AsyncClient, port: int | None) -> httpx.Response:
    return await client.post(f"http://127.0.0.1:{port}/v1/traces", content=_trace(), headers=PROTOBUF)


async def test_downstream_pressure_is_not_ready_on_both_ports(app: CollectorApp) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        assert await _get(client, app.http_port) == 200 and await _get(client, app.metrics_port) == 200
        for _ in range(5):
            assert (await _post(client, app.http_port)).status_code == 200
        refused = await _post(client, app.http_port)
        assert refused.status_code == 503 and refused.headers["Retry-After"]
        assert await _get(client, app.http_port) == 503
        assert await _get(client, app.metrics_port) == 503


async def test_request_slots_all_taken_is_still_ready(app: CollectorApp) -> None:
    """A full set of request slots refuses the request that finds them taken, but frees up as each request ends:
    not a reason to take the collector out of rotation."""
    assert app.ingestor is not None
    async with httpx.AsyncClient(timeout=30) as client:
        app.ingestor.pending = app.ingestor.max_pending
        try:
            assert (await _post(client, app.http_port)).status_code == 503
            assert await _get(client, app.http_port) == 200
            assert await _get(client, app.metrics_port) == 200
        finally:
            app.ingestor.pending = 0
        assert (await _post(client, app.http_port)).status_code == 200
