"""Exporters stop within the bound they are given, against a downstream that never answers (a real loopback
server holding every request), and count what they leave as ``shutdown``; what was confirmed is only what the
downstream took."""

from __future__ import annotations

import contextlib
import time

import pytest

from ragtrace_collector.exporter.forward import Forwarder
from ragtrace_collector.exporter.otlp_events import EvaluationEvents
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from tests.support.fake_phoenix import FakeDownstream

RECORD = RagRecord(trace_id="5" * 32, metadata={"root_span_id": "b7ad6b7169203331"})
RESULTS = [MetricResult("faithfulness", "scored", 0.5), MetricResult("bleu", "scored", 0.1)]
BOUND = 1.0
SLACK = 1.5  # threads waking on a loaded machine


@pytest.fixture
def stalled():
    downstream = FakeDownstream(stalled=True)
    yield downstream
    downstream.stop()


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def timed(stop) -> float:
    started = time.monotonic()
    stop()
    return time.monotonic() - started


def test_phoenix_stops_within_its_bound_and_counts_the_rest(stalled):
    confirmed: list[tuple[str, str]] = []
    sink = PhoenixAnnotations(stalled.url, timeout=30, flush_interval=0.01, confirm=confirmed.extend)
    sink.emit(RECORD, RESULTS, "local")
    wait_until(lambda: stalled.waiting >= 1)
    assert timed(lambda: sink.shutdown(BOUND)) < BOUND + SLACK
    assert sink.count("shutdown") == 4 and sink.count("sent") == 0
    assert confirmed == []  # nothing taken: all of it is sent again at the next start


def test_phoenix_confirms_a_result_once_both_its_kinds_were_taken(stalled):
    confirmed: list[tuple[str, str]] = []
    sink = PhoenixAnnotations(stalled.url, flush_interval=0.01, confirm=confirmed.extend)
    stalled.release()
    sink.emit(RECORD, RESULTS, "local")
    assert sink.flush(30)
    sink.shutdown(5)
    assert sorted(confirmed) == [("5" * 32, "bleu"), ("5" * 32, "faithfulness")]


def test_events_stop_within_their_bound_and_count_the_rest(stalled):
    confirmed: list[tuple[str, str]] = []
    events = EvaluationEvents(stalled.url, timeout=30, confirm=confirmed.extend)
    assert events.emit(RECORD, RESULTS, "local") == 2
    assert timed(lambda: events.shutdown(BOUND)) < BOUND + SLACK
    assert events.count("shutdown") == 2 and events.count("sent") == 0
    assert confirmed == []


def test_events_confirm_what_the_endpoint_took(stalled):
    confirmed: list[tuple[str, str]] = []
    stalled.release()
    events = EvaluationEvents(stalled.url, confirm=confirmed.extend, batch=False)
    events.emit(RECORD, RESULTS, "local")
    events.shutdown(5)
    assert sorted(confirmed) == [("5" * 32, "bleu"), ("5" * 32, "faithfulness")]
    assert events.count("sent") == 2 and events.count("shutdown") == 0


def test_forwarding_stops_within_its_bound(stalled):
    forwarder = Forwarder(stalled.url, timeout=30)
    for _ in range(3):
        assert forwarder.submit(b"\x0a\x00")
    wait_until(lambda: stalled.waiting >= 1)
    assert timed(lambda: forwarder.shutdown(BOUND)) < BOUND + SLACK
    assert forwarder.count("shutdown") == 3


class _SlowCollector:
    """A collector whose scrape takes ``seconds`` (a Redis round trip or a SQLite lock that does not come back)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def collect(self):
        time.sleep(self.seconds)
        return []


async def test_the_metrics_listener_gives_a_scrape_in_flight_its_grace_not_aiohttps_sixty_seconds():
    import asyncio

    import aiohttp
    from prometheus_client import CollectorRegistry

    from ragtrace_collector.exporter.prometheus import MetricsEndpoint
    from ragtrace_collector.internal.component import LISTENER_GRACE_SECONDS

    registry = CollectorRegistry()
    registry.register(_SlowCollector(4.0))
    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0)
    await endpoint.start()

    async def scrape() -> None:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{endpoint.port}/metrics") as r:
            await r.read()

    scraping = asyncio.create_task(scrape())
    await asyncio.sleep(0.3)  # the scrape is in flight, collecting
    started = time.monotonic()
    await endpoint.shutdown(30.0)
    assert time.monotonic() - started < LISTENER_GRACE_SECONDS + SLACK  # it waited 4 s (aiohttp's 60 s bound)
    scraping.cancel()
    with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
        await scraping
