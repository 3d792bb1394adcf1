"""Ingest metrics: every record observed with its trace-id exemplar, GenAI buckets, bounded labels, OpenMetrics."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from ragtrace_collector.config import LimitsConfig
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.service.app import metrics_response
from ragtrace_collector.telemetry.ingest import DURATION_BUCKETS, TOKEN_BUCKETS, TPOT_BUCKETS, IngestMetrics
from tests.support.metric_samples import exposed

TID = "4bf92f3577b34da6a3ce929d0e0e4736"


def record(**kw) -> RagRecord:
    base = dict(
        trace_id=TID,
        service="bot",
        pipeline="support",
        model="m",
        ttft_seconds=0.05,
        tpot_seconds=0.02,
        request_duration_seconds=1.5,
        retrieval_duration_seconds=0.1,
        generation_duration_seconds=1.2,
        input_tokens=300,
        output_tokens=40,
    )
    base.update(kw)
    return RagRecord(**base)


def test_every_field_observed_with_exemplar():
    registry = CollectorRegistry()
    m = IngestMetrics(registry)
    m.observe_record(record())
    m.observe_record(record(trace_id="a" * 32, ttft_seconds=None, error="boom"))
    spm = {"service": "bot", "pipeline": "support", "model": "m"}
    sp = {"service": "bot", "pipeline": "support"}
    g = registry.get_sample_value
    assert g("ragtrace_time_to_first_token_seconds_count", spm) == 1
    assert g("ragtrace_time_to_first_token_seconds_bucket", {**spm, "le": "0.08"}) == 1
    assert g("ragtrace_time_per_output_token_seconds_bucket", {**spm, "le": "0.025"}) == 2
    assert g("ragtrace_request_duration_seconds_sum", sp) == 3.0
    assert g("ragtrace_retrieval_duration_seconds_count", sp) == 2
    assert g("ragtrace_generation_duration_seconds_count", spm) == 2
    assert g("ragtrace_request_tokens_sum", {**spm, "kind": "input"}) == 600
    assert g("ragtrace_tokens_total", {**spm, "kind": "output"}) == 80
    assert g("ragtrace_traces_received_total", sp) == 2
    assert g("ragtrace_records_with_error_total", sp) == 1

    text = metrics_response(registry, "application/openmetrics-text; version=1.0.0").body.decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    ttft = families["ragtrace_time_to_first_token_seconds"]
    exemplars = [s.exemplar for s in ttft.samples if s.exemplar is not None]
    assert [e.labels for e in exemplars] == [{"trace_id": TID}]
    buckets = [float(s.labels["le"]) for s in ttft.samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"]
    assert tuple(buckets) == DURATION_BUCKETS
    tpot = [
        float(s.labels["le"])
        for s in families["ragtrace_time_per_output_token_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]
    assert tuple(tpot) == TPOT_BUCKETS
    toks = {
        float(s.labels["le"])
        for s in families["ragtrace_request_tokens"].samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    }
    assert toks == set(map(float, TOKEN_BUCKETS))


def test_content_negotiation():
    registry = CollectorRegistry()
    IngestMetrics(registry).observe_record(record())
    om = metrics_response(registry, "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert f'# {{trace_id="{TID}"}}' in om.body.decode()
    plain = metrics_response(registry, None)
    assert plain.headers["Content-Type"].startswith("text/plain")
    assert "trace_id" not in plain.body.decode()  # exemplars only exist in OpenMetrics


def test_label_values_are_bounded():
    registry = CollectorRegistry()
    m = IngestMetrics(registry, max_pipelines=3)
    for i in range(10):
        m.observe_record(record(pipeline=f"p{i}", trace_id=f"{i:032x}"))
    m.observe_record(record(pipeline=None, service=None, model=None))
    g = registry.get_sample_value
    assert g("ragtrace_traces_received_total", {"service": "bot", "pipeline": "p2"}) == 1
    assert g("ragtrace_traces_received_total", {"service": "bot", "pipeline": "other"}) == 7
    assert g("ragtrace_traces_received_total", {"service": "unknown", "pipeline": "unknown"}) == 1
    pipelines = {
        s.labels["pipeline"] for f in registry.collect() if f.name == "ragtrace_traces_received" for s in f.samples
    }
    assert pipelines == {"p0", "p1", "p2", "other", "unknown"}


def test_observing_a_sweep_at_once_exposes_what_observing_each_record_does():
    # observe_records looks each label combination up once and stamps only the last exemplar of each bucket: the
    # scrape must not tell the difference, overflowing label sets, records without a trace id and absent values
    # included
    rng = random.Random(7)
    values = [None, 0.0, 0.005, 0.01, 0.03, 0.2, 0.5, 1.28, 3.0, 200.0]
    tokens = [None, 0, 1, 3, 70, 5000, 10**8]
    records = [
        record(
            trace_id=rng.choice([None, "", f"{i:032x}"]) if i % 5 == 0 else f"{i:032x}",
            service=rng.choice(["bot", "api", None]),
            pipeline=rng.choice(["support", "search", "faq", "p4", "p5", None]),
            model=rng.choice(["m", "n", "o"]),
            ttft_seconds=rng.choice(values),
            tpot_seconds=rng.choice(values),
            request_duration_seconds=rng.choice(values),
            retrieval_duration_seconds=rng.choice(values),
            generation_duration_seconds=rng.choice(values),
            input_tokens=rng.choice(tokens),
            output_tokens=rng.choice(tokens),
            error=rng.choice([None, None, "boom"]),
        )
        for i in range(600)
    ]
    limits = LimitsConfig(max_series_per_label_set=200)  # a handful of combinations, then "other"
    each, at_once = CollectorRegistry(), CollectorRegistry()
    one = IngestMetrics(each, max_pipelines=4, limits=limits, clock=lambda: 100.0)
    batch = IngestMetrics(at_once, max_pipelines=4, limits=limits, clock=lambda: 100.0)
    for r in records:
        one.observe_record(r)
    for start in range(0, len(records), 256):  # the sweep's chunks
        batch.observe_records(records[start : start + 256])
    (v_each, x_each), (v_once, x_once) = exposed(each), exposed(at_once)
    assert v_once == v_each
    assert x_once == x_each
    assert v_each[("ragtrace_metric_series_overflow_total", (("metric", "ragtrace_time_to_first_token_seconds"),))] > 0
    assert len(x_each) > 20
