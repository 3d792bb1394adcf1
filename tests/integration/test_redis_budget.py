"""The cluster-wide judge budget against a real redis-server: several processes' budgets share one limit."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from ragtrace_collector.config import BudgetConfig, SamplingConfig
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.processor.sampling.budget import BUDGET_RECORDS, BUDGET_TOKENS
from ragtrace_collector.processor.sampling.redis_budget import RedisBudget
from ragtrace_collector.processor.sampling.sampler import Sampler, budget_from_config
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


def url(redis_server) -> str:
    return f"{redis_server.url}?prefix={uuid.uuid4().hex[:8]}"


def test_records_per_minute_holds_across_processes(redis_server):
    u = url(redis_server)
    budgets = [RedisBudget(u, records_per_minute=10) for _ in range(4)]
    outcomes: list[str | None] = []
    lock = threading.Lock()

    def hammer(b: RedisBudget) -> None:
        for _ in range(25):
            r = b.acquire()
            with lock:
                outcomes.append(r)

    threads = [threading.Thread(target=hammer, args=(b,)) for b in budgets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count(None) == 10
    assert outcomes.count(BUDGET_RECORDS) == 90
    assert budgets[0].usage() == (10, 0)


def test_window_slides(redis_server):
    u = url(redis_server)
    b = RedisBudget(u, records_per_minute=2)
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    now = float(raw.time()[0])
    raw.zadd(b.records_key, {"old1": now - 61, "old2": now - 61})  # admitted over a minute ago
    assert b.acquire() is None and b.acquire() is None
    assert b.acquire() == BUDGET_RECORDS
    raw.zadd(b.records_key, {"recent": now - 30})
    assert b.usage()[0] == 3  # the window counts only the last 60 s


def test_tokens_per_hour_refuses_once_spent_anywhere(redis_server):
    u = url(redis_server)
    a, b = RedisBudget(u, judge_tokens_per_hour=100), RedisBudget(u, judge_tokens_per_hour=100)
    assert a.acquire() is None
    a.add_judge_tokens(60)
    assert b.acquire() is None
    b.add_judge_tokens(50)  # the admitted record's tokens land after admission
    assert a.acquire() == BUDGET_TOKENS and b.acquire() == BUDGET_TOKENS
    assert a.usage() == (0, 110)
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    minute = int(raw.time()[0]) // 60
    raw.hset(a.tokens_key, mapping={str(minute): 0, str(minute - 61): 999})  # an hour-old bucket no longer counts
    assert a.acquire() is None


def test_unlimited_budget_admits_without_redis_calls(redis_server):
    b = RedisBudget("redis://127.0.0.1:1/0")  # nothing listens there: never contacted
    assert all(b.acquire() is None for _ in range(100))


def test_redis_down_falls_back_to_a_local_share(tmp_path):
    srv = RedisServer(data_dir=tmp_path).start()
    try:
        b = RedisBudget.from_config(f"{srv.url}?prefix=x&receivers=2", BudgetConfig(records_per_minute=10))
        assert b.fallback.records_per_minute == 5
        b._breaker.retry_interval = 0.1
        assert b.acquire() is None
        srv.stop()
        t0 = time.monotonic()
        got = [b.acquire() for _ in range(10)]
        assert time.monotonic() - t0 < 2.0
        assert got.count(None) == 5 and b.fallback_decisions == 10  # half of the cluster's limit
        srv.start()
        time.sleep(0.15)
        assert b.acquire() is None and b.usage()[0] == 2  # back on the shared window (AOF kept the first)
    finally:
        srv.cleanup()


def test_sampler_with_shared_budget_counts_budget_drops(redis_server):
    cfg = SamplingConfig(rate=1.0, budget={"records_per_minute": 3})
    u = url(redis_server)
    samplers = [Sampler(cfg, budget_from_config(cfg, u)) for _ in range(2)]
    assert isinstance(samplers[0].budget, RedisBudget)
    decisions = [samplers[i % 2].decide(RagRecord(trace_id=f"{i:032x}")) for i in range(8)]
    assert [d.sampled for d in decisions].count(True) == 3
    assert {d.reason for d in decisions if not d.sampled} == {BUDGET_RECORDS}


def test_admitted_but_unscored_records_count_against_the_token_budget(redis_server):
    """Tokens arrive only after scoring; records admitted meanwhile count at the average cost."""
    u = url(redis_server)
    receivers = [RedisBudget(u, judge_tokens_per_hour=3000, initial_tokens_per_record=1000) for _ in range(2)]
    worker = RedisBudget(u, judge_tokens_per_hour=3000)
    got = [receivers[i % 2].acquire() for i in range(6)]
    assert got == [None, None, None, BUDGET_TOKENS, BUDGET_TOKENS, BUDGET_TOKENS]  # 3 × 1000 pending
    assert worker.pending() == 3
    worker.add_judge_tokens(500)  # one record scored: it cost 500, so the average is now 500
    assert worker.pending() == 2 and worker.usage() == (0, 500)
    # 500 spent + 2 pending × 500 = 1500: room for 3 more at 500 each.
    got = [receivers[i % 2].acquire() for i in range(5)]
    assert got.count(None) == 3 and worker.pending() == 5
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    raw.zadd(worker.pending_key, {"stale": float(raw.time()[0]) - 1000})  # a record lost long ago
    receivers[0].acquire()
    assert worker.pending() == 5  # forgotten after pending_seconds, not counted forever


def test_a_record_that_cost_no_tokens_leaves_the_pending_admissions(redis_server):
    u = url(redis_server)
    receiver = RedisBudget(u, judge_tokens_per_hour=3000, initial_tokens_per_record=1000)
    worker = RedisBudget(u, judge_tokens_per_hour=3000)
    assert [receiver.acquire() for _ in range(4)] == [None, None, None, BUDGET_TOKENS]
    for _ in range(3):
        worker.add_judge_tokens(0)  # scored without spending a token (every metric skipped)
    assert worker.pending() == 0 and worker.usage() == (0, 0)
    assert receiver.acquire() is None  # nothing spent, nothing pending: room again
