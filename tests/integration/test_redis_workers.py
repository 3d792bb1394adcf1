"""Several scoring workers (the real worker, engine and results stores) on one Redis stream.

Each worker has its own data directory, hence its own results store, as on separate machines: only
the Redis scored marks can keep a record delivered twice from counting twice in the summed metrics.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import load_config
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue.redis import RedisStreamQueue
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.service.scoring import build_worker

pytestmark = pytest.mark.integration

LEXICAL = ["bleu", "rouge", "levenshtein"]


def rec(i: int) -> RagRecord:
    return RagRecord(
        trace_id=f"{i + 1:032x}",
        pipeline="qa",
        user_input=f"what is {i}?",
        response=f"the answer is {i}",
        reference=f"the answer is {i}",
    )


def total(registries, metric: str) -> float:
    return sum(
        r.get_sample_value("ragtrace_evaluations_total", {"metric": metric, "outcome": "scored"}) or 0
        for r in registries
    )


async def test_three_workers_with_separate_stores_count_each_record_once(redis_server, tmp_path):
    url = f"{redis_server.url}?prefix={uuid.uuid4().hex[:8]}"
    producer = RedisStreamQueue(url)
    for i in range(40):
        assert producer.put(rec(i))
    for i in range(0, 40, 4):  # the same records again: a retried delivery, as after a lease lapse
        assert producer.put(rec(i))
    registries, workers, queues = [], [], []
    for w in range(3):
        cfg = load_config(
            overrides={
                "data_dir": str(tmp_path / f"w{w}"),
                "scoring": {"metrics": LEXICAL, "concurrency": 3, "lease_seconds": 30},
            },
            environ={},
        )
        reg = CollectorRegistry()
        q = RedisStreamQueue(url)
        registries.append(reg)
        queues.append(q)
        workers.append(build_worker(cfg, reg, q, judge=Judge()))
    tasks = [asyncio.create_task(w.run()) for w in workers]
    deadline = asyncio.get_running_loop().time() + 20
    while producer.depth() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    for w in workers:
        await w.stop(drain_timeout=5)
    await asyncio.gather(*tasks)
    assert producer.depth() == 0
    for metric in LEXICAL:
        assert total(registries, metric) == 40
    # Work was shared, and every (record, metric) has exactly one owner mark.
    per_worker = [total([r], "bleu") for r in registries]
    assert sum(1 for n in per_worker if n > 0) >= 2, per_worker
    owners = {q.consumer for q in queues}
    marks = producer.scored_marks
    assert all(marks.owner_of(rec(i).key, m) in owners for i in range(40) for m in LEXICAL)
    assert registries[0].get_sample_value("ragtrace_queue_depth") == 0


async def test_restarted_worker_counts_results_it_stored_but_never_marked(redis_server, tmp_path):
    """A worker killed between storing results locally and setting their cluster-wide marks: when the
    record comes back to it (restarted, same data directory) the stored results are marked and
    counted once, not skipped as "already scored" and lost to the metrics."""
    from ragtrace_collector.scoring.engine import evaluate_record
    from ragtrace_collector.scoring.results_store import ResultsStore

    url = f"{redis_server.url}?prefix={uuid.uuid4().hex[:8]}"
    producer = RedisStreamQueue(url)
    crashed_rec, partial_rec, counted_rec = rec(0), rec(1), rec(2)
    for r in (crashed_rec, partial_rec, counted_rec):
        assert producer.put(r)
    data_dir = tmp_path / "w"
    # The first life of the worker: it leased all three, stored results, and died before marking
    # (crashed_rec: all metrics; partial_rec: one metric) or after marking (counted_rec).
    fast = {"alive_interval": 0.2, "alive_ttl": 1.0}  # a dead consumer's entries are taken over after 1 s
    first_life = RedisStreamQueue(url, **fast)
    assert len(first_life.lease(3, lease_seconds=0.3)) == 3
    store = ResultsStore(data_dir / "results.sqlite")
    store.add(crashed_rec, await evaluate_record(crashed_rec, LEXICAL, Judge()), "null")
    store.add(partial_rec, await evaluate_record(partial_rec, ["bleu"], Judge()), "null")
    store.add(counted_rec, await evaluate_record(counted_rec, LEXICAL, Judge()), "null")
    store.close()
    for m in LEXICAL:
        assert first_life.scored_marks.first(counted_rec.key, m)
    first_life.close()

    cfg = load_config(
        overrides={"data_dir": str(data_dir), "scoring": {"metrics": LEXICAL, "concurrency": 2, "lease_seconds": 30}},
        environ={},
    )
    reg = CollectorRegistry()
    queue = RedisStreamQueue(url, **fast)
    worker = build_worker(cfg, reg, queue, judge=Judge())
    task = asyncio.create_task(worker.run())
    deadline = asyncio.get_running_loop().time() + 15
    while producer.depth() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert producer.depth() == 0
    # Delivered yet again (a retried put): nothing counts twice.
    assert producer.put(crashed_rec)
    while producer.depth() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    await worker.stop(drain_timeout=5)
    await task
    assert producer.depth() == 0
    for metric in LEXICAL:
        assert total([reg], metric) == 2, metric  # crashed_rec and partial_rec; counted_rec was counted before
        assert queue.scored_marks.owner_of(crashed_rec.key, metric) == queue.consumer
        assert queue.scored_marks.owner_of(partial_rec.key, metric) == queue.consumer
        assert queue.scored_marks.owner_of(counted_rec.key, metric) == first_life.consumer
    # one record each, though partial_rec's results came from two lives
    assert reg.get_sample_value("ragtrace_records_scored_total", {"pipeline": "qa"}) == 2
    assert ResultsStore(data_dir / "results.sqlite").counts_per_key() == {
        crashed_rec.key: 3,
        partial_rec.key: 3,
        counted_rec.key: 3,
    }
