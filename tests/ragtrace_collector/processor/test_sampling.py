"""Sampling: deterministic rate by trace id, per-pipeline rates, always rules, budget, counted reasons."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import BudgetConfig, LimitsConfig, SamplingConfig
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.processor.sampling.budget import LocalBudget
from ragtrace_collector.processor.sampling.sampler import Sampler, in_rate_sample
from ragtrace_collector.telemetry.ingest import IngestMetrics
from tests.support.metric_samples import exposed


def tid(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def test_rate_is_deterministic_and_close_to_the_rate():
    rng = random.Random(7)
    ids = [tid(rng) for _ in range(20000)]
    picked = [t for t in ids if in_rate_sample(t, 0.25)]
    assert 0.23 < len(picked) / len(ids) < 0.27
    assert picked == [t for t in ids if in_rate_sample(t, 0.25)]
    # nested: everything in the 10% sample is in the 25% sample (same rule as TraceIdRatioBased)
    assert set(t for t in ids if in_rate_sample(t, 0.10)) <= set(picked)
    assert all(in_rate_sample(t, 1.0) for t in ids[:100])
    assert not any(in_rate_sample(t, 0.0) for t in ids[:100])


def test_per_pipeline_rate_weight_and_counters():
    registry = CollectorRegistry()
    metrics = IngestMetrics(registry)
    sampler = Sampler(SamplingConfig(rate=0.5, pipelines={"cheap": 0.1}), observer=metrics)
    rng = random.Random(1)
    kept = {"cheap": 0, "main": 0}
    for i in range(4000):
        pipeline = "cheap" if i % 2 else "main"
        record = RagRecord(trace_id=tid(rng), pipeline=pipeline)
        if sampler.sample(record):
            kept[pipeline] += 1
            assert record.sampling_weight == pytest.approx(10.0 if pipeline == "cheap" else 2.0)
    assert 150 < kept["cheap"] < 250 and 900 < kept["main"] < 1100
    sampled = registry.get_sample_value("ragtrace_traces_sampled_total", {"pipeline": "cheap", "reason": "rate"})
    dropped = registry.get_sample_value("ragtrace_traces_dropped_total", {"pipeline": "cheap", "reason": "rate"})
    assert sampled == kept["cheap"] and sampled + dropped == 2000


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"sample_requested": True}, "flagged"),
        ({"error": "TimeoutError: upstream"}, "error"),
        ({"reference": "gold answer"}, "reference"),
        ({"request_duration_seconds": 9.0}, "slow"),
        ({"retrieved_contexts": [{"content": "x", "score": 0.1}]}, "low_score"),
    ],
)
def test_always_rules_override_rate_with_weight_one(fields, reason):
    registry = CollectorRegistry()
    config = SamplingConfig(rate=0.0, always={"slower_than_seconds": 5.0, "top_score_below": 0.3})
    sampler = Sampler(config, observer=IngestMetrics(registry))
    record = RagRecord(trace_id="f" * 32, pipeline="p", **fields)
    assert sampler.sample(record)
    assert record.sampling_weight == 1.0
    assert registry.get_sample_value("ragtrace_traces_sampled_total", {"pipeline": "p", "reason": reason}) == 1


def test_rules_can_be_switched_off():
    config = SamplingConfig(rate=0.0, always={"errors": False, "with_reference": False, "flagged": False})
    sampler = Sampler(config)
    assert not sampler.sample(RagRecord(trace_id="f" * 32, error="x", reference="r", sample_requested=True))


def test_records_per_minute_budget_refills():
    now = [0.0]
    budget = LocalBudget(records_per_minute=3, clock=lambda: now[0])
    registry = CollectorRegistry()
    sampler = Sampler(SamplingConfig(rate=1.0), budget=budget, observer=IngestMetrics(registry))
    results = [sampler.sample(RagRecord(trace_id=f"{i:032x}", pipeline="p")) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert (
        registry.get_sample_value("ragtrace_traces_dropped_total", {"pipeline": "p", "reason": "budget_records"}) == 2
    )
    now[0] += 20.0  # one record's worth (3/min)
    assert sampler.sample(RagRecord(trace_id="a" * 32, pipeline="p"))
    assert not sampler.sample(RagRecord(trace_id="b" * 32, pipeline="p"))


def test_judge_token_budget_over_a_sliding_hour():
    now = [0.0]
    budget = LocalBudget(judge_tokens_per_hour=1000, clock=lambda: now[0])
    assert budget.acquire() is None
    budget.add_judge_tokens(600)
    now[0] += 1800
    budget.add_judge_tokens(500)
    assert budget.acquire() == "budget_tokens"
    now[0] += 1801  # the first 600 leave the window
    assert budget.acquire() is None


def test_a_chunk_counted_at_once_counts_what_one_at_a_time_does():
    # the sweep decides a chunk record by record (the budget is spent in order) and counts it once per pipeline,
    # outcome and reason: the counters, the bounded pipeline label's overflow included, must not tell the difference
    rng = random.Random(3)
    records = [
        RagRecord(
            trace_id=tid(rng),
            pipeline=rng.choice(["support", "search", "faq", "p4", "p5", None]),
            error=rng.choice([None, None, None, "boom"]),
        )
        for _ in range(900)
    ]
    config = SamplingConfig(rate=0.3, pipelines={"faq": 0.9}, budget=BudgetConfig(records_per_minute=120))
    limits = LimitsConfig(max_series_per_label_set=6)
    registries = CollectorRegistry(), CollectorRegistry()
    one, batch = (
        Sampler(config, LocalBudget(records_per_minute=120, clock=lambda: 0.0), IngestMetrics(r, limits=limits))
        for r in registries
    )
    singly = [one.select(r) for r in records]
    decided = [(r, batch.decide(r)) for r in records]
    batch.count(decided)
    assert [d for _, d in decided] == singly
    (each, _), (at_once, _) = (exposed(r) for r in registries)
    assert at_once == each
    assert any(k[0] == "ragtrace_metric_series_overflow_total" and v for k, v in each.items())
    assert any(k[0] == "ragtrace_traces_dropped_total" and ("reason", "budget_records") in k[1] for k in each)
