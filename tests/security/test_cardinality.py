"""Hostile traffic must not blow up, pin or poison the collector's own ``/metrics``.

Service, pipeline and model names come from whoever sends spans. Three attacks, each driven through a
real collector served on loopback (OTLP/HTTP in, ``/metrics`` scraped over HTTP) except the scoring side,
which is fed through its real metric objects and read from the real registry exposition:

* the product of bounded labels: 6 services x 50 pipelines x 30 models made ~680k series (a histogram's
  label combination is ~18 series), a 73 MB ``/metrics`` and scrapes past Prometheus's 10 s timeout;
* first-come label slots that never expire: junk names sent first keep a real pipeline in ``other``;
* label values exposed verbatim, terminal escapes and NUL included.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import unicodedata

import aiohttp
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from ragtrace_collector.config import load_config
from ragtrace_collector.exporter.prometheus import EvalMetrics
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.service.app import CollectorApp
from tests.support.assembly import ManualClock

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
PB = {"Content-Type": "application/x-protobuf"}
_ids = itertools.count(1)


def _attrs(values: dict[str, object]) -> list[KeyValue]:
    out = []
    for key, value in values.items():
        any_value = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=str(value))
        out.append(KeyValue(key=key, value=any_value))
    return out


def rag_trace(service: str, pipeline: str, model: str) -> ResourceSpans:
    """One complete RAG trace (pipeline root + generator) as the SDK names its attributes."""
    n = next(_ids)
    trace_id, root_id, gen_id = n.to_bytes(16, "big"), (2 * n).to_bytes(8, "big"), (2 * n + 1).to_bytes(8, "big")
    now = time.time_ns()
    root = Span(
        trace_id=trace_id,
        span_id=root_id,
        name="rag",
        start_time_unix_nano=now - 900_000_000,
        end_time_unix_nano=now,
        attributes=_attrs({"ragtrace.span.role": "pipeline", "ragtrace.pipeline.name": pipeline}),
    )
    gen = Span(
        trace_id=trace_id,
        span_id=gen_id,
        parent_span_id=root_id,
        name="answer",
        start_time_unix_nano=now - 800_000_000,
        end_time_unix_nano=now - 100_000_000,
        attributes=_attrs(
            {
                "ragtrace.span.role": "generator",
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": model,
                "gen_ai.response.time_to_first_chunk": "0.2",
                "gen_ai.usage.input_tokens": 300,
                "gen_ai.usage.output_tokens": 40,
            }
        ),
    )
    return ResourceSpans(
        resource=Resource(attributes=_attrs({"service.name": service})), scope_spans=[ScopeSpans(spans=[root, gen])]
    )


class Served:
    """A receiver-role collector on loopback, fed over OTLP/HTTP and scraped over HTTP."""

    def __init__(self, app: CollectorApp, session: aiohttp.ClientSession) -> None:
        self.app = app
        self.session = session
        self.sent = 0

    async def send(self, traces: list[tuple[str, str, str]], per_request: int = 100) -> None:
        for i in range(0, len(traces), per_request):
            request = ExportTraceServiceRequest(resource_spans=[rag_trace(*t) for t in traces[i : i + per_request]])
            body = request.SerializeToString()
            for _ in range(100):  # admission may shed (503) while the sweep catches up: a real client retries
                async with self.session.post(
                    f"http://127.0.0.1:{self.app.http_port}/v1/traces", data=body, headers=PB
                ) as r:
                    if r.status != 503:
                        assert r.status == 200, await r.text()
                        break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the collector kept shedding")
        self.sent += len(traces)
        await self.observed(self.sent)

    async def scrape(self, accept: str = OPENMETRICS) -> str:
        async with self.session.get(
            f"http://127.0.0.1:{self.app.metrics_port}/metrics", headers={"Accept": accept}
        ) as r:
            assert r.status == 200
            return await r.text()

    async def observed(self, n: int) -> None:
        """Wait until ``n`` traces have left assembly (the sweep observes each as it takes it; this counter
        has no traffic labels, so expiry never resets it)."""
        deadline = time.monotonic() + 8.0
        while True:
            got = sum(v for _, v in samples(await self.scrape(), "ragtrace_assembly_completed_total"))
            if got >= n or time.monotonic() > deadline:
                assert got == n, f"{got} of {n} traces completed"
                return
            await asyncio.sleep(0.05)


def samples(text: str, name: str | None = None) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every series in an OpenMetrics exposition (of ``name`` when given)."""
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if name is None or s.name == name
    ]


@pytest.fixture
async def served(tmp_path):
    apps: list[CollectorApp] = []
    session = aiohttp.ClientSession()

    async def start(clock: ManualClock | None = None, **limits: object) -> Served:
        overrides: dict[str, object] = {
            "role": "receiver",
            "data_dir": str(tmp_path / f"c{len(apps)}"),
            "listen": {"http_port": 0, "grpc_port": None, "metrics_port": 0},
            "assembly": {"grace_seconds": 0.0, "sweep_interval_seconds": 0.02},
        }
        if limits:
            overrides["limits"] = limits
        app = CollectorApp(load_config(overrides=overrides, environ={}))
        if clock is not None:
            app.metrics.clock = clock
        await app.start()
        apps.append(app)
        return Served(app, session)

    yield start
    await session.close()
    for app in apps:
        await app.stop(drain_timeout=1)


def shape(n: int, seed: int = 13) -> list[tuple[str, str, str]]:
    """``n`` traces spread over 6 services x 50 pipelines x 30 models (the issue's traffic)."""
    rng = random.Random(seed)
    return [(f"svc-{rng.randrange(6)}", f"pipe-{rng.randrange(50)}", f"model-{rng.randrange(30)}") for _ in range(n)]


async def test_label_product_is_bounded_in_series(served):
    # Reclaim off: a turned-away combination seen in three distinct seconds would take a slot and its victim's series
    # (counts and all) would go, so on a slow host "nothing lost" would not hold. Reclaim has tests of its own.
    collector = await served(label_reclaim_hits=0)
    await collector.send(shape(400))
    text = await collector.scrape()
    series = samples(text)
    # each label is within its own bound (6 <= 20, 50 <= 50, 30 <= 30); only their product explodes
    assert len(series) < 10_000, f"{len(series)} series, {len(text.encode()) / 1e6:.1f} MB of /metrics"
    overflow = {s["metric"]: v for s, v in samples(text, "ragtrace_metric_series_overflow_total")}
    assert overflow.get("ragtrace_time_to_first_token_seconds", 0) > 0
    received = samples(text, "ragtrace_traces_received_total")
    assert sum(v for _, v in received) == 400  # nothing lost: the rest is counted under "other"
    ttft = samples(text, "ragtrace_time_to_first_token_seconds_count")
    assert sum(v for _, v in ttft) == 400
    assert any(s == {"service": "other", "pipeline": "other", "model": "other"} for s, _ in ttft)


async def test_series_cap_is_configurable_and_counts_histogram_series(served):
    # 1000 series per label set: a {service,pipeline,model} combination of the ingest histograms and
    # counters is ~90 series, so only about ten combinations (plus the overflow one) fit
    collector = await served(max_series_per_label_set=1_000)
    await collector.send(shape(120, seed=5))
    text = await collector.scrape()
    combos = {tuple(sorted(s.items())) for s, _ in samples(text, "ragtrace_time_to_first_token_seconds_count")}
    assert 2 <= len(combos) <= 11
    per_model = [s for s in samples(text) if {"service", "pipeline", "model"} <= s[0].keys() and not s[0].get("metric")]
    assert len(per_model) <= 1_000 + 93  # the cap, plus the overflow combination's series


async def test_idle_label_slots_expire_and_their_series_go(served):
    clock = ManualClock()
    collector = await served(clock=clock)
    await collector.send([("bot", f"junk-{i:02}", "m") for i in range(50)])  # every pipeline slot, first
    await collector.send([("bot", "checkout", "m")])
    received = dict((s["pipeline"], v) for s, v in samples(await collector.scrape(), "ragtrace_traces_received_total"))
    assert "checkout" not in received and received.get("other", 0) >= 1  # the attack works while junk is fresh

    clock.t += 3_600  # an hour later the junk has not been seen again; the real pipeline keeps sending
    await collector.send([("bot", "checkout", "m")])
    text = await collector.scrape()
    received = dict((s["pipeline"], v) for s, v in samples(text, "ragtrace_traces_received_total"))
    assert received.get("checkout") == 1
    assert "junk-" not in text  # idle slots' series are removed from the registry


HOSTILE_SERVICE = "bot\x1b]0;pwned\x07"  # OSC: retitles the terminal of whoever curls /metrics
HOSTILE_PIPELINE = "qa\x1b[2J\r\n" + "p" * 500  # CSI clear screen, CR LF, and very long
HOSTILE_MODEL = "m\x00\u202edel"  # NUL and a right-to-left override


def _unsafe(text: str) -> set[str]:
    """Characters that are neither printable nor the exposition's own line breaks."""
    return {c for c in text if c != "\n" and not c.isprintable() and unicodedata.category(c) != "Zs"}


async def test_label_values_are_sanitised(served):
    collector = await served()
    await collector.send([(HOSTILE_SERVICE, HOSTILE_PIPELINE, HOSTILE_MODEL)])
    for accept in (OPENMETRICS, "text/plain"):
        text = await collector.scrape(accept)
        assert not _unsafe(text), f"{accept}: {sorted(map(repr, _unsafe(text)))}"
    ttft = samples(await collector.scrape(), "ragtrace_time_to_first_token_seconds_count")
    (labels,) = [s for s, _ in ttft]
    assert labels["service"] == "bot_]0;pwned_"
    assert labels["pipeline"].startswith("qa_[2J__ppp") and len(labels["pipeline"]) == 128
    assert labels["model"] == "m__del"


def test_scoring_metrics_are_bounded_in_series():
    # the scoring side: score histograms by {metric, pipeline, judge}, pipeline names from the traffic
    registry = CollectorRegistry()
    m = EvalMetrics(registry)
    names = ("faithfulness", "answer_relevancy", "context_precision", "context_relevancy", "hallucination")
    for i in range(400):
        record = RagRecord(trace_id=f"{i + 1:032x}", pipeline=f"pipe-{i % 200}")
        m.observe_results(record, [MetricResult(name, "scored", 0.8) for name in names], "local")
    text = openmetrics_latest(registry).decode()
    families = ("ragtrace_eval_score", "ragtrace_eval_weight", "ragtrace_eval_weighted_score")
    scored = [s for f in text_string_to_metric_families(text) if f.name in families for s in f.samples]
    assert len(scored) < 3_000, f"{len(scored)} series of scores"
    assert sum(s.value for s in scored if s.name == "ragtrace_eval_score_count") == 2_000  # nothing lost
    overflow = {s["metric"]: v for s, v in samples(text, "ragtrace_metric_series_overflow_total")}
    assert overflow.get("ragtrace_eval_score", 0) > 0


async def test_a_steady_pipeline_wins_its_slot_back_from_a_junk_flood(served):
    # issue 33: one-shot junk names sent first filled every slot, and a steady pipeline arriving later stayed in
    # "other" until the junk idled out (label_idle_seconds, ten minutes). A name that keeps recurring must take the
    # slot of a one-shot one within a few of its requests, while the flood goes on and stays bounded.
    clock = ManualClock()
    # 500 series: 5 {service,pipeline,model} combinations of ~88 series fit, 13 {service,pipeline} ones of ~38
    collector = await served(clock=clock, max_series_per_label_set=500)
    await collector.send([("bot", f"junk-{i:02}", "m") for i in range(60)])  # every slot, pipeline label's too
    checkout = {"service": "bot", "pipeline": "checkout", "model": "m"}
    own_at = None
    for request in range(1, 11):  # one request a second, the flood sending fresh names in between
        clock.t += 1.0
        await collector.send([("bot", "checkout", "m")])
        ttft = samples(await collector.scrape(), "ragtrace_time_to_first_token_seconds_count")
        if any(s == checkout for s, _ in ttft):
            own_at = request
            break
        await collector.send([("bot", f"junk-{request}-{i}", "m") for i in range(20)])
    assert own_at is not None and own_at <= 3, f"still 'other' after {request} requests"

    for _ in range(2):  # from then on its samples are its own
        clock.t += 1.0
        await collector.send([("bot", "checkout", "m")])
        await collector.send([("bot", f"junk-late-{i}", "m") for i in range(20)])
    text = await collector.scrape()
    counts = {s["pipeline"]: v for s, v in samples(text, "ragtrace_time_to_first_token_seconds_count")}
    assert counts["checkout"] == 3
    received = dict((s["pipeline"], v) for s, v in samples(text, "ragtrace_traces_received_total"))
    assert received["checkout"] == 3 and received["other"] > 0  # its earlier requests, and the flood, in "other"
    per_model = samples(text, "ragtrace_time_to_first_token_seconds_count")
    per_pipeline = samples(text, "ragtrace_traces_received_total")
    assert len(per_model) <= 5 + 1 and len(per_pipeline) <= 13 + 1  # the budget (plus "other"), flood or not
    evicted = {s["metric"]: v for s, v in samples(text, "ragtrace_metric_series_evicted_total")}
    assert evicted.get("ragtrace_time_to_first_token_seconds", 0) >= 1  # the one-shot slot it took is counted
