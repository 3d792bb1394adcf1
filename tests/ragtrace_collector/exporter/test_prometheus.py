"""EvalMetrics: scores with trace_id exemplars, outcomes, judge spending, queue gauges at scrape time."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from ragtrace_collector.config import LimitsConfig
from ragtrace_collector.exporter.prometheus import SCORE_BUCKETS, EvalMetrics, eval_metrics_for, watch_queue
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import JudgeUsage, MetricResult
from ragtrace_collector.queue.sqlite import SQLiteQueue

TRACE = "0af7651916cd43dd8448eb211c80319c"


def test_alert_thresholds_are_bucket_edges():
    for threshold in (0.5, 0.7, 0.8, 0.9, 0.95, 1.0):
        assert threshold in SCORE_BUCKETS


NO_SERVICE = {"service": "unknown"}  # records without a service.name


def test_scores_outcomes_usage_and_exemplar():
    registry = CollectorRegistry()
    m = EvalMetrics(registry)
    record = RagRecord(trace_id=TRACE, pipeline="qa", service="shop")
    results = [
        MetricResult(
            "faithfulness",
            "scored",
            0.62,
            usage=JudgeUsage(calls=2, prompt_tokens=100, completion_tokens=20, cost_usd=0.001),
        ),
        MetricResult("context_recall", "skipped", reason="no reference"),
        MetricResult("answer_relevancy", "error", reason="bad reply"),
    ]
    assert m.observe_results(record, results, "local") == 3
    labels = {"metric": "faithfulness", "service": "shop", "pipeline": "qa", "judge": "local"}
    assert registry.get_sample_value("ragtrace_eval_score_count", labels) == 1
    assert registry.get_sample_value("ragtrace_eval_score_bucket", {**labels, "le": "0.6"}) == 0
    assert registry.get_sample_value("ragtrace_eval_score_bucket", {**labels, "le": "0.65"}) == 1
    for metric, outcome in [("faithfulness", "scored"), ("context_recall", "skipped"), ("answer_relevancy", "error")]:
        assert registry.get_sample_value("ragtrace_evaluations_total", {"metric": metric, "outcome": outcome}) == 1
    assert registry.get_sample_value("ragtrace_judge_calls_total", {"judge": "local"}) == 2
    assert registry.get_sample_value("ragtrace_judge_tokens_total", {"judge": "local", "kind": "prompt"}) == 100
    assert registry.get_sample_value("ragtrace_judge_tokens_total", {"judge": "local", "kind": "completion"}) == 20
    assert registry.get_sample_value("ragtrace_judge_cost_usd_total", {"judge": "local"}) == pytest.approx(0.001)
    assert registry.get_sample_value("ragtrace_judge_errors_total", {"judge": "local", "kind": "failed"}) == 1
    assert registry.get_sample_value("ragtrace_records_scored_total", {"pipeline": "qa"}) == 1
    text = openmetrics_latest(registry).decode()
    line = next(x for x in text.splitlines() if x.startswith("ragtrace_eval_score_bucket{") and 'le="0.65"' in x)
    assert f'# {{trace_id="{TRACE}"}} 0.62' in line


def test_only_new_results_count():
    registry = CollectorRegistry()
    m = EvalMetrics(registry)
    record = RagRecord(trace_id=TRACE)
    results = [MetricResult("faithfulness", "scored", 1.0), MetricResult("bleu", "scored", 0.3)]
    assert m.observe_results(record, results, "local", new=[False, True]) == 1
    assert (
        registry.get_sample_value("ragtrace_evaluations_total", {"metric": "faithfulness", "outcome": "scored"}) is None
    )
    assert (
        registry.get_sample_value(
            "ragtrace_eval_score_count", {**NO_SERVICE, "metric": "bleu", "pipeline": "unknown", "judge": "local"}
        )
        == 1
    )
    assert m.observe_results(record, results, "local", new=[False, False]) == 0
    assert registry.get_sample_value("ragtrace_records_scored_total", {"pipeline": "unknown"}) == 1


def test_pipeline_label_is_bounded():
    # pipeline names come from the traffic: past the bound they share one "other" series
    registry = CollectorRegistry()
    m = EvalMetrics(registry, max_pipelines=3)
    for i in range(10):
        m.observe_results(RagRecord(trace_id=TRACE, pipeline=f"p{i}"), [MetricResult("bleu", "scored", 0.5)], "local")
    series = {
        s.labels["pipeline"]
        for fam in registry.collect()
        if fam.name == "ragtrace_eval_score"
        for s in fam.samples
        if s.name == "ragtrace_eval_score_count"
    }
    assert series == {"p0", "p1", "p2", "other"}
    labels = {"metric": "bleu", "service": "unknown", "pipeline": "other", "judge": "local"}
    assert registry.get_sample_value("ragtrace_eval_score_count", labels) == 7
    assert registry.get_sample_value("ragtrace_records_scored_total", {"pipeline": "other"}) == 7


def test_service_label_on_quality_series_is_bounded():
    """Scores carry the record's service (the dashboards' service filter applies to them), bounded like the
    pipeline: past ``max_services`` names one ``other`` series, nothing lost; no service is ``unknown``."""
    registry = CollectorRegistry()
    m = EvalMetrics(registry, max_services=2)
    for i in range(6):
        record = RagRecord(trace_id=TRACE, pipeline="qa", service=f"svc{i}", sampling_weight=2.0)
        m.observe_results(record, [MetricResult("faithfulness", "scored", 0.5)], "local")
    m.observe_results(RagRecord(trace_id=TRACE, pipeline="qa"), [MetricResult("faithfulness", "scored", 1.0)], "j")
    for family in ("ragtrace_eval_score", "ragtrace_eval_weight", "ragtrace_eval_weighted_score"):
        services = {
            s.labels["service"]: s.value
            for fam in registry.collect()
            if fam.name == family
            for s in fam.samples
            if s.name in (f"{family}_count", f"{family}_total")
        }
        expected = {"svc0": 1.0, "svc1": 1.0, "other": 4.0, "unknown": 1.0}  # weighted: 2 x 0.5, or 1 x 1.0
        if family == "ragtrace_eval_weight":
            expected = {k: 2 * v if k != "unknown" else v for k, v in expected.items()}  # weight 2 (1 unknown)
        assert services == pytest.approx(expected), family
    labels = {"metric": "faithfulness", "service": "svc1", "pipeline": "qa", "judge": "local"}
    assert registry.get_sample_value("ragtrace_eval_score_count", labels) == 1


def test_service_and_pipeline_are_bounded_as_a_product():
    """20 services x 50 pipelines, each bounded alone, would be 1000 combinations of ~25 series per family set:
    the label set caps the product at ``max_series_per_label_set``, the rest recorded as ``other``, nothing lost."""
    registry = CollectorRegistry()
    m = EvalMetrics(registry, limits=LimitsConfig(max_series_per_label_set=500))
    for i in range(1000):
        record = RagRecord(trace_id=TRACE, service=f"svc{i % 20}", pipeline=f"p{i // 20}")
        m.observe_results(record, [MetricResult("faithfulness", "scored", 0.9)], "local")
    counts = [
        s
        for fam in registry.collect()
        if fam.name == "ragtrace_eval_score"
        for s in fam.samples
        if s.name == "ragtrace_eval_score_count"
    ]
    assert sum(s.value for s in counts) == 1000
    cost = len(SCORE_BUCKETS) + 1 + 3 + 2 * 2  # the histogram (+Inf, _sum, _count, _created) and two counters
    assert len(counts) * cost <= 500 + cost  # the spill combination is always admitted
    assert any(s.labels["service"] == "other" and s.labels["pipeline"] == "other" for s in counts)


def test_one_instance_per_registry():
    registry = CollectorRegistry()
    assert eval_metrics_for(registry) is eval_metrics_for(registry)
    with pytest.raises(ValueError):
        EvalMetrics(registry)  # the names are taken: use eval_metrics_for


def test_queue_gauges_read_at_scrape_time(tmp_path):
    registry = CollectorRegistry()
    q = SQLiteQueue(tmp_path / "q.sqlite", max_depth=2)
    watch_queue(registry, q)
    watch_queue(registry, q)  # idempotent
    assert registry.get_sample_value("ragtrace_queue_depth") == 0
    assert registry.get_sample_value("ragtrace_queue_oldest_age_seconds") == 0
    for i in range(3):
        q.put(RagRecord(trace_id=f"{i:032x}"))
    assert registry.get_sample_value("ragtrace_queue_depth") == 2
    assert registry.get_sample_value("ragtrace_queue_dropped_total") == 1
    assert registry.get_sample_value("ragtrace_queue_corrupt_total") == 0
    assert registry.get_sample_value("ragtrace_queue_oldest_age_seconds") >= 0


def test_sampling_weights_give_an_unbiased_mean():
    """Pipeline a sampled at 100% scores 1.0, pipeline b at 10% (weight 10) scores 0.0: per request
    served, the mean is (1*1 + 10*0) / 11, not the naive 0.5."""
    registry = CollectorRegistry()
    m = EvalMetrics(registry)
    m.observe_results(RagRecord(trace_id=TRACE, pipeline="p"), [MetricResult("faithfulness", "scored", 1.0)], "local")
    m.observe_results(
        RagRecord(trace_id=TRACE, pipeline="p", sampling_weight=10.0),
        [MetricResult("faithfulness", "scored", 0.0)],
        "local",
    )
    labels = {"metric": "faithfulness", "service": "unknown", "pipeline": "p", "judge": "local"}
    weight = registry.get_sample_value("ragtrace_eval_weight_total", labels)
    weighted = registry.get_sample_value("ragtrace_eval_weighted_score_total", labels)
    assert weight == 11 and weighted / weight == pytest.approx(1 / 11)


def test_latency_in_seconds_stays_out_of_the_quality_score_histogram():
    registry = CollectorRegistry()
    m = EvalMetrics(registry)
    record = RagRecord(trace_id=TRACE, pipeline="qa", sampling_weight=2.0)
    m.observe_results(
        record,
        [MetricResult("latency", "scored", 2.27, higher_is_better=False), MetricResult("faithfulness", "scored", 0.5)],
        "local",
    )
    assert (
        registry.get_sample_value(
            "ragtrace_eval_score_count", {**NO_SERVICE, "metric": "latency", "pipeline": "qa", "judge": "local"}
        )
        is None
    )
    assert (
        registry.get_sample_value(
            "ragtrace_eval_weight_total", {**NO_SERVICE, "metric": "latency", "pipeline": "qa", "judge": "local"}
        )
        is None
    )
    assert registry.get_sample_value("ragtrace_eval_latency_seconds_count", {"pipeline": "qa"}) == 1
    assert registry.get_sample_value("ragtrace_eval_latency_seconds_sum", {"pipeline": "qa"}) == pytest.approx(2.27)
    assert (
        registry.get_sample_value(
            "ragtrace_eval_score_count", {**NO_SERVICE, "metric": "faithfulness", "pipeline": "qa", "judge": "local"}
        )
        == 1
    )
    assert registry.get_sample_value("ragtrace_evaluations_total", {"metric": "latency", "outcome": "scored"}) == 1
