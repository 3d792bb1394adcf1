"""Sending again at start what an exporter never confirmed (``service.scoring.ExportResume``), and the configured
sinks confirming into the results store, over a real loopback Phoenix stand-in."""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from ragtrace_collector.config import load_config
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.scoring.sink import ResultSink
from ragtrace_collector.service.scoring import ExportResume, Resend, result_sinks
from tests.support.fake_phoenix import FakeDownstream


class Collecting(ResultSink):
    """A result sink keeping what it is given, and how often it was asked to flush."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, str, str, str]] = []
        self.flushes = 0

    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> int:
        self.emitted += [(record.key, r.metric, r.status, judge) for r in results]
        return len(results)

    def force_flush(self, timeout: float | None = None) -> bool:
        self.flushes += 1
        return True


def stored(tmp_path, n: int) -> ResultsStore:
    store = ResultsStore(tmp_path / "results.sqlite")
    for i in range(n):
        record = RagRecord(trace_id=f"{i + 1:032x}", metadata={"root_span_id": f"{i + 1:016x}"})
        store.add(record, [MetricResult("faithfulness", "scored", 0.5), MetricResult("bleu", "error")], "local")
    return store


def test_unconfirmed_results_are_sent_again_bounded(tmp_path):
    store = stored(tmp_path, 5)
    store.mark_exported("phoenix", [(f"{1:032x}", "faithfulness")])
    sink = Collecting()
    resume = ExportResume(store, [Resend("phoenix", ("scored",), sink)], page=2)
    resume.start()
    assert resume.join(10)
    assert [k for k, *_ in sink.emitted] == [f"{i + 1:032x}" for i in range(1, 5)]  # the confirmed one is not
    assert {(m, s, j) for _, m, s, j in sink.emitted} == {("faithfulness", "scored", "local")}
    assert sink.flushes  # a page waits for the previous one to leave
    capped = Collecting()
    resume = ExportResume(store, [Resend("phoenix", ("scored",), capped)], max_results=3, page=2)
    resume.start()
    assert resume.join(10)
    assert len(capped.emitted) == 3


def test_results_stored_after_the_start_are_the_live_sinks_own(tmp_path):
    store = stored(tmp_path, 0)
    sink = Collecting()
    resume = ExportResume(store, [Resend("phoenix", ("scored",), sink)])
    time.sleep(0.01)
    store.add(RagRecord(trace_id="f" * 32), [MetricResult("faithfulness", "scored", 0.5)], "local")
    resume.start()
    assert resume.join(10)
    assert sink.emitted == []


def test_the_configured_phoenix_sink_confirms_and_resends(tmp_path):
    downstream = FakeDownstream()
    store = stored(tmp_path, 3)
    cfg = load_config(
        overrides={"data_dir": str(tmp_path), "export": {"phoenix": {"endpoint": downstream.url}}}, environ={}
    )
    try:
        sinks = result_sinks(cfg, CollectorRegistry(), store)
        assert sinks is not None and sinks.resume is not None
        sinks.start()  # the resume starts with the sinks (the component contract), not when they are built
        assert sinks.resume.join(30)
        deadline = time.monotonic() + 30
        while len(store.exported("phoenix")) < 3:
            assert time.monotonic() < deadline, store.exported("phoenix")
            time.sleep(0.05)
        assert len(downstream.annotations) == 6  # a span and a trace annotation per scored result
        sinks.shutdown(5.0)
        # a second start has nothing left to send
        sinks = result_sinks(cfg, CollectorRegistry(), store)
        assert sinks is not None and sinks.resume is not None
        sinks.start()
        assert sinks.resume.join(30)
        assert sinks.resume.sent == {}
        sinks.shutdown(5.0)
    finally:
        downstream.stop()
        store.close()
