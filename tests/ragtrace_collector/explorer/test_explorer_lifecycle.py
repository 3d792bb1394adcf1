"""The explorer as a component (``internal.component``), served on a real ``/metrics`` listener: a read stuck on a
results store another process holds locked bounds the explorer's shutdown, is reported, and stops neither the
listener nor the label store; the stuck read closes the store it opens once the lock goes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import time
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import ExplorerConfig
from ragtrace_collector.explorer.app import API_PATH, Explorer
from ragtrace_collector.explorer.thresholds import Thresholds
from ragtrace_collector.exporter.prometheus import MetricsEndpoint
from ragtrace_collector.internal.component import Lifecycle
from ragtrace_collector.review.labels import LabelStore
from ragtrace_collector.scoring.results_store import ResultsStore

SLACK = 1.5  # a loaded machine


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return False
    return True


def locked(path: Path) -> sqlite3.Connection:
    """Another process's connection holding the database exclusively (a backup, a long migration)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA locking_mode=EXCLUSIVE")
    db.execute("BEGIN EXCLUSIVE")
    db.execute("CREATE TABLE IF NOT EXISTS held (x)")
    return db


async def test_a_read_stuck_on_a_locked_store_bounds_the_explorers_shutdown_and_stops_no_other(tmp_path):
    path = tmp_path / "results.sqlite"
    ResultsStore(path).close()  # a store with nothing scored yet: its file is there
    labels = LabelStore(tmp_path / "labels.sqlite")  # apart: the lock below is on the results file alone
    explorer = Explorer(str(path), ExplorerConfig(), thresholds=Thresholds(), labels=labels)
    endpoint = MetricsEndpoint(CollectorRegistry(), "127.0.0.1", 0, routes=[explorer.add_routes])
    parts = Lifecycle()
    await parts.start("label store", labels)
    await parts.start("explorer", explorer)
    await parts.start("/metrics listener", endpoint)
    holder = locked(path)

    async def list_records() -> int:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{endpoint.port}{API_PATH}records") as r:
            return r.status

    reading = asyncio.create_task(list_records())
    try:
        await asyncio.sleep(0.5)  # the read is opening the store, waiting on the lock
        started = time.monotonic()
        failures = await parts.shutdown(1.0)
        assert time.monotonic() - started < 1.0 + 2 * SLACK
        assert "explorer: timed out" in [str(f) for f in failures], failures
        with pytest.raises(sqlite3.ProgrammingError):
            labels.counts()  # the label store, shut down after the explorer, is closed
        assert not listening(endpoint.port)
    finally:
        holder.rollback()
        holder.close()
    reading.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
        await reading
    assert explorer.store() is None  # shut: the stuck read closed what it opened, and nothing opens it again
    explorer.shutdown(1.0)  # idempotent
