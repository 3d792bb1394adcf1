"""The component contract's lifecycle (``internal.component.Lifecycle``): started in order, shut down in reverse,
every component past the failures of the others, within one deadline; over real stores and a real exporter
against a downstream that never answers."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from ragtrace_collector.exporter.forward import Forwarder
from ragtrace_collector.internal.component import AsyncComponent, Closing, Component, Lifecycle, Task
from ragtrace_collector.queue.sqlite import SQLiteQueue
from ragtrace_collector.review.labels import LabelStore
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.fake_phoenix import FakeDownstream

SLACK = 1.5  # threads waking on a loaded machine


class Noting(AsyncComponent):
    """A component that notes its start and shutdown in ``log`` and fails as told."""

    def __init__(self, name: str, log: list[str], fail_start: bool = False, fail_shutdown: bool = False) -> None:
        self.name, self.log, self.fail_start, self.fail_shutdown = name, log, fail_start, fail_shutdown

    async def start(self) -> None:
        if self.fail_start:
            raise OSError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    async def shutdown(self, timeout: float | None = None) -> None:
        self.log.append(f"shutdown {self.name}")
        if self.fail_shutdown:
            raise RuntimeError(f"{self.name} failed")


def closed(db_user) -> bool:
    """Whether a SQLite-backed store refuses to be used (its connection closed)."""
    try:
        db_user()
    except sqlite3.ProgrammingError:
        return True
    return False


async def test_shutdown_is_in_reverse_and_past_failures(tmp_path):
    log: list[str] = []
    queue = SQLiteQueue(tmp_path / "queue.sqlite")
    results = ResultsStore(tmp_path / "results.sqlite")
    labels = LabelStore(tmp_path / "results.sqlite")
    parts = Lifecycle()
    await parts.start("queue", queue)
    await parts.start("results store", results)
    await parts.start("a", Noting("a", log))
    await parts.start("b", Noting("b", log, fail_shutdown=True))
    await parts.start("label store", labels)
    await parts.start("c", Noting("c", log, fail_shutdown=True))
    assert parts.names == ["queue", "results store", "a", "b", "label store", "c"]

    failures = await parts.shutdown(5.0)

    assert log == ["start a", "start b", "start c", "shutdown c", "shutdown b", "shutdown a"]
    assert [str(f) for f in failures] == ["c: RuntimeError: c failed", "b: RuntimeError: b failed"]
    # the real stores after (and between) the failing ones were shut down too
    assert closed(queue.depth) and closed(lambda: results.metrics_done("k")) and closed(labels.counts)
    assert await parts.shutdown(1.0) == []  # nothing held any more


async def test_a_failed_start_shuts_down_what_started_and_raises(tmp_path):
    log: list[str] = []
    queue = SQLiteQueue(tmp_path / "queue.sqlite")
    parts = Lifecycle()
    await parts.start("queue", queue)
    await parts.start("a", Noting("a", log))
    with pytest.raises(OSError, match="b cannot start"):
        await parts.start("b", Noting("b", log, fail_start=True))
    assert log == ["start a", "shutdown b", "shutdown a"]  # the one that failed is shut down too, first
    assert closed(queue.depth)
    assert parts.names == []


async def test_one_deadline_bounds_the_whole_shutdown_and_the_rest_still_runs(tmp_path):
    """Two forwarders whose downstream holds every request: one stage after the other would take twice the bound;
    side by side (``start_beside``) they share it, and the store shut down after them still is."""
    downstream = FakeDownstream(stalled=True)
    forwarders = [Forwarder(downstream.url, timeout=30) for _ in range(2)]
    try:
        store = ResultsStore(tmp_path / "results.sqlite")
        parts = Lifecycle()
        await parts.start("results store", store)
        await parts.start("forwarder 1", forwarders[0])
        await parts.start_beside("forwarder 2", forwarders[1])
        for forwarder in forwarders:
            assert forwarder.submit(b"\x0a\x00")
        deadline = time.monotonic() + 10
        while downstream.waiting < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        started = time.monotonic()
        failures = await parts.shutdown(1.0)
        took = time.monotonic() - started
        assert took < 1.0 + SLACK, took
        assert failures == []  # each bounded itself within what it was given
        assert [f.count("shutdown") for f in forwarders] == [1, 1]
        assert closed(lambda: store.metrics_done("k"))
    finally:
        downstream.stop()


async def test_a_component_past_its_time_is_reported_and_not_waited_for(tmp_path):
    class Hung(Component):
        """A blocking component whose release never returns in time (a disk that stopped answering)."""

        def shutdown(self, timeout: float | None = None) -> None:
            time.sleep(3.0)

    store = ResultsStore(tmp_path / "results.sqlite")
    parts = Lifecycle()
    await parts.start("results store", store)
    await parts.start("hung", Hung())
    started = time.monotonic()
    failures = await parts.shutdown(0.2)
    assert time.monotonic() - started < 2.0
    assert [str(f) for f in failures] == ["hung: timed out"]
    assert closed(lambda: store.metrics_done("k"))


async def test_a_task_is_cancelled_then_flushed_once():
    ran: list[str] = []

    async def forever() -> None:
        while True:
            await asyncio.sleep(0.01)

    async def flush() -> None:
        ran.append("flush")

    closes: list[int] = []
    parts = Lifecycle()
    await parts.start("closing", Closing(lambda: closes.append(1)))
    task = await parts.start("sweep", Task("sweep", forever, then=flush))
    await asyncio.sleep(0.05)
    assert await parts.shutdown(1.0) == []
    await task.shutdown(1.0)  # idempotent: the flush runs once
    assert ran == ["flush"] and closes == [1]
