"""The collector's components under one lifecycle, over a real collector: started dependencies first, shut down in
reverse; a start that fails releases what started; a component that fails its shutdown skips none of the others."""

from __future__ import annotations

import socket

import aiohttp
import pytest

from ragtrace_collector.config import load_config
from ragtrace_collector.internal.component import Closing
from ragtrace_collector.queue import open_queue
from ragtrace_collector.service.app import CollectorApp
from tests.support import span_fixtures as F
from tests.support.net import free_port

PB = {"Content-Type": "application/x-protobuf"}


def make_config(tmp_path, **listen):
    return load_config(
        overrides={
            "data_dir": str(tmp_path),
            "listen": {"http_port": 0, "grpc_port": 0, "metrics_port": 0, **listen},
            "assembly": {"grace_seconds": 30.0, "sweep_interval_seconds": 60.0},
            "limits": {"max_loop_lag_seconds": None},
            "scoring": {"metrics": ["rouge"]},
        },
        environ={},
    )


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def test_components_start_dependencies_first(tmp_path):
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    try:
        names = app.components.names
    finally:
        await app.stop(drain_timeout=2)
    assert names[0] == "queue"
    order = {name: i for i, name in enumerate(names)}
    # stores before what writes them, exporters before what feeds them, the receivers last (so shut down first)
    assert order["label store"] < order["explorer"] < order["/metrics listener"]
    assert order["assembly journal"] < order["assembly sweep"] < order["otlp/http receiver"]
    assert order["results store"] < order["result sinks"] < order["scoring worker"] < order["assembly sweep"]
    assert names[-2:] == ["otlp/http receiver", "otlp/grpc receiver"]
    assert app.stop_failures == []


async def test_a_start_that_fails_releases_what_had_started(tmp_path):
    with socket.socket() as taken:  # the gRPC port is someone else's: the last receiver cannot bind
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        grpc_port = taken.getsockname()[1]
        http_port, metrics_port = free_port(), free_port()
        app = CollectorApp(make_config(tmp_path, http_port=http_port, metrics_port=metrics_port, grpc_port=grpc_port))
        with pytest.raises(OSError, match="cannot bind OTLP/gRPC"):
            await app.start()
    assert not app.ready
    # the listeners that had bound are released, the stores closed: a second collector can start at once
    assert bindable(http_port) and bindable(metrics_port)
    assert app.components.names == []
    again = CollectorApp(make_config(tmp_path, http_port=http_port, metrics_port=metrics_port))
    await again.start()
    await again.stop(drain_timeout=2)
    assert again.stop_failures == []


async def test_a_component_failing_its_shutdown_skips_none_of_the_others(tmp_path):
    """A component whose release fails (a file on a full disk: /dev/full refuses the flush at close) is shut down
    first; the receivers still stop, the in-flight trace is still flushed to the queue, the stores still close."""
    app = CollectorApp(make_config(tmp_path))
    await app.start()
    full = open("/dev/full", "w")  # noqa: SIM115 - closed by the lifecycle, which is the point
    full.write("what a disk that is full cannot take")
    app.components.adopt("full disk", Closing(full.close))
    trace_id, request = F.to_request(F.ragtrace_shaped())
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{app.http_port}/v1/traces", data=request.SerializeToString(), headers=PB) as r,
    ):
        assert r.status == 200
    ports = (app.http_port, app.grpc_port, app.metrics_port)
    assert app.queue is not None and app.queue.depth() == 0  # within its 30 s grace

    await app.stop(drain_timeout=3)

    assert [f.component for f in app.stop_failures] == ["full disk"]
    assert "No space left on device" in str(app.stop_failures[0])
    assert all(bindable(p) for p in ports if p is not None)  # every listener closed
    assert app.registry.get_sample_value("ragtrace_assembly_completed_total", {"reason": "shutdown"}) == 1
    with pytest.raises(Exception, match="closed database"):
        app.queue.depth()  # the queue the flush wrote to was closed after it
    queue = open_queue(app.config.queue_url, 10)
    try:
        (leased,) = queue.lease(5, 10)
    finally:
        queue.close()
    assert leased.record.trace_id == trace_id
