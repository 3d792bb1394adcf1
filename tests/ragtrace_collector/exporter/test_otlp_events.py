"""gen_ai.evaluation.result events: sent over real OTLP/HTTP, inside the scored trace."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace_collector.exporter.otlp_events import EvaluationEvents, explanation, make_exporter
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from tests.support.otlp_sink import OtlpSink

TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT = "b7ad6b7169203331"


@pytest.fixture
def sink():
    s = OtlpSink()
    yield s
    s.stop()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_event_over_real_otlp_parented_to_root_span(sink, protocol):
    port = sink.start_http() if protocol == "http/protobuf" else sink.start_grpc()
    events = EvaluationEvents(f"http://127.0.0.1:{port}", protocol=protocol)
    record = RagRecord(trace_id=TRACE, pipeline="qa", metadata={"root_span_id": ROOT})
    results = [
        MetricResult("faithfulness", "scored", 0.5, label="fail", details={"unsupported": ["Paris is in Spain"]}),
        MetricResult("context_recall", "skipped", reason="no reference"),
    ]
    assert events.emit(record, results, "local") == 1
    events.flush()
    events.shutdown()
    (span,) = sink.wait_for_spans(1, timeout=5)
    assert span["trace_id"] == TRACE and span["parent_span_id"] == ROOT
    assert span["name"] == "gen_ai.evaluation faithfulness"
    (event,) = span["events"]
    assert event["name"] == "gen_ai.evaluation.result"
    assert event["attributes"] == {
        "gen_ai.evaluation.name": "faithfulness",
        "gen_ai.evaluation.score.value": 0.5,
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": "Unsupported claims: Paris is in Spain",
    }
    assert span["resource"]["service.name"] == "ragtrace-collector"
    assert span["attributes"]["ragtrace.pipeline.name"] == "qa"


def test_without_root_span_the_event_is_still_in_the_scored_trace():
    exporter = InMemorySpanExporter()
    events = EvaluationEvents(exporter=exporter, batch=False)
    record = RagRecord(trace_id=TRACE)
    events.emit(
        record,
        [MetricResult("answer_relevancy", "scored", 0.9), MetricResult("bleu", "error", reason="boom")],
        "gpt-4o-mini",
    )
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["gen_ai.evaluation answer_relevancy", "gen_ai.evaluation bleu"]
    assert all(format(s.context.trace_id, "032x") == TRACE and s.parent is None for s in spans)
    assert spans[1].events[0].attributes["error.type"] == "judge_error"
    assert spans[1].events[0].attributes["gen_ai.evaluation.explanation"] == "boom"
    # the forced trace id does not leak into unrelated spans
    other = events.tracer.start_span("other")
    other.end()
    assert format(other.context.trace_id, "032x") != TRACE


def test_records_without_a_trace_id_emit_nothing():
    exporter = InMemorySpanExporter()
    events = EvaluationEvents(exporter=exporter, batch=False)
    assert events.emit(RagRecord(id="row-1"), [MetricResult("bleu", "scored", 0.1)], "local") == 0
    assert exporter.get_finished_spans() == ()


def test_dead_downstream_does_not_raise():
    events = EvaluationEvents("http://127.0.0.1:9", timeout=0.5)  # discard port: nothing listens
    events.emit(RagRecord(trace_id=TRACE), [MetricResult("bleu", "scored", 0.1)], "local")
    events.provider.force_flush(2000)
    events.shutdown()


def test_exporter_choice_and_explanations():
    assert make_exporter("http://h:4318")._endpoint == "http://h:4318/v1/traces"
    assert make_exporter("http://h:4318/custom/path")._endpoint == "http://h:4318/custom/path"
    with pytest.raises(ValueError):
        make_exporter("http://h:4318", protocol="thrift")
    assert explanation(MetricResult("x", "scored", 1.0, reason="fine")) == "fine"
