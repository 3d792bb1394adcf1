"""CollectorApp composition: bound ports, backpressure into admission, flush on stop."""

from __future__ import annotations

import aiohttp

from ragtrace_collector.config import load_config
from ragtrace_collector.queue import open_queue
from ragtrace_collector.service.app import CollectorApp
from tests.support import span_fixtures as F

PB = {"Content-Type": "application/x-protobuf"}


def make_config(tmp_path, **over):
    data = {
        "role": "receiver",
        "data_dir": str(tmp_path),
        "listen": {"http_port": 0, "grpc_port": 0, "metrics_port": 0},
        "assembly": {"grace_seconds": 30.0, "sweep_interval_seconds": 60.0},
        # shedding on event-loop lag is tested on its own (below); elsewhere a busy machine must not shed
        "limits": {"max_loop_lag_seconds": None},
    }
    for key, value in over.items():
        data.setdefault(key, {}).update(value) if isinstance(value, dict) else data.__setitem__(key, value)
    return load_config(overrides=data, environ={})


async def post(app, body: bytes) -> int:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{app.http_port}/v1/traces", data=body, headers=PB) as r,
    ):
        return r.status


async def test_ports_ready_and_flush_on_stop(tmp_path):
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    try:
        assert all(p and p > 0 for p in (app.http_port, app.grpc_port, app.metrics_port))
        assert app.ready
        trace_id, request = F.to_request(F.ragtrace_shaped())
        assert await post(app, request.SerializeToString()) == 200
        assert app.queue.depth() == 0  # still inside its 30 s grace period
    finally:
        await app.stop(drain_timeout=1)
    queue = open_queue(app.config.queue_url, 10)
    try:
        (leased,) = queue.lease(5, 10)
    finally:
        queue.close()
    assert leased.record.trace_id == trace_id and leased.record.response == F.ANSWER
    assert app.registry.get_sample_value("ragtrace_assembly_completed_total", {"reason": "shutdown"}) == 1


async def test_assembly_memory_near_its_bound_sheds(tmp_path):
    from ragtrace_collector.receiver.decode import extract_spans

    _, request = F.to_request(F.ragtrace_shaped(n_docs=3))
    per_trace = sum(sp.nbytes for spans in extract_spans(request).traces.values() for sp in spans)
    bound = int(per_trace * 4.2)  # four traces fit, and pass 90% of it
    app = CollectorApp(make_config(tmp_path, assembly={"max_inflight_bytes": bound}))
    await app.start()
    try:
        statuses = [await post(app, F.to_request(F.ragtrace_shaped(n_docs=3))[1].SerializeToString()) for _ in range(8)]
        assert statuses == [200] * 4 + [503] * 4
        assert app.assembler.state.inflight()[1] <= bound
        assert (
            app.registry.get_sample_value("ragtrace_otlp_requests_total", {"transport": "http", "status": "overloaded"})
            == 4
        )
    finally:
        await app.stop(drain_timeout=1)


async def test_sweep_backlog_sheds_until_it_catches_up(tmp_path):
    app = CollectorApp(make_config(tmp_path, assembly={"grace_seconds": 0.0}, limits={"max_loop_lag_seconds": 0.3}))
    await app.start()
    app.sweeper.chunk = 2
    try:
        for _ in range(3):
            assert await post(app, F.to_request(F.ragtrace_shaped())[1].SerializeToString()) == 200
        import asyncio

        app.sweeper.behind_since = (
            asyncio.get_running_loop().time() - 1.0
        )  # a sweep found more than a chunk waiting, 1 s ago
        assert await post(app, F.to_request(F.ragtrace_shaped())[1].SerializeToString()) == 503
        assert await app.sweeper.run_once() == 3  # takes chunk after chunk until caught up
        assert app.sweeper.behind_since is None
        assert await post(app, F.to_request(F.ragtrace_shaped())[1].SerializeToString()) == 200
    finally:
        await app.stop(drain_timeout=1)


async def test_worker_role_scores_what_receivers_queued(tmp_path):
    from ragtrace_collector.model.record import RagRecord

    config = make_config(tmp_path, role="worker", scoring={"metrics": ["faithfulness"], "concurrency": 1})
    queue = open_queue(config.queue_url, 10)
    queue.put(
        RagRecord(
            trace_id="ab" * 16,
            pipeline="p",
            user_input="What does the warranty cover?",
            retrieved_contexts=["The warranty covers manufacturing defects for two years."],
            response="The warranty covers manufacturing defects.",
        )
    )
    queue.close()
    app = CollectorApp(config)
    await app.start()
    try:
        assert app.http_port is None and app.grpc_port is None and app.metrics_port
        import asyncio

        g = app.registry.get_sample_value
        for _ in range(300):
            if g("ragtrace_evaluations_total", {"metric": "faithfulness", "outcome": "scored"}):
                break
            await asyncio.sleep(0.05)
        assert g("ragtrace_evaluations_total", {"metric": "faithfulness", "outcome": "scored"}) == 1
        assert app.queue.depth() == 0
    finally:
        await app.stop(drain_timeout=1)


async def test_assembly_trace_count_near_its_bound_sheds(tmp_path):
    app = CollectorApp(make_config(tmp_path, assembly={"max_inflight_traces": 3}))
    await app.start()
    try:
        statuses = [await post(app, F.to_request(F.ragtrace_shaped())[1].SerializeToString()) for _ in range(5)]
        assert statuses == [200, 200, 200, 503, 503]
        assert app.registry.get_sample_value("ragtrace_assembly_completed_total", {"reason": "evicted"}) is None
    finally:
        await app.stop(drain_timeout=1)
