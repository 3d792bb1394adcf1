"""The collector enforces the results store's retention (export.results_retention) when it starts scoring."""

from __future__ import annotations

import asyncio
import time

from ragtrace_collector.config import load_config
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.service.app import CollectorApp


async def test_old_records_leave_the_store_when_the_collector_runs(tmp_path):
    config = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "listen": {"http_port": None, "grpc_port": None, "metrics_port": None},
            "export": {"results_retention": {"max_age_hours": 1.0, "interval_seconds": 0.1}},
        },
        environ={},
    )
    store = ResultsStore(config.results_path)
    for i in range(3):
        store.add(RagRecord(trace_id=f"{i:032x}"), [MetricResult("faithfulness", "scored", 0.5)], "local")
    old = (time.time() - 7200, f"{0:032x}")
    store._db.execute("UPDATE records SET scored_at = ? WHERE record_key = ?", old)
    store._db.execute("UPDATE results SET scored_at = ? WHERE record_key = ?", old)
    store.close()

    app = CollectorApp(config)
    await app.start()
    try:
        for _ in range(50):
            if app.worker is not None and len(app.worker.store.counts_per_key()) == 2:
                break
            await asyncio.sleep(0.05)
        assert app.worker is not None
        assert set(app.worker.store.counts_per_key()) == {f"{1:032x}", f"{2:032x}"}
    finally:
        await app.stop(drain_timeout=1)
