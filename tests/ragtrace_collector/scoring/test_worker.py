"""The scoring worker on the real engine, queue and results store: scores once, waits out failures."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import load_config
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue.sqlite import SQLiteQueue
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.service.scoring import build_worker

LEXICAL = ["bleu", "rouge", "levenshtein"]


def rec(i: int, pipeline: str = "qa", **kw) -> RagRecord:
    return RagRecord(
        trace_id=f"{i + 1:032x}",
        pipeline=pipeline,
        user_input=f"what is {i}?",
        response=f"the answer is {i}",
        reference=f"the answer is {i}" if i % 2 == 0 else "something else entirely",
        **kw,
    )


def config(tmp_path, **scoring):
    return load_config(
        overrides={
            "data_dir": str(tmp_path / "data"),
            "scoring": {"metrics": LEXICAL, "concurrency": 3, "lease_seconds": 30, **scoring},
        },
        environ={},
    )


async def drain(worker, queue, timeout=10.0):
    task = asyncio.create_task(worker.run())
    deadline = asyncio.get_running_loop().time() + timeout
    while queue.depth() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    await worker.stop(drain_timeout=5)
    await task


def count(registry, metric, outcome="scored"):
    return registry.get_sample_value("ragtrace_evaluations_total", {"metric": metric, "outcome": outcome}) or 0


async def test_scores_every_queued_record_once(tmp_path):
    cfg = config(tmp_path)
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    for i in range(6):
        assert queue.put(rec(i))
    registry = CollectorRegistry()
    worker = build_worker(cfg, registry, queue, judge=Judge())
    await drain(worker, queue)
    assert queue.depth() == 0
    for metric in LEXICAL:
        assert count(registry, metric) == 6
    labels = {"metric": "bleu", "service": "unknown", "pipeline": "qa", "judge": "judge"}
    assert registry.get_sample_value("ragtrace_eval_score_count", labels) == 6
    # exact matches (even i) score 1.0 on bleu
    assert registry.get_sample_value("ragtrace_eval_score_bucket", {**labels, "le": "0.95"}) == 3
    store = ResultsStore(cfg.results_path)
    assert store.counts_per_key() == {rec(i).key: 3 for i in range(6)}
    assert registry.get_sample_value("ragtrace_queue_depth") == 0


async def test_redelivered_record_counts_once_and_skips_the_judge(tmp_path):
    """The same record delivered again (lease lapsed after scoring, or killed before ack)
    adds nothing to the metrics, also in a fresh process (new registry) on the same store."""
    cfg = config(tmp_path)
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    queue.put(rec(0))
    registry = CollectorRegistry()
    await drain(build_worker(cfg, registry, queue, judge=Judge()), queue)
    assert count(registry, "bleu") == 1

    # redelivery to the same process
    queue.put(rec(0))
    await drain(build_worker(cfg, registry, queue, judge=Judge()), queue)
    assert count(registry, "bleu") == 1 and queue.depth() == 0

    # redelivery after a restart: fresh registry, same results store
    fresh = CollectorRegistry()
    queue.put(rec(0))
    queue.put(rec(2))
    await drain(build_worker(cfg, fresh, queue, judge=Judge()), queue)
    assert count(fresh, "bleu") == 1  # only rec(2) is new
    assert ResultsStore(cfg.results_path).counts_per_key() == {rec(0).key: 3, rec(2).key: 3}


async def test_two_deliveries_at_once_take_turns(tmp_path):
    """The same record leased twice in one batch (a retried put): the second delivery waits for the
    first, finds its results recorded, and neither pays the judge nor counts again."""
    cfg = config(tmp_path)
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    assert queue.put(rec(0)) and queue.put(rec(0))
    registry = CollectorRegistry()
    worker = build_worker(cfg, registry, queue, judge=Judge())
    calls = []

    async def slow_evaluate(record, metrics, judge, options):
        calls.append(list(metrics))
        await asyncio.sleep(0.2)  # both deliveries are in flight meanwhile
        return await evaluate_record(record, metrics, judge, options)

    worker.evaluate = slow_evaluate
    await drain(worker, queue)
    assert calls == [LEXICAL] and queue.depth() == 0
    assert all(count(registry, m) == 1 for m in LEXICAL)


async def test_only_missing_metrics_are_scored_on_redelivery(tmp_path):
    cfg = config(tmp_path)
    store = ResultsStore(cfg.results_path)
    record = rec(0)
    store.add(record, await evaluate_record(record, ["bleu"], Judge()), "judge")
    store.close()
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    queue.put(record)
    registry = CollectorRegistry()
    await drain(build_worker(cfg, registry, queue, judge=Judge()), queue)
    assert count(registry, "bleu") == 0 and count(registry, "rouge") == 1 and count(registry, "levenshtein") == 1


async def test_per_pipeline_metric_lists(tmp_path):
    cfg = config(tmp_path, pipelines={"chat": ["levenshtein"]})
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    queue.put(rec(0, pipeline="chat"))
    queue.put(rec(2, pipeline="qa"))
    registry = CollectorRegistry()
    await drain(build_worker(cfg, registry, queue, judge=Judge()), queue)
    assert count(registry, "levenshtein") == 2 and count(registry, "bleu") == 1
    assert registry.get_sample_value("ragtrace_records_scored_total", {"pipeline": "chat"}) == 1


async def test_skipped_metrics_are_counted_and_stored(tmp_path):
    cfg = config(tmp_path, metrics=["bleu", "faithfulness"])
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    queue.put(RagRecord(trace_id="f" * 32, user_input="q", response="a"))  # no reference, no contexts
    registry = CollectorRegistry()
    await drain(build_worker(cfg, registry, queue, judge=Judge()), queue)
    assert count(registry, "bleu", "skipped") == 1 and count(registry, "faithfulness", "skipped") == 1
    assert {r.status for r in ResultsStore(cfg.results_path).get("f" * 32)} == {"skipped"}


def test_unknown_metric_in_config_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="faithfullness"):
        build_worker(
            config(tmp_path, metrics=["faithfullness"]),
            CollectorRegistry(),
            SQLiteQueue(tmp_path / "q.sqlite"),
            judge=Judge(),
        )


async def test_stop_releases_in_flight_records(tmp_path):
    """A record still being scored when the drain timeout ends goes back to the queue at once."""
    cfg = config(tmp_path)
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    queue.put(rec(0))
    registry = CollectorRegistry()
    worker = build_worker(cfg, registry, queue, judge=Judge())
    started = asyncio.Event()
    real = worker.evaluate

    async def slow(record, metrics, judge, options):
        started.set()
        await asyncio.sleep(30)
        return await real(record, metrics, judge, options)

    worker.evaluate = slow
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 5)
    await worker.stop(drain_timeout=0.2)
    await task
    assert queue.depth() == 1
    (again,) = queue.lease(1, 30)  # immediately visible again, not after the 30 s lease
    assert again.attempts == 2
    assert registry.get_sample_value("ragtrace_records_released_total", {"reason": "shutdown"}) == 1
    assert count(registry, "bleu") == 0


async def test_a_record_that_keeps_crashing_ends_as_errors(tmp_path):
    cfg = config(tmp_path)
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    queue.put(rec(0))
    registry = CollectorRegistry()
    worker = build_worker(cfg, registry, queue, judge=Judge())
    worker.max_attempts = 2
    worker.backoff.initial = 0.05

    async def broken(record, metrics, judge, options):
        raise RuntimeError("metric bug")

    worker.evaluate = broken
    await drain(worker, queue)
    assert queue.depth() == 0
    assert count(registry, "bleu", "error") == 1
    assert registry.get_sample_value("ragtrace_records_released_total", {"reason": "error"}) == 1


async def test_slow_scoring_keeps_its_lease(tmp_path):
    """Scoring that outlasts the lease renews it: the record is not redelivered mid-scoring."""
    cfg = config(tmp_path, lease_seconds=0.3, concurrency=2)
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    queue.put(rec(0))
    registry = CollectorRegistry()
    worker = build_worker(cfg, registry, queue, judge=Judge())
    worker.poll_interval = 0.05
    calls = []
    real = worker.evaluate

    async def slow(record, metrics, judge, options):
        calls.append(record.key)
        await asyncio.sleep(1.0)  # > 3 leases
        return await real(record, metrics, judge, options)

    worker.evaluate = slow
    await drain(worker, queue)
    assert calls == [rec(0).key] and count(registry, "bleu") == 1


async def test_judge_latency_counts_decisions_not_declines(tmp_path):
    """The base Judge declines every decision: faithfulness is skipped and no latency is observed;
    lexical metrics need no decision at all."""
    from ragtrace_collector.exporter.prometheus import eval_metrics_for
    from ragtrace_collector.scoring.worker import TimedJudge

    registry = CollectorRegistry()
    timed = TimedJudge(Judge(), eval_metrics_for(registry))
    results = await evaluate_record(rec(0, retrieved_contexts=["the answer is 0"]), ["faithfulness", "bleu"], timed)
    assert [r.status for r in results] == ["skipped", "scored"]
    assert registry.get_sample_value("ragtrace_judge_latency_seconds_count", {"judge": "judge"}) == 0
    assert isinstance(timed, Judge) and timed.name == "judge"


async def test_judge_outage_keeps_what_scored_and_waits_for_the_rest(tmp_path):
    """bleu needs no judge and is recorded at once; faithfulness meets a 503 from the LLM judge
    (litellm against the scripted server): the record goes back to the queue, the worker backs off,
    and the redelivery scores only faithfulness."""
    from tests.support.scripted_openai import Reply, ScriptedOpenAI

    def judge_reply(body):
        return {"claims": [{"claim": "the answer is 0"}], "verdicts": [{"id": 1, "verdict": "yes"}]}

    with ScriptedOpenAI(responder=judge_reply) as server:
        server.push(Reply(status=503))
        cfg = load_config(
            overrides={
                "data_dir": str(tmp_path / "data"),
                "judge": {"model": "openai/judge", "base_url": server.base_url, "api_key": "k", "max_retries": 0},
                "scoring": {"metrics": ["faithfulness", "bleu"], "backoff_initial_seconds": 0.2},
            },
            environ={},
        )
        queue = SQLiteQueue(tmp_path / "q.sqlite")
        queue.put(rec(0, retrieved_contexts=["the answer is 0"]))
        registry = CollectorRegistry()
        worker = build_worker(cfg, registry, queue)
        worker.poll_interval = 0.05
        await drain(worker, queue, timeout=20)
    assert queue.depth() == 0
    assert count(registry, "bleu") == 1 and count(registry, "faithfulness") == 1
    assert count(registry, "faithfulness", "error") == 0
    assert registry.get_sample_value("ragtrace_records_released_total", {"reason": "judge_unavailable"}) == 1
    assert (
        registry.get_sample_value("ragtrace_judge_errors_total", {"judge": "openai/judge", "kind": "unavailable"}) == 1
    )
    rows = {r.metric: r for r in ResultsStore(cfg.results_path).get(rec(0).key)}
    assert rows["faithfulness"].score == 1.0 and rows["bleu"].score == 1.0


async def test_records_without_ids_are_keyed_by_content(tmp_path):
    cfg = config(tmp_path)
    queue = SQLiteQueue(tmp_path / "q.sqlite")
    a = RagRecord(user_input="q", response="x y z", reference="x y z")
    b = RagRecord(user_input="q", response="other", reference="x y z")
    for r in (a, b, a):
        queue.put(r)
    registry = CollectorRegistry()
    await drain(build_worker(cfg, registry, queue, judge=Judge()), queue)
    assert count(registry, "bleu") == 2  # a twice counts once; b is a different record
    keys = ResultsStore(cfg.results_path).counts_per_key()
    assert len(keys) == 2 and all(k.startswith("sha256:") for k in keys)
