"""gen_ai.evaluation.result events: OTLP log records sent over real OTLP/HTTP and gRPC, tied to the scored trace.

Events, not spans: the scored trace gains no span, so its duration (what a trace UI shows as latency) is unchanged.
"""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from ragtrace_collector.exporter.otlp_events import (
    MAX_EXPLANATION_CHARS,
    EvaluationEvents,
    explanation,
    logs_endpoint,
    make_exporter,
    result_attributes,
)
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.options import ScoringOptions
from tests.support.claim_verdicts import CONTRADICTED, NOT_FOUND, scored
from tests.support.otlp_sink import OtlpSink

TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT = "b7ad6b7169203331"
SEMCONV = {
    "gen_ai.evaluation.name": "faithfulness",
    "gen_ai.evaluation.score.value": 0.5,
    "gen_ai.evaluation.score.label": "fail",
    "gen_ai.evaluation.explanation": "Unsupported claims: Paris is in Spain",
}


@pytest.fixture
def sink():
    s = OtlpSink()
    yield s
    s.stop()


def results() -> list[MetricResult]:
    return [
        MetricResult("faithfulness", "scored", 0.5, label="fail", details={"unsupported": ["Paris is in Spain"]}),
        MetricResult("context_recall", "skipped", reason="no reference"),
    ]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_event_over_real_otlp_carries_the_scored_trace_and_span(sink, protocol):
    port = sink.start_http() if protocol == "http/protobuf" else sink.start_grpc()
    events = EvaluationEvents(f"http://127.0.0.1:{port}", protocol=protocol)
    record = RagRecord(trace_id=TRACE, pipeline="qa", service="shop", metadata={"root_span_id": ROOT})
    assert events.emit(record, results(), "local") == 1  # the skipped result is not an evaluation
    events.flush()
    events.shutdown()
    (event,) = sink.wait_for_logs(1, timeout=5)
    assert event["event_name"] == "gen_ai.evaluation.result"
    assert event["trace_id"] == TRACE and event["span_id"] == ROOT
    assert event["attributes"] == {
        **SEMCONV,
        "ragtrace.judge": "local",
        "ragtrace.pipeline.name": "qa",
        "ragtrace.evaluated.service": "shop",
        "ragtrace.evaluation.id": f"{TRACE}/faithfulness",  # one per result, whichever delivery
    }
    assert event["severity_text"] == "INFO" and event["severity_number"] == 9
    assert event["resource"]["service.name"] == "ragtrace-collector"
    assert event["scope"] == "ragtrace.collector.evaluation"
    assert 0 < event["time_ns"] <= time.time_ns()
    assert sink.spans() == [] and sink.bad_requests == 0  # no span: nothing is added to any trace


def test_a_traces_url_from_the_span_era_config_is_sent_to_logs(sink):
    port = sink.start_http()
    events = EvaluationEvents(f"http://127.0.0.1:{port}/v1/traces")  # what collector.example.yaml used to suggest
    events.emit(RagRecord(trace_id=TRACE), results(), "local")
    events.flush()
    events.shutdown()
    (event,) = sink.wait_for_logs(1, timeout=5)
    assert event["trace_id"] == TRACE and sink.bad_requests == 0


def test_scoring_leaves_the_scored_trace_unchanged(sink):
    """A traced request and its scores sent to the same backend: the trace keeps its spans and its duration."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    port = sink.start_http()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("rag") as root, tracer.start_as_current_span("generate"):
        time.sleep(0.02)
    provider.shutdown()
    trace_id = format(root.get_span_context().trace_id, "032x")
    root_id = format(root.get_span_context().span_id, "016x")

    def trace_view() -> tuple[int, int]:
        spans = [s for s in sink.spans() if s["trace_id"] == trace_id]
        return len(spans), max(s["end_ns"] for s in spans) - min(s["start_ns"] for s in spans)

    before = trace_view()
    time.sleep(0.2)  # scoring happens later than the request: a span stamped now would stretch the trace
    events = EvaluationEvents(f"http://127.0.0.1:{port}", batch=False)
    record = RagRecord(trace_id=trace_id, metadata={"root_span_id": root_id})
    assert events.emit(record, [MetricResult("answer_relevancy", "scored", 0.9)], "local") == 1
    events.shutdown()
    (event,) = sink.wait_for_logs(1, timeout=5)
    assert (event["trace_id"], event["span_id"]) == (trace_id, root_id)
    assert trace_view() == before and before[0] == 2 and before[1] < 0.2e9


def test_without_root_span_the_event_still_carries_the_trace():
    exporter = InMemoryLogRecordExporter()
    events = EvaluationEvents(exporter=exporter, batch=False)
    events.emit(
        RagRecord(trace_id=TRACE),
        [MetricResult("answer_relevancy", "scored", 0.9), MetricResult("bleu", "error", reason="boom")],
        "gpt-4o-mini",
    )
    logs = [r.log_record for r in exporter.get_finished_logs()]
    assert [r.attributes["gen_ai.evaluation.name"] for r in logs] == ["answer_relevancy", "bleu"]
    assert all(format(r.trace_id, "032x") == TRACE and r.span_id == 0 for r in logs)
    assert all(r.event_name == "gen_ai.evaluation.result" for r in logs)
    assert logs[1].attributes["error.type"] == "judge_error"
    assert logs[1].attributes["gen_ai.evaluation.explanation"] == "boom"
    assert logs[1].severity_text == "WARN" and "gen_ai.evaluation.score.value" not in logs[1].attributes


def test_records_without_a_trace_id_emit_nothing():
    exporter = InMemoryLogRecordExporter()
    events = EvaluationEvents(exporter=exporter, batch=False)
    assert events.emit(RagRecord(id="row-1"), [MetricResult("bleu", "scored", 0.1)], "local") == 0
    assert exporter.get_finished_logs() == ()


def test_dead_downstream_neither_raises_nor_blocks():
    events = EvaluationEvents("http://127.0.0.1:9", timeout=0.5)  # discard port: nothing listens
    start = time.perf_counter()
    for _ in range(50):
        events.emit(RagRecord(trace_id=TRACE), [MetricResult("bleu", "scored", 0.1)], "local")
    assert time.perf_counter() - start < 0.5  # emit only queues
    events.provider.force_flush(2000)
    events.shutdown()


def test_exporter_choice_and_explanations():
    assert logs_endpoint("http://h:4318") == "http://h:4318/v1/logs"
    assert logs_endpoint("http://h:4318/") == "http://h:4318/v1/logs"
    assert logs_endpoint("http://h:4318/v1/traces") == "http://h:4318/v1/logs"
    assert logs_endpoint("https://h/otlp/v1/traces") == "https://h/otlp/v1/logs"
    assert logs_endpoint("http://h:4318/custom/path") == "http://h:4318/custom/path"
    assert make_exporter("http://h:4318")._endpoint == "http://h:4318/v1/logs"
    with pytest.raises(ValueError):
        make_exporter("http://h:4318", protocol="thrift")
    assert explanation(MetricResult("x", "scored", 1.0, reason="fine")) == "fine"


# The explanation of a record with a contradicted and a not-found claim (the local judge's three verdicts)
THREE_VERDICTS = (
    f"Contradicted: {CONTRADICTED} (contradicted by context #2: '…for two years…' (P=0.04)); "
    f"Not found in the contexts: {NOT_FOUND}"
)


def test_explanation_says_which_claims_are_contradicted_and_which_not_found():
    faithfulness, hallucination = scored()
    assert explanation(faithfulness) == explanation(hallucination) == THREE_VERDICTS
    assert result_attributes(faithfulness)["gen_ai.evaluation.explanation"] == THREE_VERDICTS
    # listed in the other order, contradicted still first
    claims = list(reversed(faithfulness.details["claims"]))
    reordered = MetricResult("faithfulness", "scored", 0.3, details={**faithfulness.details, "claims": claims})
    assert explanation(reordered) == THREE_VERDICTS
    # idk counted as supported: only the contradicted claim is a problem
    (counted,) = scored(["faithfulness"], options=ScoringOptions(idk_counts_as_supported=True))
    assert explanation(counted) == THREE_VERDICTS.split("; Not found")[0]


def test_an_llm_judges_no_is_unsupported_unless_its_reason_says_contradicted():
    faithfulness, _ = scored(llm_style=True)
    assert explanation(faithfulness) == (
        f"Unsupported: {CONTRADICTED} (the contexts do not say this); "
        f"Unsupported: {NOT_FOUND} (the contexts do not say this)"
    )
    said = {"statement": "Paris is in Spain", "verdict": "no", "reason": "Contradicted: the context says France"}
    idk = {"statement": "It rains there", "verdict": "idk"}
    bare = {"statement": "Paris is big", "verdict": "no"}
    result = MetricResult("faithfulness", "scored", 0.0, details={"claims": [idk, bare, said]})
    assert explanation(result) == (
        "Contradicted: Paris is in Spain (Contradicted: the context says France); Unsupported: Paris is big; "
        "Not found in the contexts: It rains there"
    )


def test_explanation_falls_back_without_per_claim_verdicts_and_is_capped():
    # statements only (older hallucination details, other metrics): as before
    listed = MetricResult("hallucination", "scored", 1.0, details={"unsupported": ["a", "b"]})
    assert explanation(listed) == "Unsupported claims: a; b"
    legacy = MetricResult("faithfulness", "scored", 0.0, details={"unsupported_claims": ["x"]})
    assert explanation(legacy) == "Unsupported claims: x"
    # every claim supported: the reason
    fine = MetricResult(
        "faithfulness", "scored", 1.0, reason="ok", details={"claims": [{"statement": "a", "verdict": "yes"}]}
    )
    assert explanation(fine) == "ok"
    # summarization against the user input: not found in the source; its idk claims count as aligned
    summary = {
        "source": "user_input",
        "idk_counts_as_supported": True,
        "claims": [{"statement": "s1", "verdict": "idk"}, {"statement": "s2", "verdict": "no"}],
    }
    assert explanation(MetricResult("summarization", "scored", 0.5, details=summary)) == "Unsupported: s2"
    summary["idk_counts_as_supported"] = False
    assert explanation(MetricResult("summarization", "scored", 0.5, details=summary)) == (
        "Unsupported: s2; Not found in the source: s1"
    )
    many = [{"statement": f"claim {i} " + "x" * 50, "verdict": "idk"} for i in range(100)]
    capped = explanation(MetricResult("faithfulness", "scored", 0.0, details={"claims": many}))
    assert len(capped) == MAX_EXPLANATION_CHARS and capped.endswith("…")
    assert capped.startswith("Not found in the contexts: claim 0 ")
